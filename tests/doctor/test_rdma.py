"""rdma family from /sys/class/infiniband fixture trees, memlock, NCCL_IB_HCA syntax."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpnet.doctor import rdma
from tests.doctor.helpers import Tree, inputs

LIMITS = """\
Limit                     Soft Limit           Hard Limit           Units
Max open files            1024                 1048576              files
Max locked memory         8388608              8388608              bytes
"""


def ib_tree(tmp_path: Path, ports: dict[str, str], limits: str = LIMITS) -> Tree:
    tree = Tree(tmp_path)
    for key, state in ports.items():
        dev, port = key.split(":")
        base = f"sys/class/infiniband/{dev}/ports/{port}/"
        tree.write(base + "state", state)
        tree.write(base + "phys_state", "5: LinkUp" if "ACTIVE" in state else "3: Disabled")
        tree.write(base + "link_layer", "Ethernet" if dev.startswith("roce") else "InfiniBand")
        tree.write(base + "rate", "100 Gb/sec (4X EDR)")
    tree.write("proc/self/limits", limits)
    return tree


def test_no_devices_skip(tmp_path: Path) -> None:
    host = Tree(tmp_path).host()
    assert all(c.run(host, inputs()).status == "skip" for c in rdma.CHECKS)


def test_ports_active_down_and_partial(tmp_path: Path) -> None:
    r = rdma.Devices().run(ib_tree(tmp_path, {"mlx5_0:1": "4: ACTIVE"}).host(), inputs())
    assert r.status == "pass" and r.facts["rdma"] == ["mlx5_0:1 ACTIVE InfiniBand 100 Gb/sec "
                                                      "(4X EDR)"]
    r = rdma.Devices().run(ib_tree(tmp_path / "b", {"mlx5_0:1": "1: DOWN"}).host(), inputs())
    assert r.status == "fail" and "NCCL_IB_DISABLE=1" in r.fix
    tree = ib_tree(tmp_path / "c", {"mlx5_0:1": "4: ACTIVE", "mlx5_1:1": "1: DOWN"})
    r = rdma.Devices().run(tree.host(), inputs())
    assert r.status == "warn" and "mlx5_1:1 (DOWN)" in r.summary
    assert r.fix == "exclude them: export NCCL_IB_HCA==mlx5_0:1"


def test_memlock(tmp_path: Path) -> None:
    tree = ib_tree(tmp_path, {"mlx5_0:1": "4: ACTIVE"})
    r = rdma.Memlock().run(tree.host(), inputs())
    assert r.status == "warn" and "memlock unlimited" in r.fix
    tree = ib_tree(tmp_path / "u", {"mlx5_0:1": "4: ACTIVE"},
                   LIMITS.replace("8388608              8388608", "unlimited  unlimited"))
    assert rdma.Memlock().run(tree.host(), inputs()).status == "pass"


@pytest.mark.parametrize(("value", "status"), [
    ("mlx5_0", "pass"), ("mlx5", "pass"), ("=mlx5_0:1", "pass"), ("^mlx5_9", "pass"),
    ("mlx5_0:1,mlx5_1:1", "fail"), ("=mlx5", "fail"), ("mlx5_0:x", "fail"), ("", "fail"),
    ("mlx5_0 mlx5_1", "fail"),
])
def test_nccl_ib_hca(tmp_path: Path, value: str, status: str) -> None:
    tree = ib_tree(tmp_path, {"mlx5_0:1": "4: ACTIVE"})
    r = rdma.IbHca().run(tree.host(environ={"NCCL_IB_HCA": value}), inputs())
    assert r.status == status, r

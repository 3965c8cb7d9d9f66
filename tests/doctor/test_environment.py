"""environment family: debug leftovers and IFNAME variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpnet.doctor import environment
from tests.doctor.helpers import Tree, inputs


def test_debug_leftovers_warn_with_unset_fix(tmp_path: Path) -> None:
    env = {"NCCL_P2P_DISABLE": "1", "NCCL_IB_DISABLE": "0", "NCCL_DEBUG": "TRACE",
           "CUDA_LAUNCH_BLOCKING": "1", "NCCL_DEBUG_FILE": "/tmp/x"}
    r = environment.DebugLeftovers().run(Tree(tmp_path).host(environ=env), inputs())
    assert r.status == "warn"
    assert r.fix.startswith("unset NCCL_P2P_DISABLE CUDA_LAUNCH_BLOCKING NCCL_DEBUG")
    assert "NCCL_IB_DISABLE" not in r.summary  # =0 is harmless
    clean = Tree(tmp_path).host(environ={"NCCL_DEBUG": "WARN", "NCCL_IB_DISABLE": "0"})
    assert environment.DebugLeftovers().run(clean, inputs()).status == "pass"


@pytest.mark.parametrize(("env", "status", "needle"), [
    ({}, "pass", "not set"),
    ({"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "eth"}, "pass", ""),
    ({"NCCL_SOCKET_IFNAME": "^docker,lo"}, "pass", ""),
    ({"NCCL_SOCKET_IFNAME": "=eth"}, "fail", "matches no interface"),
    ({"NCCL_SOCKET_IFNAME": "^eth,lo"}, "fail", "excludes every interface"),
    ({"GLOO_SOCKET_IFNAME": "^docker"}, "fail", "takes exact names"),
    ({"GLOO_SOCKET_IFNAME": "ens3"}, "fail", "no interface ens3"),
    ({"GLOO_SOCKET_IFNAME": "eth0,lo"}, "pass", ""),
    ({"TP_SOCKET_IFNAME": "eth0,lo"}, "fail", "not an interface name"),
    ({"NCCL_SOCKET_IFNAME": "eth0 "}, "pass", ""),
    ({"NCCL_SOCKET_IFNAME": "eth0;lo"}, "fail", "not an interface name"),
])
def test_ifname_vars(tmp_path: Path, env: dict[str, str], status: str, needle: str) -> None:
    r = environment.IfnameVars().run(Tree(tmp_path).host(environ=env), inputs())
    assert r.status == status, r
    assert needle in r.summary
    if status == "fail":
        assert "GLOO_SOCKET_IFNAME=eth0" in r.fix

"""The pure builders: torchrun and mpirun command lines, placement warnings, batch scripts."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest

from ddpnet.config import DistConfig
from ddpnet.errors import ConfigError
from ddpnet.launch.command import (
    Host,
    LaunchConfig,
    MpirunConfig,
    NNodes,
    Target,
    build_mpirun,
    build_torchrun,
    parse_hosts,
    rank0_warnings,
    shell_line,
)
from ddpnet.launch.plan import auto_nproc, make_config, parse_nproc, per_node
from ddpnet.launch.sbatch import SbatchConfig, render
from ddpnet.launch.wrap import torch_env

IFACE = MappingProxyType({"GLOO_SOCKET_IFNAME": "eth1", "NCCL_SOCKET_IFNAME": "eth1"})


def cfg(**kw: Any) -> LaunchConfig:
    base: dict[str, Any] = dict(target=Target("train.py", ("--lr", "0.1")), nproc_per_node=4,
                                nnodes=NNodes(2, 2), node_rank=1, master_addr="10.0.0.1",
                                master_port=29500, python="py", iface_env=IFACE)
    base.update(kw)
    return LaunchConfig(**base)


def test_static_torchrun_pins_node_rank_and_master() -> None:
    argv, env = build_torchrun(cfg())
    assert argv == ["py", "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node",
                    "4", "--node-rank", "1", "--master-addr", "10.0.0.1", "--master-port",
                    "29500", "--max-restarts", "0", "train.py", "--lr", "0.1"]
    assert env["GLOO_SOCKET_IFNAME"] == "eth1" and env["NCCL_SOCKET_IFNAME"] == "eth1"


def test_c10d_torchrun_uses_an_endpoint_and_allows_elastic_nodes() -> None:
    argv, _ = build_torchrun(cfg(rdzv="c10d", nnodes=NNodes(1, 4), run_id="job7",
                                 master_addr="fe80::1", max_restarts=3))
    joined = " ".join(argv)
    assert "--nnodes 1:4" in joined and "--node-rank" not in joined
    assert "--rdzv-backend c10d --rdzv-endpoint [fe80::1]:29500 --rdzv-id job7" in joined
    assert "--max-restarts 3" in joined


@pytest.mark.parametrize("target, tail", [
    (Target("pkg.train", ("a",), module=True), ["-m", "pkg.train", "a"]),
    (Target("./run.sh", ("x",)), ["--no-python", "./run.sh", "x"]),
])
def test_targets(target: Target, tail: list[str]) -> None:
    assert build_torchrun(cfg(target=target))[0][-len(tail):] == tail


def test_target_parse() -> None:
    assert Target.parse(["--", "-m", "m", "x"]) == Target("m", ("x",), module=True)
    for bad in ([], ["--"], ["-m"]):
        with pytest.raises(ConfigError):
            Target.parse(bad)


@pytest.mark.parametrize("text, err", [("0", "asks for 0 nodes"), ("x", "not a node count"),
                                       ("4:2", "below the minimum"), ("-1", "not a node")])
def test_nnodes_bad(text: str, err: str) -> None:
    with pytest.raises(ConfigError, match=err):
        NNodes.parse(text)


def test_restarts_need_a_fresh_store_per_round() -> None:
    with pytest.raises(ConfigError, match="static rendezvous"):
        cfg(max_restarts=1)
    _, env = build_torchrun(cfg(rdzv="c10d", max_restarts=1))
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in build_torchrun(cfg(rdzv="c10d"))[1]


def test_bad_launch_combinations() -> None:
    with pytest.raises(ConfigError, match=r"outside 0\.\.1"):
        cfg(node_rank=2)
    with pytest.raises(ConfigError, match="elastic"):
        cfg(nnodes=NNodes(1, 2))
    with pytest.raises(ConfigError, match=r"1\.\.65535"):
        cfg(master_port=70000)


def test_hosts_parse_and_errors() -> None:
    assert parse_hosts("a:4,b") == (Host("a", 4), Host("b", 1))
    for bad, err in (("a:x", "not HOST"), ("a:0", "0 slots"), ("a,a", "twice"), ("", "not")):
        with pytest.raises(ConfigError, match=err):
            parse_hosts(bad)


def test_mpirun_forwards_variables_and_pins_the_interface() -> None:
    m = MpirunConfig(target=Target("train.py"), np=4, master_addr="h1", master_port=29600,
                     hosts=(Host("h1", 2), Host("h2", 2)), interface="eth1", python="py",
                     iface_env=IFACE, allow_run_as_root=True)
    argv, env = build_mpirun(m, {"NCCL_DEBUG": "INFO"})
    line = " ".join(argv)
    assert line.startswith("mpirun -np 4 --allow-run-as-root --host h1:2,h2:2 --map-by slot")
    assert "--mca btl_tcp_if_include eth1" in line and "--mca oob_tcp_if_include eth1" in line
    for var in ("MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME",
                "NCCL_DEBUG"):
        assert f"-x {var}" in line
    assert "-x TP_SOCKET_IFNAME" not in line  # not set: not forwarded
    assert argv[-5:] == ["py", "-m", "ddpnet", "exec", "--"] or argv[-1] == "train.py"
    assert env["MASTER_ADDR"] == "h1" and env["MASTER_PORT"] == "29600"
    with pytest.raises(ConfigError, match="do not fit"):
        MpirunConfig(target=Target("t.py"), np=5, master_addr="h1", master_port=1,
                     hosts=(Host("h1", 2), Host("h2", 2)))


def test_rank0_warnings() -> None:
    here = frozenset({"node0", "10.0.0.1"})
    assert rank0_warnings(cfg(node_rank=0), here) == []
    assert rank0_warnings(cfg(node_rank=1), frozenset({"node1"})) == []
    w = rank0_warnings(cfg(node_rank=0), frozenset({"node1", "10.0.0.2"}))
    assert len(w) == 1 and "MASTER_ADDR 10.0.0.1 is not one of its" in w[0]
    w = rank0_warnings(cfg(node_rank=1), here)
    assert "rank 0 will run on another node" in w[0]
    # a host name for MASTER_ADDR that resolves to this host counts as here
    assert rank0_warnings(cfg(node_rank=0, master_addr="node0.x"), here,
                          frozenset({"10.0.0.1"})) == []
    w = rank0_warnings(cfg(rdzv="c10d", nnodes=NNodes(2, 2)), here)
    assert "arrival order" in w[0]
    assert rank0_warnings(cfg(nnodes=NNodes(1, 1), node_rank=0), frozenset()) == []


def test_auto_nproc() -> None:
    assert auto_nproc({"CUDA_VISIBLE_DEVICES": "0,1,2"}, [])[0] == 3
    assert auto_nproc({}, ["nvidia0", "nvidia1", "nvidiactl", "null"])[0] == 2
    assert auto_nproc({"CUDA_VISIBLE_DEVICES": ""}, ["null"]) == (
        1, "auto: no GPU, one process per node")
    with pytest.raises(ConfigError):
        parse_nproc("0", {}, [])
    with pytest.raises(ConfigError):
        parse_nproc("many", {}, [])


def dist(**kw: Any) -> DistConfig:
    base: dict[str, Any] = dict(launcher="slurm", rank=1, world_size=2, local_rank=0,
                                local_world_size=1, node_rank=1, num_nodes=2,
                                master_addr="n1", master_port=15123, init_method="env://",
                                job_id="42",
                                sources=MappingProxyType({"node_rank": "SLURM_NODEID"}))
    base.update(kw)
    return DistConfig(**base)


def test_make_config_from_slurm_and_per_node() -> None:
    c = make_config(dist(), target=Target("t.py"), nproc=(2, "--nproc-per-node"),
                    nnodes=NNodes(2, 2), rdzv="static", max_restarts=0, python="py",
                    iface_env={})
    assert (c.node_rank, c.master_addr, c.master_port, c.run_id) == (1, "n1", 15123, "42")
    assert c.sources["node_rank"] == "SLURM_NODEID"
    nodes = per_node(c, all_nodes=True)
    assert [n["ranks"] for n in nodes] == [[0, 1], [2, 3]]
    assert per_node(c, all_nodes=False)[0]["node_rank"] == 1
    with pytest.raises(ConfigError, match="2 ddpnet launch processes on this node"):
        make_config(dist(local_world_size=2, world_size=4, rank=3, local_rank=1),
                    target=Target("t.py"), nproc=(2, "x"), nnodes=NNodes(2, 2),
                    rdzv="static", max_restarts=0, python="py", iface_env={})


def test_torch_env_for_the_wrapper() -> None:
    env = torch_env(dist(local_rank=0), {"GLOO_SOCKET_IFNAME": "ib0"})
    assert env["RANK"] == "1" and env["WORLD_SIZE"] == "2" and env["LOCAL_WORLD_SIZE"] == "1"
    assert env["MASTER_ADDR"] == "n1" and env["MASTER_PORT"] == "15123"
    assert env["GLOO_SOCKET_IFNAME"] == "ib0"


def test_shell_line_quotes() -> None:
    assert shell_line(["a", "b c"], {"X": "1 2"}) == "X='1 2' a 'b c'"


def sb(**kw: Any) -> SbatchConfig:
    base: dict[str, Any] = dict(target=Target("train.py", ("--lr", "1e-3")), nodes=2,
                                ntasks_per_node=4, python="/venv/bin/python")
    base.update(kw)
    return SbatchConfig(**base)


def test_sbatch_torchrun_layout() -> None:
    text = render(sb(gpus_per_node=4, partition="gpu", time="02:00:00"))
    assert text.startswith("#!/bin/bash\n")
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1",
                 "#SBATCH --gpus-per-node=4", "#SBATCH --partition=gpu",
                 "#SBATCH --time=02:00:00",
                 'MASTER_PORT=$("$PY" -m ddpnet.launch.port "$SLURM_JOB_ID")',
                 "export MASTER_ADDR MASTER_PORT"):
        assert line in text.splitlines(), line
    assert ('srun --ntasks-per-node=1 --kill-on-bad-exit=1 "$PY" -m ddpnet launch '
            "--nproc-per-node 4 --max-restarts 0 -- train.py --lr 1e-3") in text
    assert "ddpnet check" not in text and "scontrol requeue" not in text
    assert not [line for line in text.splitlines() if line.startswith("#SBATCH --signal")]
    assert "render with --requeue" in text  # the advice, as a comment
    assert "--cpus-per-task" in text  # the advice: one task runs all the node's ranks
    text = render(sb(cpus_per_task=16))
    assert "#SBATCH --cpus-per-task=16" in text
    assert "srun --ntasks-per-node=1 --cpus-per-task=16 --kill-on-bad-exit=1" in text


def test_sbatch_srun_layout_preflight_requeue() -> None:
    text = render(sb(engine="srun", preflight=True, requeue=True, ifname="ib0"))
    assert "#SBATCH --ntasks-per-node=4" in text
    assert '"$PY" -m ddpnet check' in text
    assert text.index("ddpnet check") < text.index("ddpnet exec")
    assert "#SBATCH --signal=USR1@90" in text and "#SBATCH --requeue" in text
    assert "trap" not in text  # SLURM signals the step's ranks itself (no B:)
    assert 'scontrol requeue "$SLURM_JOB_ID"' in text and "GLOO_SOCKET_IFNAME=ib0" in text


@pytest.mark.parametrize("kw, err", [
    (dict(nodes=0), "--nodes 0"),
    (dict(ntasks_per_node=None, ntasks=8), "unevenly"),
    (dict(ntasks=6), "contradicts"),
    (dict(gpus_per_node=2), "one GPU per rank"),
    (dict(time="2 hours"), "not a SLURM time"),
    (dict(partition="a\nb"), "spans lines"),
])
def test_sbatch_contradictions(kw: dict[str, Any], err: str) -> None:
    with pytest.raises(ConfigError, match=err):
        sb(**kw)

"""Each launcher's real variable set resolves to the right config, with sources."""

from __future__ import annotations

from typing import Any

import pytest

from ddpnet.env.detect import BY_NAME, detect_launcher
from ddpnet.env.resolve import resolve_config

# (id, environment as the launcher exports it, expected subset of DistConfig.to_dict())
CASES: list[tuple[str, dict[str, str], dict[str, Any]]] = [
    ("nothing", {}, dict(launcher="local", rank=0, world_size=1, local_rank=0,
                         local_world_size=1, node_rank=0, num_nodes=1,
                         master_addr="127.0.0.1", master_port=29500)),
    ("torchrun-2x2-node1", {
        "TORCHELASTIC_RUN_ID": "job7", "RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4",
        "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2",
        "ROLE_RANK": "3", "MASTER_ADDR": "10.1.0.1", "MASTER_PORT": "29400",
        "TORCHELASTIC_RESTART_COUNT": "0",
    }, dict(launcher="torchrun", rank=3, world_size=4, local_rank=1, local_world_size=2,
            node_rank=1, num_nodes=2, master_addr="10.1.0.1", master_port=29400,
            sources={"rank": "RANK", "node_rank": "GROUP_RANK"})),
    ("torchrun-inside-slurm", {
        "TORCHELASTIC_RUN_ID": "x", "RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8",
        "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1", "MASTER_ADDR": "gpu01",
        "MASTER_PORT": "29500", "SLURM_PROCID": "1", "SLURM_NTASKS": "2",
        "SLURM_STEP_ID": "0", "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "gpu[01-02]",
    }, dict(launcher="torchrun", rank=5, world_size=8, node_rank=1, num_nodes=2,
            local_world_size=4)),
    ("srun-2-nodes-2-tasks-each", {
        "SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
        "SLURM_NNODES": "2", "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "4242",
        "SLURM_STEP_NODELIST": "gpu[01-02]", "SLURM_JOB_NODELIST": "gpu[01-02]",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
    }, dict(launcher="slurm", rank=3, world_size=4, local_rank=1, local_world_size=2,
            node_rank=1, num_nodes=2, master_addr="gpu01", hosts=["gpu01", "gpu02"],
            sources={"master_addr": "derived", "master_port": "derived",
                     "hosts": "SLURM_STEP_NODELIST"})),
    ("srun-uneven-tasks", {
        "SLURM_PROCID": "4", "SLURM_NTASKS": "5", "SLURM_LOCALID": "0", "SLURM_NODEID": "2",
        "SLURM_NNODES": "3", "SLURM_STEP_ID": "1", "SLURM_JOB_ID": "99",
        "SLURM_JOB_NODELIST": "n[098-099],m1", "SLURM_TASKS_PER_NODE": "2(x2),1",
    }, dict(launcher="slurm", rank=4, local_world_size=1, node_rank=2,
            hosts=["n098", "n099", "m1"], master_addr="n098")),
    ("srun-master-addr-set", {
        "SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0", "SLURM_NODEID": "0",
        "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "a,b", "MASTER_ADDR": "10.9.9.9",
        "MASTER_PORT": "23456",
    }, dict(launcher="slurm", master_addr="10.9.9.9", master_port=23456, hosts=["a", "b"])),
    ("sbatch-script-without-srun-is-one-process-not-the-job-ranks", {
        "SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_JOB_ID": "5",
        "SLURM_JOB_NODELIST": "n[1-2]",
    }, dict(launcher="slurm", world_size=1, rank=0, num_nodes=1, master_addr="127.0.0.1",
            sources={"world_size": "SLURM batch step", "master_port": "derived"})),
    ("srun-step-with-batch-step-id-is-the-batch-step", {
        "SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_JOB_ID": "5",
        "SLURM_STEP_ID": "4294967294", "SLURM_JOB_NODELIST": "n[1-2]",
    }, dict(launcher="slurm", world_size=1)),
    ("openmpi-single-node", {
        "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    }, dict(launcher="openmpi", rank=1, world_size=2, local_rank=1, num_nodes=1,
            master_addr="127.0.0.1")),
    ("openmpi-two-nodes-inside-sbatch", {
        "OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
        "MASTER_ADDR": "node1", "MASTER_PORT": "29600",
        "SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "7",
    }, dict(launcher="openmpi", rank=5, world_size=8, node_rank=1, num_nodes=2,
            master_addr="node1", master_port=29600)),
    # mpirun in an sbatch script without MASTER_ADDR: rank 0 runs on the job's first node
    ("openmpi-inside-sbatch-master-from-the-job-nodelist", {
        "OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
        "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
        "SLURM_PROCID": "0", "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "gpu[07-08]",
    }, dict(launcher="openmpi", master_addr="gpu07", node_rank=1,
            sources={"master_addr": "derived"})),
    ("mpich-hydra", {
        "PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2",
        "MASTER_ADDR": "h0",
    }, dict(launcher="mpich", rank=2, world_size=4, local_rank=0, local_world_size=2,
            node_rank=1, num_nodes=2)),
    ("mvapich", {
        "MV2_COMM_WORLD_RANK": "0", "MV2_COMM_WORLD_SIZE": "2",
        "MV2_COMM_WORLD_LOCAL_RANK": "0", "MV2_COMM_WORLD_LOCAL_SIZE": "2",
    }, dict(launcher="mvapich", rank=0, world_size=2, num_nodes=1)),
    ("lsf-jsrun", {
        "LSB_JOBID": "1234", "JSM_NAMESPACE_RANK": "7", "JSM_NAMESPACE_SIZE": "12",
        "JSM_NAMESPACE_LOCAL_RANK": "1", "LSB_MCPU_HOSTS": "batch1 1 h1 42 h2 42 h3 42",
    }, dict(launcher="lsf", rank=7, world_size=12, local_world_size=4, node_rank=1,
            num_nodes=3, hosts=["h1", "h2", "h3"], master_addr="h1")),
    ("manual-guides-style", {
        "RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "192.168.1.100", "MASTER_PORT": "23456",
    }, dict(launcher="manual", rank=1, world_size=2, local_rank=0, local_world_size=1,
            node_rank=1, num_nodes=2, master_addr="192.168.1.100", master_port=23456)),
    ("manual-lab-style", {
        "RANK": "2", "WORLD_SIZE": "4", "MASTER_ADDR": "198.18.0.1", "NNODES": "4",
        "NODE_RANK": "2",
    }, dict(launcher="manual", node_rank=2, num_nodes=4, local_world_size=1,
            sources={"node_rank": "NODE_RANK", "num_nodes": "NNODES",
                     "local_world_size": "derived"})),
    ("mp-spawn-style-single-node", {
        "RANK": "3", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1",
    }, dict(launcher="manual", local_rank=3, num_nodes=1, node_rank=0)),
]


def _subset(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    for key, want in expected.items():
        if isinstance(want, dict):
            _subset(actual[key], want)
        else:
            assert actual[key] == want, (key, actual[key], want)


@pytest.mark.parametrize(("environ", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_launcher_resolution(environ: dict[str, str], expected: dict[str, Any]) -> None:
    cfg = resolve_config(environ, {})
    _subset(cfg.to_dict(), expected)
    # the launcher's own source is the marker variables that picked it
    assert cfg.sources["launcher"] == ", ".join(
        m for m in BY_NAME[cfg.launcher].markers if m in environ) or "no launcher variables set"
    assert set(cfg.sources) >= {"launcher", "rank", "world_size", "local_rank",
                                "local_world_size", "node_rank", "num_nodes", "master_addr",
                                "master_port", "init_method"}


def test_detection_reason_names_the_inner_launcher() -> None:
    cls, reason = detect_launcher({"TORCHELASTIC_RUN_ID": "r", "RANK": "0",
                                   "SLURM_PROCID": "0", "SLURM_NTASKS": "1",
                                   "SLURM_STEP_ID": "0"})
    assert cls.name == "torchrun"
    assert "wins over slurm" in reason


def test_salloc_shell_says_it_is_not_an_srun_step() -> None:
    # "no launcher variables set" was wrong there: SLURM_* are set, the process is no task
    cls, reason = detect_launcher({"SLURM_JOB_ID": "5", "SLURM_NNODES": "2",
                                   "SLURM_JOB_NODELIST": "n[1-2]"})
    assert cls.name == "local"
    assert "SLURM job 5" in reason and "srun" in reason
    assert detect_launcher({})[1] == "no launcher variables set: one local process"


def test_slurm_port_is_derived_outside_ephemeral_range_and_stable() -> None:
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0",
           "SLURM_JOB_ID": "918273", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NNODES": "2",
           "SLURM_NODEID": "0"}
    a = resolve_config(env, {}, port_range=(32768, 60999))
    b = resolve_config(env, {}, port_range=(32768, 60999))
    assert a.master_port == b.master_port
    assert not 32768 <= a.master_port <= 60999
    narrow = resolve_config(env, {}, port_range=(10000, 65000))
    assert not 10000 <= narrow.master_port <= 65000


def test_overrides_win_and_are_sourced_by_flag() -> None:
    cfg = resolve_config({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "a"},
                         {"rank": ("1", "--rank"), "master_port": ("1234", "--master-port")})
    assert (cfg.rank, cfg.sources["rank"]) == (1, "--rank")
    assert (cfg.master_port, cfg.sources["master_port"]) == (1234, "--master-port")


def test_tcp_init_method_sets_master_and_records_the_override() -> None:
    cfg = resolve_config({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "a"},
                         {"init_method": ("tcp://[fd00::1]:23456", "--init-method")})
    assert cfg.master_addr == "fd00::1" and cfg.master_port == 23456
    assert cfg.init_method == "tcp://[fd00::1]:23456"
    assert any("overrides MASTER_ADDR=a" in n for n in cfg.notes)


def test_file_init_method_checks_the_directory(tmp_path: Any) -> None:
    ok = resolve_config({}, {"init_method": (f"file://{tmp_path}/init", "--init-method")})
    assert ok.init_method == f"file://{tmp_path}/init"


def test_agreeing_rank_next_to_slurm_is_noted() -> None:
    cfg = resolve_config({"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0",
                          "RANK": "1", "WORLD_SIZE": "2", "SLURM_NNODES": "1"}, {})
    assert cfg.launcher == "slurm"
    assert any("RANK=1 agrees with SLURM_PROCID" in n for n in cfg.notes)

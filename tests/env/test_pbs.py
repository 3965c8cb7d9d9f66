"""PBS Professional / OpenPBS / Torque jobs, with a real PBS_NODEFILE on disk."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ddpnet.env.pbs import parse_nodefile, task_number
from ddpnet.env.resolve import resolve_config
from ddpnet.errors import ConfigError
from tests.conftest import RunCli, clean_environ
from tests.env.jsonstream import json_objects

#: generate_pbs_nodefile (openpbs src/resmom/start_exec.c): one line per vnode/MPI slot, short
#: host names, the first node first; here select=2:ncpus=2:mpiprocs=2
NODEFILE = "node01\nnode01\nnode02\nnode02\n"


def job_script(nodefile: Path) -> dict[str, str]:
    """The job script's variables as the MOM sets them (variables_else in start_exec.c)."""
    return {
        "PBS_JOBID": "1234.pbs-server", "PBS_JOBNAME": "ddp", "PBS_QUEUE": "workq",
        "PBS_JOBCOOKIE": "0123456789ABCDEF", "PBS_NODENUM": "0", "PBS_TASKNUM": "1",
        "PBS_MOMPORT": "15003", "PBS_NODEFILE": str(nodefile), "PBS_ENVIRONMENT": "PBS_BATCH",
        "NCPUS": "2", "OMP_NUM_THREADS": "2", "PBS_O_WORKDIR": "/home/u",
    }


@pytest.fixture
def nodefile(tmp_path: Path) -> Path:
    path = tmp_path / "1234.pbs-server"
    path.write_text(NODEFILE)
    return path


def test_job_script_is_one_process_with_the_allocation_noted(nodefile: Path) -> None:
    cfg = resolve_config(job_script(nodefile), {})
    assert (cfg.launcher, cfg.rank, cfg.world_size) == ("pbs", 0, 1)
    assert cfg.sources["world_size"] == "PBS job script"
    assert any("4 slots on 2 hosts node[01-02]" in n for n in cfg.notes)
    assert cfg.sources["master_port"] == "derived" and cfg.job_id == "1234.pbs-server"


def test_pbsdsh_u_task_is_one_rank_per_node(nodefile: Path) -> None:
    # OpenPBS writes a spawned task's PBS_TASKNUM in hex (start_exec.c: "%8.8X")
    env = {**job_script(nodefile), "PBS_NODENUM": "1", "PBS_TASKNUM": "0000000A"}
    cfg = resolve_config(env, {})
    assert (cfg.rank, cfg.world_size, cfg.node_rank, cfg.num_nodes) == (1, 2, 1, 2)
    assert cfg.hosts == ("node01", "node02") and cfg.master_addr == "node01"
    assert cfg.sources["rank"] == "PBS_NODENUM"


def test_torque_pbsdsh_task_is_one_rank_per_slot(nodefile: Path) -> None:
    # Torque adds PBS_VNODENUM (the node file line), PBS_NP, PBS_NUM_NODES, PBS_NUM_PPN
    env = {**job_script(nodefile), "PBS_NODENUM": "1", "PBS_TASKNUM": "5",
           "PBS_VNODENUM": "3", "PBS_NP": "4", "PBS_NUM_NODES": "2", "PBS_NUM_PPN": "2"}
    cfg = resolve_config(env, {})
    assert (cfg.rank, cfg.world_size, cfg.local_rank, cfg.local_world_size) == (3, 4, 1, 2)
    assert (cfg.node_rank, cfg.master_addr) == (1, "node01")


def test_a_task_on_another_node_is_never_the_job_script(nodefile: Path) -> None:
    # task ids count per node: a pbsdsh task on node 1 may be task 1 there
    env = {**job_script(nodefile), "PBS_NODENUM": "1", "PBS_TASKNUM": "1",
           "PBS_VNODENUM": "2"}
    cfg = resolve_config(env, {})
    assert (cfg.rank, cfg.world_size, cfg.node_rank) == (2, 4, 1)


def test_mpirun_inside_pbs_wins_and_is_nested(nodefile: Path) -> None:
    env = {**job_script(nodefile), "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
           "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
           "MASTER_ADDR": "node01"}
    cfg = resolve_config(env, {})
    assert (cfg.launcher, cfg.rank, cfg.node_rank) == ("openmpi", 3, 1)
    assert "wins over pbs" in cfg.notes[0] and not cfg.ambiguous


MPIRUN_RANK_3 = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
                 "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}


def test_mpirun_inside_pbs_takes_the_master_from_the_node_file(nodefile: Path) -> None:
    # mpirun (TM) maps ranks from the node file's first host: rank 0 runs on node01
    cfg = resolve_config({**job_script(nodefile), **MPIRUN_RANK_3}, {})
    assert (cfg.launcher, cfg.master_addr, cfg.sources["master_addr"]) == (
        "openmpi", "node01", "derived")
    assert any("PBS_NODEFILE of the enclosing pbs job: node01" in n for n in cfg.notes)


def test_mpirun_inside_pbs_with_a_broken_node_file_still_asks_for_master(
        tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="MASTER_ADDR is not set"):
        resolve_config({**job_script(tmp_path / "gone"), **MPIRUN_RANK_3}, {})


def test_the_file_is_read_through_the_edge_reader(tmp_path: Path) -> None:
    seen: list[str] = []

    def reader(path: str) -> str:
        seen.append(path)
        return NODEFILE

    env = job_script(tmp_path / "not-on-disk")
    assert resolve_config(env, {}, read_file=reader).launcher == "pbs"
    assert seen == [str(tmp_path / "not-on-disk")]


@pytest.mark.parametrize(("content", "needle"), [
    ("", "is empty"),
    ("\n\n", "is empty"),
    ("node01 slots=4\n", "not a host name"),
])
def test_bad_nodefile_content(tmp_path: Path, content: str, needle: str) -> None:
    path = tmp_path / "nodes"
    path.write_text(content)
    with pytest.raises(ConfigError) as info:
        resolve_config(job_script(path), {})
    assert needle in str(info.value) and info.value.hint


@pytest.mark.parametrize("which", ["missing", "directory"])
def test_unreadable_nodefile(tmp_path: Path, which: str) -> None:
    path = tmp_path / "nodes" if which == "missing" else tmp_path
    with pytest.raises(ConfigError) as info:
        resolve_config(job_script(path), {})
    assert f"PBS_NODEFILE={path}: cannot read it" in str(info.value)
    assert "inside the job" in info.value.hint


def test_a_fifo_named_as_nodefile_is_refused_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it would block until a writer came
    with pytest.raises(ConfigError, match="not a regular file"):
        resolve_config(job_script(fifo), {})


@pytest.mark.parametrize(("extra", "needle"), [
    ({"PBS_TASKNUM": "xyz"}, "PBS_TASKNUM"),
    ({"PBS_TASKNUM": "2", "PBS_NODENUM": "5"}, "PBS_NODENUM=5"),
    ({"PBS_TASKNUM": "2", "PBS_VNODENUM": "9"}, "PBS_VNODENUM=9"),
    ({"PBS_NODEFILE": ""}, "PBS_NODEFILE is empty"),
])
def test_bad_pbs_variables(nodefile: Path, extra: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_config({**job_script(nodefile), **extra}, {})
    assert needle in str(info.value)


def test_parsers() -> None:
    assert parse_nodefile(" a\n\na\nb \n") == ("a", "a", "b")
    assert task_number({}) == 1 and task_number({"PBS_TASKNUM": "00000002"}) == 2


def test_env_json_with_a_nodefile_on_disk(run_cli: RunCli, nodefile: Path) -> None:
    env = {**job_script(nodefile), "PBS_NODENUM": "1", "PBS_TASKNUM": "00000002"}
    proc = run_cli("env", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["launcher"], out["rank"], out["hosts"]) == ("pbs", 1, ["node01", "node02"])
    assert out["sources"]["hosts"] == "PBS_NODEFILE"
    assert out["sources"]["launcher"] == "PBS_JOBID, PBS_NODEFILE"  # what marked it


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="openmpi-bin not installed")
def test_real_mpirun_inside_a_pbs_job_resolves_as_openmpi(nodefile: Path) -> None:
    # a real mpirun started from the job script: its ranks carry PBS_* and OMPI_* at once
    env = {**job_script(nodefile), "MASTER_ADDR": "127.0.0.1"}
    proc = subprocess.run(
        ["mpirun", "-np", "2", "--allow-run-as-root", "--oversubscribe", "-x", "MASTER_ADDR",
         "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo",
         "--mca", "oob_tcp_if_include", "lo", "--mca", "plm", "rsh", "--mca", "ras", "^tm",
         sys.executable, "-m", "ddpnet", "env", "--json"],
        env=clean_environ(env), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    objs = json_objects(proc.stdout)
    assert sorted(o["rank"] for o in objs) == [0, 1]
    assert {o["launcher"] for o in objs} == {"openmpi"}
    assert all(o["ambiguous"] == [] and "wins over pbs" in o["notes"][0] for o in objs)


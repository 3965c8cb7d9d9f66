"""Real engines: torchrun and Open MPI started through ``ddpnet launch``, running an
unmodified env:// gloo script that all-reduces."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import RunCli

SCRIPT = str(Path(__file__).with_name("allreduce_script.py"))


def _lines(stdout: str) -> list[dict[str, object]]:
    return sorted((json.loads(line) for line in stdout.splitlines() if line.startswith("{")),
                  key=lambda o: int(str(o["rank"])))


def test_torchrun_two_local_ranks_all_reduce(run_cli: RunCli) -> None:
    proc = run_cli("launch", "--nproc-per-node", "2", "--master-port", "29631",
                   "--ifname", "lo", "--", SCRIPT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    objs = _lines(proc.stdout)
    assert [o["rank"] for o in objs] == [0, 1]
    assert {o["world_size"] for o in objs} == {2}
    assert [o["local_rank"] for o in objs] == ["0", "1"]
    assert {o["sum"] for o in objs} == {3.0}
    assert {o["gloo_ifname"] for o in objs} == {"lo"}
    assert {o["master"] for o in objs} == {"127.0.0.1:29631"}


def test_local_n_is_the_mp_spawn_pattern(run_cli: RunCli) -> None:
    proc = run_cli("launch", "--local", "2", "--master-port", "29632", "--", SCRIPT,
                   env={"SLURM_JOB_ID": "77", "SLURM_PROCID": "0", "SLURM_NNODES": "4"},
                   timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert [o["sum"] for o in _lines(proc.stdout)] == [3.0, 3.0]


def test_max_restarts_restarts_a_failed_worker_once(run_cli: RunCli, tmp_path: Path) -> None:
    marker = tmp_path / "failed-once"
    proc = run_cli("launch", "--nproc-per-node", "2", "--master-port", "29633",
                   "--max-restarts", "1", "--", SCRIPT,
                   env={"FAIL_ONCE_MARKER": str(marker)}, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert marker.exists()
    objs = _lines(proc.stdout)
    assert [o["rank"] for o in objs] == [0, 1]
    assert {o["restart"] for o in objs} == {"1"}  # the second attempt finished


def test_worker_failure_without_restarts_is_the_exit_code(run_cli: RunCli,
                                                          tmp_path: Path) -> None:
    proc = run_cli("launch", "--nproc-per-node", "2", "--master-port", "29634", "--",
                   SCRIPT, env={"FAIL_ONCE_MARKER": str(tmp_path / "m")}, timeout=180)
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])  # torchrun's failure
    assert "ChildFailedError" in proc.stderr or "exitcode" in proc.stderr


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="openmpi-bin not installed")
def test_mpirun_two_ranks_all_reduce_through_the_exec_wrapper(run_cli: RunCli) -> None:
    proc = run_cli("launch", "--via", "mpirun", "--nproc-per-node", "2", "--ifname", "lo",
                   "--master-port", "29635", "--allow-run-as-root", "--oversubscribe", "--",
                   SCRIPT, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    objs = _lines(proc.stdout)
    assert [o["rank"] for o in objs] == [0, 1]
    assert {o["launcher"] for o in objs} == {"openmpi"}
    assert {o["sum"] for o in objs} == {3.0}
    assert {o["gloo_ifname"] for o in objs} == {"lo"}
    assert [o["local_rank"] for o in objs] == ["0", "1"]


def test_dry_run_json_shows_every_node(run_cli: RunCli) -> None:
    proc = run_cli("launch", "--dry-run", "--json", "--nnodes", "3", "--nproc-per-node", "2",
                   "--master-addr", "198.18.0.1", "--ifname", "eth0", "--", "train.py", "--lr",
                   "0.1")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["engine"] == "torchrun"
    assert [n["node_rank"] for n in plan["nodes"]] == [0, 1, 2]
    assert plan["nodes"][2]["ranks"] == [4, 5]
    argv = plan["nodes"][1]["argv"]
    assert argv[argv.index("--node-rank") + 1] == "1"
    assert argv[argv.index("--master-addr") + 1] == "198.18.0.1"
    assert argv[-3:] == ["train.py", "--lr", "0.1"]
    assert plan["nodes"][0]["env"]["GLOO_SOCKET_IFNAME"] == "eth0"
    assert plan["sources"]["master_addr"] == "--master-addr"

"""Real engines: torchrun and Open MPI started through ``ddpnet launch``, running an
unmodified env:// gloo script that all-reduces."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from ddpnet.net.ports import free_port
from tests.conftest import RunCli

SCRIPT = str(Path(__file__).with_name("allreduce_script.py"))



def _lines(stdout: str) -> list[dict[str, object]]:
    """The script's JSON results (torchrun ranks' lines carry a "[rank N] " prefix; mpirun's
    ranks share stdout, so two may run together on a line)."""
    return sorted((json.loads(m) for m in re.findall(r'\{"rank": [^{}]*\}', stdout)),
                  key=lambda o: int(str(o["rank"])))


def test_torchrun_two_local_ranks_all_reduce(run_cli: RunCli) -> None:
    port = free_port()  # from the kernel, not a constant: the machine is shared
    proc = run_cli("launch", "--nproc-per-node", "2", "--master-port", str(port),
                   "--ifname", "lo", "--", SCRIPT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    objs = _lines(proc.stdout)
    assert [o["rank"] for o in objs] == [0, 1]
    assert {o["world_size"] for o in objs} == {2}
    assert [o["local_rank"] for o in objs] == ["0", "1"]
    assert {o["sum"] for o in objs} == {3.0}
    assert {o["gloo_ifname"] for o in objs} == {"lo"}
    assert {o["master"] for o in objs} == {f"127.0.0.1:{port}"}


def test_local_n_is_the_mp_spawn_pattern(run_cli: RunCli) -> None:
    proc = run_cli("launch", "--local", "2", "--master-port", str(free_port()), "--", SCRIPT,
                   env={"SLURM_JOB_ID": "77", "SLURM_PROCID": "0", "SLURM_NNODES": "4"},
                   timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert [o["sum"] for o in _lines(proc.stdout)] == [3.0, 3.0]


def test_max_restarts_restarts_a_failed_worker_once(run_cli: RunCli, tmp_path: Path) -> None:
    marker = tmp_path / "failed-once"
    proc = run_cli("launch", "--nproc-per-node", "2", "--master-port", str(free_port()),
                   "--max-restarts", "1", "--", SCRIPT,
                   env={"FAIL_ONCE_MARKER": str(marker)}, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert marker.exists()
    objs = _lines(proc.stdout)
    assert [o["rank"] for o in objs] == [0, 1]
    assert {o["restart"] for o in objs} == {"1"}  # the second attempt finished


def test_worker_failure_without_restarts_is_the_exit_code(run_cli: RunCli) -> None:
    # a non-Python program (torchrun --no-python) that fails on rank 1: no torch import in
    # the workers, so the test stays quick
    import sys

    proc = run_cli("launch", "--nproc-per-node", "2", "--master-port", str(free_port()), "--",
                   sys.executable, "-c",
                   "import os, sys; sys.exit(3 if os.environ['RANK'] == '1' else 0)",
                   timeout=180)
    # the job's own code, not torchrun's 1 for any failed worker
    assert proc.returncode == 3, (proc.returncode, proc.stderr[-2000:])
    # the watch (on by default) may end rank 0, waiting on rank 1, with its verdict first
    assert re.search(r"ddpnet: rank 1 exited 3( \(1 other rank failed too\))?; launch exits 3",
                     proc.stderr), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "ChildFailedError" not in proc.stderr


#: each rank prints lines in two pieces (what torchrun's tee reads back as half lines), then
#: rank 1 exits 7
# rank 1 fails only once rank 0 has printed its last line: torchrun ends the others at once
# when one fails, and rank 0 started a little later lost its last piece (a race, not a join)
PIECES = """
import os, sys, time
rank = int(os.environ["RANK"])
done = os.path.join(os.path.dirname(os.path.abspath(__file__)), "r0.done")
for i in range(4):
    print(f"<r{rank}", end="", flush=True)
    time.sleep(0.05)
    print(f" {i}>", flush=True)
if rank == 0:
    open(done, "w").close()
deadline = time.monotonic() + 60
while rank == 1 and not os.path.exists(done) and time.monotonic() < deadline:
    time.sleep(0.02)
sys.exit(7 if rank == 1 else 0)
"""


def test_local_run_exits_with_the_scripts_code_and_ranks_never_share_a_line(
        run_cli: RunCli, tmp_path: Path) -> None:
    script = tmp_path / "pieces.py"
    script.write_text(PIECES)
    proc = run_cli("launch", "--local", "2", "--master-port", str(free_port()), "--",
                   str(script), timeout=180)
    assert proc.returncode == 7, (proc.returncode, proc.stderr[-2000:])
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert len(lines) == 8, proc.stdout
    for line in lines:  # one rank's whole line per line, under its prefix
        m = re.fullmatch(r"\[rank (\d)\] <r(\d) \d>", line)
        assert m and m.group(1) == m.group(2), proc.stdout
    assert "ddpnet: rank 1 exited 7; launch exits 7" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_missing_script_is_one_line_before_anything_starts(run_cli: RunCli,
                                                              tmp_path: Path) -> None:
    for flags in (("--local", "2"), ("--nproc-per-node", "2")):
        proc = run_cli("launch", *flags, "--", str(tmp_path / "nope.py"), "--lr", "1",
                       timeout=60)
        assert proc.returncode == 2, proc.stderr
        err = proc.stderr.strip().splitlines()
        assert err[0] == f"ddpnet: error: script {tmp_path / 'nope.py'} not found (in " \
            f"{Path.cwd()})" and err[1].startswith("hint: "), proc.stderr
        assert len(err) == 2 and "torch" not in proc.stderr


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="openmpi-bin not installed")
def test_mpirun_two_ranks_all_reduce_through_the_exec_wrapper(run_cli: RunCli) -> None:
    proc = run_cli("launch", "--via", "mpirun", "--nproc-per-node", "2", "--ifname", "lo",
                   "--master-port", str(free_port()), "--allow-run-as-root", "--oversubscribe",
                   "--",
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


def test_sigterm_is_forwarded_to_the_workers_and_reported(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import clean_environ

    proc = subprocess.Popen(
        [sys.executable, "-m", "ddpnet", "launch", "--nproc-per-node", "2", "--master-port",
         str(free_port()), "--", str(Path(__file__).with_name("sleep_script.py"))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_environ())
    try:
        assert proc.stdout is not None
        ready = 0
        deadline = time.monotonic() + 120
        while ready < 2 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            ready += line.count("ready")
        assert ready == 2
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert sorted(line for line in out.splitlines() if "got signal" in line) == [
        "[rank 0] rank 0 got signal 15", "[rank 1] rank 1 got signal 15"]
    assert "stopped after SIGTERM" in err

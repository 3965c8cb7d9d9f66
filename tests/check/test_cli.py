"""``ddpnet check --local N``: real ranks (processes) over loopback, no root needed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.check.test_report import CHROMIUM, _chromium
from tests.conftest import RunCli, nobody_cannot_run


def test_local_4_passes_with_matrix_and_report(run_cli: RunCli, tmp_path: Path) -> None:
    report = tmp_path / "report.html"
    proc = run_cli("check", "--local", "4", "--json", "--report", str(report),
                   "--bw-seconds", "0.3", timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert data["verdict"] == "pass"
    # loopback streams compete for 2 CPUs: at most a bandwidth warning, never a failure
    assert all(c["severity"] == "warn" and c["id"] in ("slow-link", "slow-node")
               for c in data["causes"]), data["causes"]
    assert data["world_size"] == 4 and [n["rank"] for n in data["nodes"]] == [0, 1, 2, 3]
    assert all(s == "ok" for i, row in enumerate(data["reachability"])
               for j, s in enumerate(row) if i != j)
    bw = data["bandwidth_gbps"]
    assert all(bw[i][j] and bw[i][j] > 0 for i in range(4) for j in range(4) if i != j)
    assert data["allreduce"]["ok"] and data["allreduce"]["ranks_ok"] == 4
    assert set(data["timings"]) >= {"rendezvous", "facts", "reachability", "total"}
    assert report.exists()
    if CHROMIUM is not None:
        dom, console = _chromium(report.as_uri(), tmp_path)
        assert console == [] and 'class="pass">PASS<' in dom


def test_local_human_output_and_worker_lines(run_cli: RunCli) -> None:
    proc = run_cli("check", "--local", "2", "--no-matrix", timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ddpnet check: PASS" in proc.stdout
    assert "rank 1" in proc.stderr and "ok (cluster verdict pass)" in proc.stderr


def test_port_in_use_is_named(run_cli: RunCli) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen(1)
        port = s.getsockname()[1]
        proc = run_cli("check", env={"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                                     "MASTER_PORT": str(port)}, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert "port" in proc.stderr and str(port) in proc.stderr and "hint:" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_master_port_refused_for_a_worker(run_cli: RunCli) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = run_cli("check", "--json", "--join-timeout", "2", env={"RANK": "1", "WORLD_SIZE": "2",
                                           "MASTER_ADDR": "127.0.0.1",
                                           "MASTER_PORT": str(port)}, timeout=60)
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["causes"][0]["id"] == "master-port-refused" and data["causes"][0]["fix"]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root to drop to an unprivileged user")
def test_local_runs_as_an_unprivileged_user() -> None:
    argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
            sys.executable, "-m", "ddpnet", "check", "--local", "2", "--no-matrix", "--json"]
    reason = nobody_cannot_run()
    if reason:
        pytest.skip(reason)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    env["HOME"] = "/tmp"
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env,
                          cwd="/tmp")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["verdict"] == "pass"


def test_local_bench_sweeps_all_reduce_against_the_slowest_link(run_cli: RunCli) -> None:
    proc = run_cli("check", "--local", "2", "--bench", "--matrix", "--bw-seconds", "0.2",
                   "--json", timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert data["stages"]["bench"] == "pass", data["bench"]
    rows = data["bench"]["rows"]
    assert rows and all(r["collective"] == "all_reduce" for r in rows)
    assert rows[0]["bytes"] == 1 << 20 and rows[-1]["bytes"] == 64 << 20
    slowest = min(v for row in data["bandwidth_gbps"] for v in row if v is not None)
    assert data["bench"]["link"]["gbps"] == slowest


def test_local_1_is_a_legal_one_rank_check(run_cli: RunCli) -> None:
    """Issue 17: ``check --local 1`` died with UnboundLocalError 'workers'."""
    proc = run_cli("check", "--local", "1", "--json", timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert data["verdict"] == "pass" and data["world_size"] == 1
    assert [n["rank"] for n in data["nodes"]] == [0]
    human = run_cli("check", "--local", "1", timeout=120)
    assert human.returncode == 0, human.stderr[-3000:]
    assert "ddpnet check: PASS" in human.stdout and "Traceback" not in human.stderr


@pytest.mark.parametrize(("signame", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_ctrl_c_or_sigterm_stops_local_workers_promptly(signame: str, code: int) -> None:
    import signal
    import time

    import psutil

    from tests.conftest import clean_environ

    proc = subprocess.Popen(
        [sys.executable, "-m", "ddpnet", "check", "--local", "3", "--matrix",
         "--bw-seconds", "30"], env=clean_environ(None), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        seen = ""
        while "bandwidth:" not in seen and proc.poll() is None:
            seen += proc.stderr.readline() if proc.stderr else ""
        workers = psutil.Process(proc.pid).children(recursive=True)
        assert len(workers) == 2, seen
        sent = time.monotonic()
        proc.send_signal(getattr(signal, signame))
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        proc.kill()
    assert proc.returncode == code, err[-2000:]
    assert took < 15, took  # at once, not after the 30 s stream (loaded runners are slow)
    assert "Traceback" not in err
    _, alive = psutil.wait_procs(workers, timeout=1)
    assert alive == [], alive


def test_local_fails_on_the_shells_interface_variable_as_doctor_does(run_cli: RunCli) -> None:
    """``--local`` runs its ranks on lo in place of the shell's GLOO_SOCKET_IFNAME, but a
    value doctor fails in that shell fails the check too, in the doctor's words and fix."""
    env = {"GLOO_SOCKET_IFNAME": "nosuch9"}
    doctor = json.loads(run_cli("doctor", "--json", env=env, timeout=60).stdout)
    ifname = next(c for c in doctor["checks"] if c["id"] == "environment.ifname")
    assert doctor["verdict"] == "fail" and ifname["status"] == "fail"
    proc = run_cli("check", "--local", "2", "--no-matrix", "--json", env=env, timeout=120)
    assert proc.returncode == 1, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert data["verdict"] == "fail" and data["stages"]["facts"] == "fail"
    cause = data["root_cause"]
    assert cause["id"] == "doctor-failed" and ifname["summary"] in cause["detail"]
    assert cause["fix"] == ifname["fix"]

"""``ddpnet diagnose`` on dump files and on a live job that hangs."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ddpnet.diagnose.run import DiagnoseOptions, run
from ddpnet.net.ports import free_port
from ddpnet.watch.dump import write_report, write_state
from ddpnet.watch.state import CollectiveRecord, Diagnosis, RankState
from tests.watch.scenario import leftovers, start_job


def _state(rank: int, shape: tuple[int, ...]) -> RankState:
    return RankState(rank=rank, world_size=2, host=f"n{rank}", published=100.0 + rank,
                     recent=(CollectiveRecord(seq=3, op="all_reduce", dtype="float32",
                                              shape=shape, started=90.0),))


def test_dumps_name_a_mismatch(tmp_path: Path) -> None:
    write_state(tmp_path, _state(0, (3,)), "watchdog")
    write_state(tmp_path, _state(1, (4,)), "watchdog")
    result = run(DiagnoseOptions(dumps=tmp_path))
    assert result.diagnosis.kind == "collective-mismatch" and result.exit_code == 1


def test_a_rank_without_a_dump_is_gone_not_stale(tmp_path: Path) -> None:
    write_state(tmp_path, _state(0, (3,)), "exited with an error")
    result = run(DiagnoseOptions(dumps=tmp_path))
    assert result.diagnosis.kind == "rank-gone" and result.diagnosis.ranks == (1,)
    assert "left no dump" in result.diagnosis.summary


def test_cli_on_an_empty_directory_is_a_usage_error(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    proc = run_cli("diagnose", "--dumps", str(tmp_path))
    assert proc.returncode == 2 and "no watch dumps" in proc.stderr


def _cut_off(rank: int) -> Diagnosis:
    return Diagnosis("network", f"cut off: rank {rank} (n{rank}, eth0 198.18.0.2) reaches "
                     "neither the watch hub nor any peer", (rank,), (f"n{rank}",))


def test_dumps_answer_with_the_verdict_already_named_there(tmp_path: Path) -> None:
    """After rank 0 and its hub left: the hub's report.json, plus the cut-off rank's own
    verdict from its dump."""
    hub = Diagnosis("network", "link down: rank 1 (n1, eth0 198.18.0.2) sent no heartbeat",
                    (1,), ("n1",), ("rank 0 -> rank 1: timeout",))
    write_report(tmp_path, {"kind": "network", "diagnosis": hub.to_dict()}, "<html>")
    write_state(tmp_path, _state(0, (3,)), "watchdog: link down")
    write_state(tmp_path, _state(1, (3,)), "network: cut off", verdict=_cut_off(1))
    result = run(DiagnoseOptions(dumps=tmp_path))
    assert result.diagnosis.summary == hub.summary and result.exit_code == 1
    assert result.diagnosis.evidence[-1].startswith("rank(s) 1 judged itself: cut off: rank 1")
    assert "the hub's verdict, report.json" in result.source


def test_a_cut_off_ranks_own_dump_names_it(tmp_path: Path) -> None:
    write_state(tmp_path, _state(1, (3,)), "network: cut off", verdict=_cut_off(1))
    result = run(DiagnoseOptions(dumps=tmp_path))
    assert result.diagnosis == _cut_off(1) and "rank 1's own verdict" in result.source


def test_live_without_a_hub_answers_from_the_dumps_left_here(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU run's "no watch hub answers" 20 s after the fault: the hub had left with
    rank 0's verdict, its report was on disk."""
    write_state(tmp_path, _state(1, (3,)), "network: cut off", verdict=_cut_off(1))
    monkeypatch.setenv("DDPNET_WATCH_DIR", str(tmp_path))
    monkeypatch.setenv("DDPNET_WATCH_PORT", str(free_port()))
    result = run(DiagnoseOptions(master="127.0.0.1:29999", timeout=1.0))
    assert result.diagnosis == _cut_off(1)
    assert result.source.startswith("no watch hub answers at 127.0.0.1:")
    assert f"dumps in {tmp_path}" in result.source


def _wait_for_line(stream: Any, prefix: str, seconds: float) -> str:
    """The first line starting with ``prefix`` within ``seconds``, else "" (never blocks
    longer: a daemon thread reads)."""
    found: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stream:
            if line.startswith(prefix):
                found.put(line)
                return

    threading.Thread(target=read, daemon=True).start()
    try:
        return found.get(timeout=seconds)
    except queue.Empty:
        return ""


def test_live_job_hanging_in_its_data_loader(tmp_path: Path) -> None:
    """The job only warns (long timeout): diagnose, run from outside, names the late rank."""
    procs, port = start_job("sleepdata", str(tmp_path), watch_timeout=300,
                            extra={"DDPNET_WATCH_ACTION": "warn"})
    try:
        assert procs[1].stdout is not None
        assert _wait_for_line(procs[1].stdout, "fault", 90), "rank 1 never reached its fault"
        time.sleep(2.5)  # two heartbeats after the fault
        proc = subprocess.run([sys.executable, "-m", "ddpnet", "diagnose", "--json",
                               "--master", f"127.0.0.1:{port}"], capture_output=True,
                              text=True, timeout=60,
                              env={**os.environ, "DDPNET_WATCH_DIR": str(tmp_path)})
        out = json.loads(proc.stdout)
        assert proc.returncode == 1, proc.stderr
        assert out["kind"] == "rank-not-arriving" and out["diagnosis"]["ranks"] == [1]
        assert "'data'" in out["diagnosis"]["summary"]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        assert leftovers(procs, port, 2) == []


def test_a_job_dir_shows_the_recovery_history_and_the_newest_verdict(
        tmp_path: Path, run_cli: Any) -> None:
    """``ddpnet diagnose --job-dir``: each action of a recovering job, then the verdict of
    its newest run that left one."""
    from ddpnet.launch.blame import Blame
    from ddpnet.launch.recover import append, record_path
    from ddpnet.launch.recovery import Event
    from ddpnet.watch.report import report_dict
    from ddpnet.watch.state import Snapshot

    cut = Blame("network", "link down: rank 1 (n1)", "n1", "ddpnet: network: link down", 45)
    append(record_path(tmp_path), Event("verdict", 0, 1.0, "n1", verdict=cut, step=45),
           Event("drain", 0, 2.0, "n1", cut.reason), Event("requeue", 0, 3.0),
           Event("resumed", 1, 9.0, step=40))
    old = Diagnosis("network", "link down: rank 1 (n1)", (1,), ("n1",))
    new = Diagnosis("collective-mismatch", "collective mismatch at seq 9", (0, 1), ("n0", "n2"))
    for run_dir, d in (("watch-run0", old), ("watch-run1", new)):
        write_report(tmp_path / run_dir, report_dict(d, Snapshot(2, 1.0, {}), "t"), "")
    p = run_cli("diagnose", "--job-dir", str(tmp_path))
    assert p.returncode == 1, p.stderr
    lines = p.stdout.splitlines()
    assert lines[:5] == ["recovery of job ? (--max-recoveries 2):",
                         "  run 0: verdict n1 at step 45: network: link down: rank 1 (n1)",
                         "  run 0: drain n1: ddpnet: network: link down", "  run 0: requeue",
                         "  run 1: resumed at step 40"]
    assert "ddpnet watch: collective-mismatch" in p.stdout  # the newest run's verdict
    j = json.loads(run_cli("diagnose", "--job-dir", str(tmp_path), "--json").stdout)
    assert [e["what"] for e in j["recovery"]["events"]] == ["verdict", "drain", "requeue",
                                                            "resumed"]
    empty = run_cli("diagnose", "--job-dir", str(tmp_path / "nothing"))
    assert empty.returncode == 2 and "no recovery record and no watch verdict" in empty.stderr


def test_dumps_show_what_each_node_of_a_launch_did_about_the_verdict(tmp_path: Path,
                                                                    run_cli: Any) -> None:
    """``ddpnet launch --max-restarts``: each node's ``recovery-<host>.json`` (written by the
    agent's gate) is shown above the verdict, in time order."""
    from ddpnet.launch.blame import Blame
    from ddpnet.launch.elastic import choose
    from ddpnet.launch.elastic_agent import Watching

    stopped = Blame("rank-gone", "rank 2 (n2) is gone: process stopped", "n2", "r", step=40)
    for me in ("n0", "n1"):
        Watching(tmp_path, me=me).write(choose(stopped, me, {}, 3, 2, False))
    Watching(tmp_path, me="n2").write(choose(stopped, "n2", {}, 3, 2, False))
    write_report(tmp_path, {"kind": "rank-gone", "diagnosis": Diagnosis(
        "rank-gone", stopped.summary, (2,), ("n2",)).to_dict()}, "")
    p = run_cli("diagnose", "--dumps", str(tmp_path))
    lines = p.stdout.splitlines()
    assert lines[0] == "recovery under ddpnet launch --max-restarts (each node's record):"
    excluded = [line for line in lines[1:7] if "exclude n2 at step 40" in line]
    assert len(excluded) == 3 and any("launch on n2: " in line and "it leaves" in line
                                      for line in excluded), lines[:7]
    assert "ddpnet watch: rank-gone" in p.stdout

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

from ddpnet.diagnose.run import DiagnoseOptions, run
from ddpnet.watch.dump import write_state
from ddpnet.watch.state import CollectiveRecord, RankState
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

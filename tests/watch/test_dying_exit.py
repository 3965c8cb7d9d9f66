"""watch.dying's sys.exit note: a rank that calls ``sys.exit(3)`` mid-training is named as gone with its
code (two real gloo ranks attached with ``python -m ddpnet.attach``), not taken for finished
with the other rank blamed for "an extra collective at the end"; and the pure parts."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest

from ddpnet.watch import dying
from tests.watch.gloo_ranks import ranks

SCRIPT = """
import os, sys, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
for step in range(40):
    dist.all_reduce(torch.ones(2))
    time.sleep(0.02)
    if rank == 1 and step == 10:
        sys.exit(int(os.environ["CODE"]))
print("done", rank, flush=True)
"""


@pytest.mark.parametrize(("code", "error"), [
    (None, ""), (0, ""), (3, "SystemExit: sys.exit(3)"),
    ("no data", "SystemExit: sys.exit('no data') (exit code 1)")])
def test_a_failing_exit_is_described_and_a_success_is_not(code: object, error: str) -> None:
    assert dying.describe(code) == error


def test_only_the_main_threads_failing_exit_is_noted_and_undo_restores() -> None:
    noted: list[str] = []
    original = sys.exit

    def note(error: str, handling: BaseException | None) -> None:
        assert handling is None  # nothing was being handled
        noted.append(error)

    def leave_thread() -> None:
        with pytest.raises(SystemExit):
            sys.exit(5)

    undo = dying.note_exits(note)
    try:
        thread = threading.Thread(target=leave_thread)
        thread.start()
        thread.join(10)
        with pytest.raises(SystemExit):
            sys.exit(0)
        with pytest.raises(SystemExit):
            sys.exit(7)
    finally:
        undo()
    assert noted == ["SystemExit: sys.exit(7)"] and sys.exit is original


def test_the_exception_being_handled_goes_with_the_exit() -> None:
    noted: list[tuple[str, BaseException | None]] = []
    undo = dying.note_exits(lambda error, handling: noted.append((error, handling)))
    failure = RuntimeError("Connection closed by peer [127.0.0.1]:1234")
    try:
        with pytest.raises(SystemExit):
            try:
                raise failure
            except RuntimeError:
                sys.exit(1)
    finally:
        undo()
    assert noted == [("SystemExit: sys.exit(1)", failure)]


#: what mp.spawn's child does (torch.multiprocessing.spawn._wrap), and frameworks' mains: the
#: peer's failure caught and turned into exit 1, so it never reaches sys.excepthook
WRAPPED = """
import sys, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
from ddpnet.watch import session
if session.active():  # the fault once both ranks' watch is up (a loaded host: seconds); a
    session._session.connecting.join(60)  # rank killed before the hub knew it is named later
dist.barrier()
try:
    for step in range(40):
        dist.all_reduce(torch.ones(2))
        time.sleep(0.02)
        if rank == 1 and step == 10:
            import os, signal
            os.kill(os.getpid(), signal.SIGKILL)
except Exception:
    sys.exit(1)
print("done", rank, flush=True)
"""


@pytest.mark.slow
def test_a_peer_failure_caught_and_turned_into_exit_1_still_waits_for_the_verdict(
        tmp_path: Path) -> None:
    """No launcher SIGTERMs rank 0 here: it waits for the verdict only because its sys.exit(1)
    was called while the peer's failure was being handled."""
    script = tmp_path / "wrapped.py"
    script.write_text(WRAPPED)
    runs = ranks([sys.executable, "-m", "ddpnet.attach", str(script)], tmp_path)
    report = json.loads((tmp_path / "watch" / "report.json").read_text())
    assert report["kind"] == "rank-gone", report["diagnosis"]
    assert report["diagnosis"]["summary"].startswith("rank 1 "), report["diagnosis"]
    assert runs[0].code == 4, runs[0].err[-2000:]
    assert "from a peer; waiting up to" in runs[0].err
    assert "ddpnet: watch: rank 0 exits (4): rank-gone: rank 1 " in runs[0].err, runs[0].err


@pytest.mark.slow
def test_a_rank_that_exits_3_mid_training_is_named_as_gone(tmp_path: Path) -> None:
    script = tmp_path / "exits.py"
    script.write_text(SCRIPT)
    runs = ranks([sys.executable, "-m", "ddpnet.attach", str(script)], tmp_path, CODE="3")
    assert runs[1].code == 3, runs[1].err[-2000:]
    report = json.loads((tmp_path / "watch" / "report.json").read_text())
    assert report["kind"] == "rank-gone", report["diagnosis"]
    assert report["diagnosis"]["summary"].startswith("rank 1 ") and \
        "sys.exit(3)" in report["diagnosis"]["summary"], report["diagnosis"]
    assert runs[0].code == 4, runs[0].err[-2000:]


#: rank 0's heartbeat connects 3 s late (its hub still starting on a loaded host); rank 1
#: dies once its own watch is up and both passed a barrier, so rank 0's gloo raises while its
#: heartbeat still connects
LATE = """
import os, sys, time
from ddpnet.watch import heartbeat
if os.environ["RANK"] == "0":
    connect = heartbeat.Beacon.connect
    def late(self, *args, **kwargs):
        time.sleep(3.0)
        return connect(self, *args, **kwargs)
    heartbeat.Beacon.connect = late
import runpy
runpy.run_path(os.environ["LATE_SCRIPT"], run_name="__main__")
"""
FIRST_STEP = """
import os, signal, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
from ddpnet.watch import session
if rank == 1 and session.active():
    session._session.connecting.join(60)
dist.barrier()
if rank == 1:
    os.kill(os.getpid(), signal.SIGKILL)
dist.all_reduce(torch.ones(2))
print("done", rank, flush=True)
"""


@pytest.mark.slow
def test_a_peer_failure_before_this_ranks_heartbeat_connected_is_said_once_it_is(
        tmp_path: Path) -> None:
    """Before: rank 0's "a peer failed" goodbye went out before its handshake and was lost,
    the hub (which had told only the ranks connected) had left, and rank 0 exited 1."""
    late, script = tmp_path / "late.py", tmp_path / "first_step.py"
    late.write_text(LATE)
    script.write_text(FIRST_STEP)
    runs = ranks([sys.executable, "-m", "ddpnet.attach", str(late)], tmp_path,
                 LATE_SCRIPT=str(script))
    report = json.loads((tmp_path / "watch" / "report.json").read_text())
    assert report["kind"] == "rank-gone", report["diagnosis"]
    assert report["diagnosis"]["summary"].startswith("rank 1 "), report["diagnosis"]
    assert runs[0].code == 4, runs[0].err[-2000:]
    assert "ddpnet: watch: rank 0 exits (4): rank-gone: rank 1 " in runs[0].err, runs[0].err

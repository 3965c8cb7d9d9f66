"""watch.exitnote: a rank that calls ``sys.exit(3)`` mid-training is named as gone with its
code (two real gloo ranks attached with ``python -m ddpnet.attach``), not taken for finished
with the other rank blamed for "an extra collective at the end"; and the pure parts."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest

from ddpnet.watch import exitnote
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
    assert exitnote.describe(code) == error


def test_only_the_main_threads_failing_exit_is_noted_and_undo_restores() -> None:
    noted: list[str] = []
    original = sys.exit

    def leave_thread() -> None:
        with pytest.raises(SystemExit):
            sys.exit(5)

    undo = exitnote.note_exits(noted.append)
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

"""benchmarks/trainers_overhead.py at its smallest: one trainer (ignite, the quickest to
import), one round a side, a few steps; the figures are there and the loss is the same
watched and unwatched."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # four ranks that import torch and ignite

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "trainers_overhead.py"


def test_the_smallest_run_gives_every_figure_and_the_same_loss(tmp_path: Path) -> None:
    out = tmp_path / "trainers.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--rounds", "1", "--steps", "12",
                           "--trainers", "ignite", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(out.read_text())["trainers"]["ignite"]
    assert found["same_loss_bit_for_bit"] and len(found["losses"]) == 1, found
    assert found["step_ms_watched"] > 0 and found["step_ms_unwatched"] > 0, found
    assert found["launch_s_watched"] > 0 and found["runs_per_side"] == 1, found


def test_an_unknown_trainer_is_refused_in_one_line() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--trainers", "keras"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown trainer(s) keras" in proc.stderr, proc.stderr

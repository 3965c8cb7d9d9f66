"""Real gloo ranks with no marks and the default settings (no watch_timeout): a rank 0 that
works while the others wait (an evaluation, a checkpoint write) raises a warning and no
verdict; a rank that sleeps is named (:mod:`ddpnet.watch.activity`)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.watch.lab_watch import BOUND_S
from tests.watch.scenario import run_job

SCRIPT = str(Path(__file__).with_name("unmarked.py"))

pytestmark = pytest.mark.slow


def test_an_unmarked_evaluation_and_checkpoint_on_rank_0_raise_no_verdict(
        tmp_path: Path) -> None:
    job = run_job("work", str(tmp_path), script=SCRIPT, timeout=240)
    err = job.stderr[0]
    assert job.codes == {0: 0, 1: 0}, {r: e[-2000:] for r, e in job.stderr.items()}
    assert job.left == [] and "ddpnet watch:" not in err
    assert not (tmp_path / "report.json").exists()
    # what makes this test able to fail: the threshold was learned, shorter than the work,
    # and the hub held the verdict while rank 0 worked (one warning per stall)
    thresholds = [json.loads(line.split(" ", 1)[1]) for line in job.stdout[0].splitlines()
                  if line.startswith("threshold ")]
    assert len(thresholds) == 2 and all(t["source"] == "learned" and t["seconds"] < 15
                                        for t in thresholds), thresholds
    warnings = [line for line in err.splitlines() if "warning: working:" in line]
    assert len(warnings) == 2, err[-3000:]
    host = socket.gethostname()
    assert all(f"rank 0 ({host}" in w and "unmarked.py" in w for w in warnings), warnings
    assert "in evaluate" in warnings[0] and "CPU" in warnings[0]
    assert "in save" in warnings[1] and "wrote" in warnings[1]


def test_an_unmarked_rank_that_sleeps_is_named(tmp_path: Path) -> None:
    job = run_job("sleep", str(tmp_path), script=SCRIPT, timeout=180)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["kind"] == "rank-not-arriving" and report["diagnosis"]["ranks"] == [1]
    assert report["threshold"]["source"] == "learned"
    evidence = "\n".join(report["diagnosis"]["evidence"])
    assert "has not worked for" in evidence and "unmarked.py" in evidence
    assert job.codes == {0: 4, 1: 4} and job.left == []
    assert job.fault_at is not None and job.report_at is not None
    assert job.report_at - job.fault_at < BOUND_S, report["threshold"]

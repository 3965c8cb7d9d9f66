"""What a ``ddpnet train`` process prints at the end goes through ``ddpnet.output``: rank 0 of
a run prints its summary (one JSON object with --json), every other process nothing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ddpnet.train.report import report
from ddpnet.train.result import TrainResult
from ddpnet.train.summary import Summary
from tests.conftest import clean_environ

SUMMARY = Summary(
    steps=4, final_loss=2.25, eval_loss=2.5, eval_accuracy=0.125, samples_per_s=1000.0,
    bytes_per_step=35880, step_time_s=0.01, compute_s=0.004, comm_wait_s=0.006,
    comm_share=0.6, parameters=8970, world_size=2, resumed_from=None, config={"width": 64},
    backend="gloo", device="cpu", bytes_note="fp32 gradients", notes=("a note",))
TELEMETRY = ({"rank": 0, "host": "h", "interfaces": {"lo": {
    "rx_gbps_mean": 1.0, "rx_gbps_max": 2.0, "tx_gbps_mean": 1.0, "tx_gbps_max": 2.0}},
    "retrans_per_s_mean": 0.0, "samples": 3},)


@pytest.mark.parametrize("result", [TrainResult(0, rank=1), TrainResult(143)])
@pytest.mark.parametrize("as_json", [True, False])
def test_other_ranks_and_the_local_parent_print_nothing(
        capsys: pytest.CaptureFixture[str], result: TrainResult, as_json: bool) -> None:
    assert report(result, as_json) == result.exit_code
    assert capsys.readouterr() == ("", "")


def test_rank0_json_is_one_object_with_the_telemetry(capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    assert report(TrainResult(0, 0, SUMMARY, TELEMETRY), as_json=True) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["steps"] == 4 and out["notes"] == ["a note"]
    assert out["telemetry"] == list(TELEMETRY)
    assert "telemetry" not in TrainResult(0, 0, SUMMARY).to_dict()


def test_rank0_human_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert report(TrainResult(0, 0, SUMMARY, TELEMETRY), as_json=False) == 0
    out = capsys.readouterr().out
    assert out.startswith("trained 4 steps on 2 rank(s) (gloo, cpu), 8,970 parameters\n")
    assert "comm share 60%" in out and "network during training (per rank):" in out
    assert "rank 0 h: lo rx 1.000/2.000" in out


def test_the_train_command_imports_no_torch_before_run() -> None:
    """run() sets THP_MEM_ALLOC_ENABLE first; torch reads it once, at its first allocation."""
    code = ("import sys, ddpnet.cli.train, ddpnet.train.run, ddpnet.train.report; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=clean_environ())
    assert out.stdout.strip() == "False"


def test_no_two_train_modules_import_each_other() -> None:
    """run returns a TrainResult and report prints one: both import it from result.py, not
    from each other (the guide: no cycle between two files, TYPE_CHECKING imports included)."""
    import ast
    from pathlib import Path

    import ddpnet.train

    package = Path(ddpnet.train.__file__).parent
    imports: dict[str, set[str]] = {}
    for path in package.glob("*.py"):
        names = {node.module for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.ImportFrom) and node.module}
        imports[path.stem] = {n.rsplit(".", 1)[1] for n in names
                              if n.startswith("ddpnet.train.")}
    pairs = sorted((a, b) for a, deps in imports.items() for b in deps
                   if a < b and a in imports.get(b, set()))
    assert pairs == [], pairs


def test_a_run_resumed_at_its_last_step_says_it_was_already_finished() -> None:
    """Not ``final loss nan ... nan samples/s``."""
    from dataclasses import replace

    from ddpnet.train.report import render_summary

    nothing = replace(SUMMARY, steps=60, resumed_from=60, final_loss=float("nan"),
                      samples_per_s=float("nan"), config={"checkpoint_dir": "/ckpt"})
    text = render_summary(nothing)
    assert text.startswith("already finished: the checkpoint in /ckpt is at step 60 of 60")
    assert "nan" not in text and "--max-steps" in text
    assert "final loss" in render_summary(replace(SUMMARY, steps=60, resumed_from=50))

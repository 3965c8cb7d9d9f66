"""When bf16/fp16 cannot speed a run up, the summary says why (pure; issue 19: bf16 slower
than fp32 on an H100 for width 512, depth 4, batch 256)."""

from __future__ import annotations

import math

import pytest

from ddpnet.train.precision import (
    SMALL_STEP_FLOPS,
    flops_per_step,
    precision_label,
    precision_note,
)
from ddpnet.train.report import render_summary
from ddpnet.train.summary import Summary

#: the issue's transformer: width 512, depth 4 (12,623,370 parameters), batch 256
ISSUE_PARAMS = 12_623_370


def test_flops_per_step_counts_positions_and_micro_batches() -> None:
    assert flops_per_step("mlp", 1000, 32, 1) == 6 * 1000 * 32
    assert flops_per_step("transformer", 1000, 32, 2) == 6 * 1000 * 8 * 32 * 2
    assert flops_per_step("cnn", 10, 1, 1) == 6 * 10 * 64
    assert flops_per_step("transformer", ISSUE_PARAMS, 256, 1) == pytest.approx(155e9, rel=0.01)


def test_the_issues_small_transformer_gets_a_note_on_cuda() -> None:
    flops = flops_per_step("transformer", ISSUE_PARAMS, 256, 1)
    note = precision_note("bf16", "cuda:0", flops, 0.0125)
    assert note is not None and note.startswith("bf16 gains little on this model: 155 GFLOP")
    assert "12.4 TFLOP/s achieved" in note and "--width or --batch-size" in note
    assert "fp16 gains little" in str(precision_note("fp16", "cuda:0", flops, math.nan))
    assert "achieved" not in str(precision_note("fp16", "cuda:0", flops, math.nan))


def test_no_note_where_matmuls_dominate_or_amp_is_off() -> None:
    big = flops_per_step("transformer", 400_000_000, 256, 1)
    assert big >= SMALL_STEP_FLOPS
    assert precision_note("bf16", "cuda:0", big, 0.1) is None
    assert precision_note("off", "cuda:0", 1e6, 0.1) is None
    assert precision_note("off", "cpu", 1e6, 0.1) is None


def test_bf16_on_cpu_says_what_the_cpu_needs() -> None:
    note = precision_note("bf16", "cpu", 1e15, 0.1)
    assert note is not None and "AMX" in note


def test_the_summary_reports_samples_per_second_per_precision_with_the_note() -> None:
    assert [precision_label(a) for a in ("off", "bf16", "fp16")] == ["fp32", "bf16", "fp16"]
    s = Summary(steps=4, final_loss=2.0, eval_loss=2.1, eval_accuracy=0.5, samples_per_s=16500,
                bytes_per_step=0, step_time_s=0.0155, compute_s=0.012, comm_wait_s=0.0,
                comm_share=0.0, parameters=ISSUE_PARAMS, world_size=1, resumed_from=None,
                config={}, backend="nccl", device="cuda:0", bytes_note="n",
                precision="bf16", flops_per_step=155e9, precision_note="bf16 gains little")
    text = render_summary(s)
    assert "16500 samples/s (bf16)" in text and "note: bf16 gains little" in text
    d = s.to_dict()
    assert (d["precision"], d["precision_note"]) == ("bf16", "bf16 gains little")

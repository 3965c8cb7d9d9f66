"""When bf16/fp16 cannot speed a run up, the summary says why (pure; issue 19: bf16 slower
than fp32 on an H100 for width 512, depth 4, batch 256)."""

from __future__ import annotations

import math

import pytest

from ddpnet.train.precision import (
    SMALL_STEP_FLOPS,
    flops_per_sample,
    flops_per_step,
    precision_label,
    precision_note,
)
from ddpnet.train.report import render_summary
from ddpnet.train.summary import Summary

#: the issue's transformer: width 512, depth 4 (12,623,370 parameters), batch 256
ISSUE_PARAMS = 12_623_370


def _issue_flops(batch: int = 256) -> float:
    return flops_per_step("transformer", ISSUE_PARAMS, width=512, depth=4, batch_size=batch)


def test_flops_per_step_follows_the_models_shape() -> None:
    assert flops_per_step("mlp", 1000, width=8, depth=2, batch_size=32) == 6 * 1000 * 32
    # transformer: 8 tokens x (6 N + 12 depth 8 width) + 6 head, N = all but head and pos
    head, pos = 512 * 10 + 10, 8 * 512
    per_sample = 8 * (6 * (ISSUE_PARAMS - head - pos) + 12 * 4 * 8 * 512) + 6 * head
    assert flops_per_sample("transformer", ISSUE_PARAMS, 512, 4) == per_sample
    assert flops_per_step("transformer", ISSUE_PARAMS, width=512, depth=4, batch_size=32,
                          grad_accum=2) == per_sample * 32 * 2
    assert _issue_flops() == pytest.approx(155e9, rel=0.01)
    # cnn: the convolutions at 64 pixels, the head (width x 64 x 10 + 10) once
    cnn_head = 4 * 64 * 10 + 10
    assert flops_per_sample("cnn", cnn_head + 40, 4, 1) == 64 * 6 * 40 + 6 * cnn_head


def test_the_issues_small_transformer_gets_a_note_on_cuda() -> None:
    flops = _issue_flops()
    note = precision_note("bf16", "cuda:0", flops, 0.0125)
    assert note is not None and note.startswith("bf16 gains little on this model: 155 GFLOP")
    assert "12.4 TFLOP/s achieved" in note and "--width or --batch-size" in note
    assert "fp16 gains little" in str(precision_note("fp16", "cuda:0", flops, math.nan))
    assert "achieved" not in str(precision_note("fp16", "cuda:0", flops, math.nan))


def test_no_note_where_matmuls_dominate_or_amp_is_off() -> None:
    big = flops_per_step("transformer", 400_000_000, width=2048, depth=8, batch_size=256)
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


def test_the_summary_shows_mfu_beside_samples_per_second_and_tf32() -> None:
    from dataclasses import replace

    from ddpnet.train.peaks import utilisation

    use = utilisation(9.9e12, 0.025, device="cuda:0", device_name="NVIDIA H100 80GB HBM3",
                      precision="fp32", tf32=True)
    s = Summary(steps=4, final_loss=2.0, eval_loss=2.1, eval_accuracy=0.5, samples_per_s=40960,
                bytes_per_step=0, step_time_s=0.025, compute_s=0.024, comm_wait_s=0.0,
                comm_share=0.0, parameters=201_488_394, world_size=1, resumed_from=None,
                config={}, backend="nccl", device="cuda:0", bytes_note="n",
                precision="fp32", flops_per_step=9.9e12, device_name="NVIDIA H100 80GB HBM3",
                tf32=True, utilisation=use.to_dict())
    text = render_summary(s)
    assert "40960 samples/s (fp32, TF32 matmuls)" in text
    assert "model 396 TFLOP/s per rank = 80.0% MFU (H100 SXM tf32 dense peak 494.7)" in text
    d = s.to_dict()
    assert d["mfu"] == pytest.approx(396 / 494.7) and d["model_tflops"] == pytest.approx(396)
    assert (d["tf32"], d["device_name"]) == (True, "NVIDIA H100 80GB HBM3")
    off = replace(s, tf32=False, utilisation=utilisation(
        9.9e12, 0.025, device="cuda:0", device_name="NVIDIA RTX 9", precision="fp32",
        tf32=False).to_dict())
    assert "(fp32, full-fp32 matmuls)" in render_summary(off)
    assert "(no MFU: 'NVIDIA RTX 9' is not in ddpnet.train.peaks.PEAKS)" in render_summary(off)
    cpu = replace(s, tf32=None, device="cpu", device_name="cpu")
    assert "(fp32)" in render_summary(cpu)

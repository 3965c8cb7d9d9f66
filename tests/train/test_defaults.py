"""A run's size where the flags leave it open comes from its device: small on a CPU, the
transformer matmul-bound on a GPU (pure; the CPU run itself is in test_learns.py)."""

from __future__ import annotations

import torch

from ddpnet.train.config import TrainConfig, sized
from ddpnet.train.data import NUM_CLASSES
from ddpnet.train.defaults import GPU_TRANSFORMER, SIZE_FIELDS, SIZES_HELP, SMALL, sizes_for
from ddpnet.train.model import build_model, count_parameters
from ddpnet.train.precision import SMALL_STEP_FLOPS, flops_per_step


def test_cpu_runs_stay_small_and_the_gpu_transformer_is_matmul_bound() -> None:
    for model in ("mlp", "cnn", "transformer"):
        assert sizes_for(model, "cpu") == SMALL
    assert sizes_for("transformer", "cuda") == sizes_for("transformer", "cuda:3")
    assert sizes_for("transformer", "cuda") == GPU_TRANSFORMER
    assert sizes_for("mlp", "cuda").values() == SMALL.values()
    assert "stay small" in sizes_for("mlp", "cuda").reason
    assert all(s.reason for s in (SMALL, GPU_TRANSFORMER))
    # the CPU defaults are TrainConfig's own (a config built without flags is a CPU run)
    cfg = TrainConfig()
    assert SMALL.values() == {f: getattr(cfg, f) for f in SIZE_FIELDS}


def test_the_gpu_transformer_step_is_well_above_the_launch_bound_size() -> None:
    g = GPU_TRANSFORMER
    with torch.device("meta"):  # shapes only: no 800 MB of weights
        params = count_parameters(build_model("transformer", g.width, g.depth, NUM_CLASSES))
    assert 190e6 < params < 210e6
    flops = flops_per_step("transformer", params, width=g.width, depth=g.depth,
                           batch_size=g.batch_size)
    assert flops > 8 * SMALL_STEP_FLOPS  # ~10 TFLOP per step
    # the launch-bound size was 0.16 TFLOP per step
    assert g.samples // g.batch_size >= 100  # an epoch is 100+ steps: no data repeats early


def test_sized_fills_only_the_open_fields_and_says_from_where() -> None:
    cfg = TrainConfig(model="transformer", width=256)
    gpu = sized(cfg, frozenset({"depth", "batch_size", "samples"}), "cuda:0")
    assert (gpu.width, gpu.depth, gpu.batch_size, gpu.samples) == (
        256, GPU_TRANSFORMER.depth, GPU_TRANSFORMER.batch_size, GPU_TRANSFORMER.samples)
    assert gpu.sized_by == "cuda defaults"
    assert sized(cfg, frozenset(), "cuda:0") is cfg  # every size given: nothing changes
    cpu = sized(cfg, frozenset({"depth"}), "cpu")
    assert (cpu.width, cpu.depth, cpu.sized_by) == (256, SMALL.depth, "cpu defaults")


def test_the_help_names_both_devices_defaults() -> None:
    assert "64/2/32/4096 on CPU" in SIZES_HELP and "2048/4/1024/131072" in SIZES_HELP

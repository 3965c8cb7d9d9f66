"""What a run sets up for the device before training (torch, no process group): TF32 on CUDA
as the flag says, fused optimizer kernels on CUDA, and the notes that state both."""

from __future__ import annotations

import torch

from ddpnet.train.config import TrainConfig
from ddpnet.train.loop import make_optimizer, set_matmul_precision, setup_notes
from ddpnet.train.optim import plan


def test_tf32_follows_the_flag_on_cuda_and_cpu_is_left_alone() -> None:
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    try:
        set_matmul_precision(True, "cuda:0")
        assert matmul.fp32_precision == "tf32"
        assert torch.backends.cudnn.conv.fp32_precision == "tf32"  # type: ignore[attr-defined]
        set_matmul_precision(False, "cuda:0")
        assert matmul.fp32_precision == "ieee"
        set_matmul_precision(True, "cpu")  # no TF32 on a CPU: nothing changes
        assert matmul.fp32_precision == "ieee"
    finally:
        matmul.fp32_precision = before


def test_optimizers_are_fused_where_asked() -> None:
    model = torch.nn.Linear(4, 2)
    adamw = plan("transformer", 10)
    assert make_optimizer(model, adamw, fused=True).defaults["fused"] is True
    assert not make_optimizer(model, adamw).defaults["fused"]
    assert not make_optimizer(model, plan("mlp", 10)).defaults["fused"]


def test_the_notes_state_the_size_tf32_and_fused_kernels() -> None:
    cfg = TrainConfig(model="transformer", width=2048, depth=4, batch_size=1024,
                      samples=131072, sized_by="cuda defaults")
    notes = setup_notes(cfg, "cuda:0")
    assert notes[0].startswith("cuda defaults: width 2048, depth 4, batch 1024, samples 131072")
    assert "fp32 matmuls on TF32 tensor cores" in notes[1] and "fused" in notes[1]
    off = setup_notes(TrainConfig(tf32=False, compile=True), "cuda:0")
    assert "full fp32 (--no-tf32)" in off[0] and "torch.compile" in off[1]
    assert setup_notes(TrainConfig(), "cpu") == []  # sized by flags, no CUDA

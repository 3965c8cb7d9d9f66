"""Why a lower precision did or did not pay (pure): the work of one step in FLOPs, and the
note the summary carries when bf16/fp16 cannot gain on this model.

bf16 and fp16 speed up matrix multiplies (tensor cores, half the bytes); autocast pays for
that with a cast per layer and a copy of every weight in half precision each step. A model
whose step is a few hundred GFLOP (issue 19: width 512, depth 4, batch 256, 8 tokens: about
150 GFLOP, 16.5k samples/s in bf16 against 20k in fp32 on an H100) is bound by kernel
launches and memory traffic, not by matmuls, so autocast only adds work."""

from __future__ import annotations

#: positions each parameter is applied at per sample (the 8x8 input: 8 row tokens for the
#: transformer, 64 pixels for the cnn's convolutions, once for the mlp)
POSITIONS = {"mlp": 1, "cnn": 64, "transformer": 8}
#: below this many FLOPs per optimizer step and rank, matmuls do not dominate a GPU step
SMALL_STEP_FLOPS = 1e12


def flops_per_step(model: str, parameters: int, batch_size: int, grad_accum: int) -> float:
    """Forward + backward FLOPs of one optimizer step on one rank: 6 per parameter per
    position per sample (2 forward, 4 backward), the usual estimate."""
    return 6.0 * parameters * POSITIONS.get(model, 1) * batch_size * grad_accum


def precision_label(amp: str) -> str:
    """What the step computes in: fp32, or bf16/fp16 under autocast."""
    return "fp32" if amp == "off" else amp


def precision_note(amp: str, device: str, flops: float, compute_s: float) -> str | None:
    """A note when ``amp`` cannot speed this run up; None when it can (or is off).
    ``compute_s`` is the measured compute time per step (NaN when unknown)."""
    if amp == "off":
        return None
    if not device.startswith("cuda"):
        return (f"{amp} on CPU: autocast runs matmuls in {amp} only where the CPU has native "
                "support (AMX, AVX512-BF16); elsewhere it converts and is often slower than "
                "fp32")
    if flops >= SMALL_STEP_FLOPS:
        return None
    rate = ""
    if compute_s == compute_s and compute_s > 0:  # not NaN
        rate = f", {flops / compute_s / 1e12:.1f} TFLOP/s achieved"
    return (f"{amp} gains little on this model: {flops / 1e9:.0f} GFLOP per step and rank"
            f"{rate}, below ~{SMALL_STEP_FLOPS / 1e12:.0f} TFLOP where matmuls dominate a GPU "
            "step; kernel launches and memory traffic do, and autocast adds a cast per layer "
            "and a half-precision copy of the weights every step. Expect a gain with a larger "
            "--width or --batch-size (or keep fp32)")

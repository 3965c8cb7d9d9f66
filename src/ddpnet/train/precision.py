"""Why a lower precision did or did not pay (pure): the work of one step in FLOPs, and the
note the summary carries when bf16/fp16 cannot gain on this model.

bf16 and fp16 speed up matrix multiplies (tensor cores, half the bytes); autocast pays for
that with a cast per layer and a copy of every weight in half precision each step. A model
whose step is a few hundred GFLOP (issue 19: width 512, depth 4, batch 256, 8 tokens: about
150 GFLOP, 16.5k samples/s in bf16 against 20k in fp32 on an H100) is bound by kernel
launches and memory traffic, not by matmuls, so autocast only adds work. The transformer's
GPU defaults (``train.defaults``) are sized to be matmul-bound instead."""

from __future__ import annotations

#: tokens per sample (the transformer: one per image row) and pixels (the cnn's positions)
TOKENS, PIXELS = 8, 64
#: below this many FLOPs per optimizer step and rank, matmuls do not dominate a GPU step
SMALL_STEP_FLOPS = 1e12


def head_parameters(width: int, num_classes: int = 10) -> int:
    """The classifier head's weights and biases (applied once per sample)."""
    return width * num_classes + num_classes


def flops_per_sample(model: str, parameters: int, width: int, depth: int) -> float:
    """Forward + backward FLOPs of one sample from the model's shape: 6 per parameter per
    position it is applied at (2 forward, 4 backward: Kaplan et al. 2020, "Scaling laws",
    C = 6N per token), plus, for the transformer, the attention scores and their use, which
    no parameter counts: 12 x depth x tokens x width per token (PaLM, Chowdhery et al. 2022,
    appendix B). So, with T = 8 tokens and N the parameters applied per token (all but the
    head and the position table):

    - transformer: T x (6 N + 12 depth T width) + 6 x head
    - cnn: 64 x 6 x (convolution parameters) + 6 x head
    - mlp: 6 x parameters
    """
    head = head_parameters(width)
    if model == "transformer":
        per_token = parameters - head - TOKENS * width
        return TOKENS * (6.0 * per_token + 12.0 * depth * TOKENS * width) + 6.0 * head
    if model == "cnn":
        head = head_parameters(width * PIXELS)  # its head reads every channel of every pixel
        return PIXELS * 6.0 * (parameters - head) + 6.0 * head
    return 6.0 * parameters


def flops_per_step(model: str, parameters: int, *, width: int, depth: int, batch_size: int,
                   grad_accum: int = 1) -> float:
    """Forward + backward FLOPs of one optimizer step on one rank."""
    return flops_per_sample(model, parameters, width, depth) * batch_size * grad_accum


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

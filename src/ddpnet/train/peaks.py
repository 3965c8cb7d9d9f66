"""Model FLOP utilisation (pure): a table of known GPUs' dense peak TFLOP/s per precision, the
peak a run's precision uses, and MFU = model FLOP/s over that peak (PaLM's definition: the
model's FLOPs, not the hardware's, so recomputation or padding never raise it).

Peaks are NVIDIA's datasheet figures *without* structured sparsity (the datasheets quote
bf16/fp16/tf32 tensor-core rates "with sparsity": the dense rate is half). fp32 is the
non-tensor-core rate; an fp32 run with TF32 matmuls (``--tf32``, the CUDA default) is measured
against the tf32 peak."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class GpuPeak:
    """One GPU model's dense peaks in TFLOP/s (None: no such tensor-core path)."""

    name: str
    #: regular expression on ``torch.cuda.get_device_name()`` (case-insensitive)
    pattern: str
    fp32: float
    tf32: float | None
    bf16: float | None
    fp16: float
    source: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_H100 = "NVIDIA H100 Tensor Core GPU datasheet (2023), dense = sparse / 2"
_H200 = "NVIDIA H200 Tensor Core GPU datasheet (2024), dense = sparse / 2"
#: first match wins: the more specific names first (H100 NVL/PCIe before H100, L40S before L4)
PEAKS: tuple[GpuPeak, ...] = (
    GpuPeak("GH200", r"GH200", 67.0, 494.7, 989.4, 989.4,
            "NVIDIA GH200 Grace Hopper Superchip datasheet (2023), dense = sparse / 2"),
    GpuPeak("H100 NVL", r"H100 NVL", 60.0, 417.5, 835.5, 835.5, _H100),
    GpuPeak("H100 PCIe", r"H100.*PCIe", 51.0, 378.0, 756.5, 756.5, _H100),
    GpuPeak("H100 SXM", r"H100", 67.0, 494.7, 989.4, 989.4, _H100),
    GpuPeak("H200 NVL", r"H200 NVL", 60.0, 417.5, 835.5, 835.5, _H200),
    GpuPeak("H200 SXM", r"H200", 67.0, 494.7, 989.4, 989.4, _H200),
    GpuPeak("A100", r"A100", 19.5, 156.0, 312.0, 312.0,
            "NVIDIA A100 Tensor Core GPU datasheet (2021), dense figures"),
    GpuPeak("L40S", r"L40S", 91.6, 183.0, 362.05, 362.05,
            "NVIDIA L40S datasheet (2023), dense = sparse / 2"),
    GpuPeak("L4", r"\bL4\b", 30.3, 60.0, 121.0, 121.0,
            "NVIDIA L4 Tensor Core GPU datasheet (2023), dense = sparse / 2"),
    GpuPeak("A10", r"\bA10\b", 31.2, 62.5, 125.0, 125.0,
            "NVIDIA A10 Tensor Core GPU datasheet (2021), dense = sparse / 2"),
    GpuPeak("V100 PCIe", r"V100.*PCIE", 14.0, None, None, 112.0,
            "NVIDIA V100 Tensor Core GPU datasheet (2020)"),
    GpuPeak("V100 SXM2", r"V100", 15.7, None, None, 125.0,
            "NVIDIA V100 Tensor Core GPU datasheet (2020)"),
    GpuPeak("T4", r"\bT4\b", 8.1, None, None, 65.0,
            "NVIDIA T4 Tensor Core GPU datasheet (2019)"),
)


def lookup(device_name: str) -> GpuPeak | None:
    """The table's row for a CUDA device name, e.g. "NVIDIA H100 80GB HBM3" (H100 SXM)."""
    for peak in PEAKS:
        if re.search(peak.pattern, device_name, re.IGNORECASE):
            return peak
    return None


def peak_key(precision: str, tf32: bool) -> str:
    """Which column a run is measured against: its autocast dtype, else tf32 or fp32."""
    if precision in ("bf16", "fp16"):
        return precision
    return "tf32" if tf32 else "fp32"


@dataclass(frozen=True)
class Utilisation:
    """A run's model FLOP/s and, on a known GPU, its share of the peak (MFU)."""

    #: model TFLOP/s per rank (forward + backward, ``precision.flops_per_sample``)
    tflops: float
    #: "H100 SXM", None where the device is not in the table (or is a CPU)
    gpu: str | None
    #: which peak: bf16, fp16, tf32 or fp32
    peak_of: str
    peak_tflops: float | None
    mfu: float | None
    source: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def utilisation(flops_per_step: float, step_time_s: float, *, device: str,
                device_name: str, precision: str, tf32: bool) -> Utilisation:
    """MFU of a run on one rank: ``flops_per_step / step_time_s`` over the peak of its
    precision on ``device_name`` (None on a CPU, an unknown GPU, or a precision the GPU has
    no tensor cores for)."""
    rate = flops_per_step / step_time_s / 1e12 if step_time_s > 0 else float("nan")
    key = peak_key(precision, tf32)
    if not device.startswith("cuda"):
        return Utilisation(rate, None, key, None, None, "no peak table for CPUs")
    row = lookup(device_name)
    if row is None:
        return Utilisation(rate, None, key, None, None,
                           f"{device_name!r} is not in ddpnet.train.peaks.PEAKS")
    peak: float | None = getattr(row, key)
    if peak is None:
        return Utilisation(rate, row.name, key, None, None, f"{row.name} has no {key} path")
    return Utilisation(rate, row.name, key, peak, rate / peak if rate == rate else None,
                       row.source)

"""The run's size where the flags leave it open, per model and device (pure): small on a CPU,
where tests and demos run, and matmul-bound on a GPU for the transformer, the model that shows
what AMP buys. Every choice carries its reason."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

#: the TrainConfig fields a device default fills when their flag was not given
SIZE_FIELDS = ("width", "depth", "batch_size", "samples")


@dataclass(frozen=True)
class Sizes:
    """A model's size and data on one kind of device, and why."""

    width: int
    depth: int
    batch_size: int
    samples: int
    reason: str

    def values(self) -> dict[str, int]:
        return {f: int(getattr(self, f)) for f in SIZE_FIELDS}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: the CPU default of every model (and the GPU default of the mlp and the cnn)
SMALL = Sizes(64, 2, 32, 4096,
              "small: seconds on a CPU core; the transformer passes 0.8 eval accuracy on the "
              "synthetic task in 300 steps (tests/train/test_learns.py)")
#: the transformer on a GPU: width 2048, depth 4 (201M parameters), 1024 samples x 8 tokens
#: per step: ~10 TFLOP per step in GEMMs of 8192 x 2048 x 8192, so matmuls (tensor cores)
#: dominate and bf16 can pay; issue 30 measured width 512 at batch 256 launch-bound (bf16
#: 0.72x fp32, 1% of an H100's peak)
GPU_TRANSFORMER = Sizes(2048, 4, 1024, 131072,
                        "GPU transformer: ~10 TFLOP per step in 8192 x 2048 x 8192 GEMMs, "
                        "matmul-bound, so bf16/fp16 tensor cores pay (fits a 24 GB GPU)")
SMALL_ON_GPU = Sizes(SMALL.width, SMALL.depth, SMALL.batch_size, SMALL.samples,
                     "the mlp and the cnn stay small on a GPU: they exist for comm-bound and "
                     "CPU runs; size them with --width/--batch-size (the transformer is the "
                     "GPU reference)")


def sizes_for(model: str, device: str) -> Sizes:
    """The defaults of ``model`` on ``device`` ("cpu" or "cuda[:N]")."""
    if not device.startswith("cuda"):
        return SMALL
    return GPU_TRANSFORMER if model == "transformer" else SMALL_ON_GPU




def _sizes(s: Sizes) -> str:
    return f"{s.width}/{s.depth}/{s.batch_size}/{s.samples}"


#: for ``ddpnet train --help``: the defaults in one line
SIZES_HELP = (f"width/depth/batch/samples {_sizes(SMALL)} on CPU, "
              f"{_sizes(GPU_TRANSFORMER)} for the transformer on a GPU (docs/train.md)")

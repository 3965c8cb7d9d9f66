"""What the training loop reports (pure records, no torch): a :class:`StepEvent` to every
callback after each optimizer step, and the run's :class:`Summary`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StepEvent:
    """What the loop tells its callbacks after every optimizer step, on every rank.

    This is the hook point for telemetry (``--monitor``): append a callable taking a
    ``StepEvent`` to ``train(..., callbacks=[...])``. Callbacks run on the training thread,
    so they must be cheap; ``eval_*`` and ``global_loss`` are set on log steps only.
    """

    rank: int
    world_size: int
    step: int
    total_steps: int
    epoch: int
    #: this rank's mean loss over the step's micro-batches
    loss: float
    #: samples all ranks processed in this step
    global_samples: int
    step_time_s: float
    #: forward+backward time without communication (estimated, see ``comm_wait_s``)
    compute_s: float
    #: time the synchronising backward took beyond pure compute: all-reduce not hidden
    #: behind backward (estimated as sync backward minus a no_sync forward/backward)
    comm_wait_s: float
    bytes_allreduced: int
    is_log_step: bool = False
    global_loss: float | None = None
    eval_loss: float | None = None
    eval_accuracy: float | None = None
    samples_per_s: float | None = None


StepCallback = Callable[[StepEvent], None]


@dataclass(frozen=True)
class Summary:
    steps: int
    final_loss: float
    eval_loss: float
    eval_accuracy: float
    samples_per_s: float
    bytes_per_step: int
    step_time_s: float
    compute_s: float
    comm_wait_s: float
    comm_share: float
    parameters: int
    world_size: int
    resumed_from: int | None
    config: dict[str, Any]
    backend: str
    device: str
    bytes_note: str
    notes: tuple[str, ...] = field(default=())
    #: the resolved optimiser (``ddpnet.train.optim.OptimPlan.to_dict``)
    optimizer: dict[str, Any] = field(default_factory=dict)
    #: what the step computed in (fp32, bf16, fp16): samples/s is per precision
    precision: str = "fp32"
    #: estimated forward+backward FLOPs per optimizer step and rank
    flops_per_step: float = 0.0
    #: why bf16/fp16 cannot speed this run up (``train.precision``), None when it can
    precision_note: str | None = None
    #: "NVIDIA H100 80GB HBM3", or "cpu"
    device_name: str = "cpu"
    #: CUDA: whether fp32 matmuls ran on TF32 tensor cores; None on CPU
    tf32: bool | None = None
    #: model TFLOP/s per rank and MFU (``ddpnet.train.peaks.Utilisation.to_dict``)
    utilisation: dict[str, Any] = field(default_factory=dict)

    @property
    def mfu(self) -> float | None:
        value = self.utilisation.get("mfu")
        return None if value is None else float(value)

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "final_loss": self.final_loss,
            "eval_loss": self.eval_loss,
            "eval_accuracy": self.eval_accuracy,
            "samples_per_s": self.samples_per_s,
            "precision": self.precision,
            "flops_per_step": self.flops_per_step,
            "precision_note": self.precision_note,
            "tf32": self.tf32,
            "model_tflops": self.utilisation.get("tflops"),
            "mfu": self.mfu,
            "utilisation": self.utilisation,
            "device_name": self.device_name,
            "bytes_per_step": self.bytes_per_step,
            "bytes_note": self.bytes_note,
            "step_time_s": self.step_time_s,
            "compute_s": self.compute_s,
            "comm_wait_s": self.comm_wait_s,
            "comm_share": self.comm_share,
            "parameters": self.parameters,
            "world_size": self.world_size,
            "backend": self.backend,
            "device": self.device,
            "resumed_from": self.resumed_from,
            "notes": list(self.notes),
            "optimizer": self.optimizer,
            "config": self.config,
        }

"""Where tensors live and how an iteration is timed: wall clock on CPU (gloo), CUDA events on
GPU (nccl), so the time covers the collective's GPU work and not just its enqueueing."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class DevicePlan:
    """``device`` as torch spells it (``cpu``, ``cuda:1``) and why."""

    device: str
    reason: str

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")


def plan_device(backend: str, environ: Mapping[str, str], cuda_count: int,
                current: int | None = None) -> DevicePlan:
    """Pure: NCCL needs device tensors on this rank's GPU; gloo benchmarks host memory."""
    if backend != "nccl":
        return DevicePlan("cpu", f"backend {backend} moves host tensors")
    if cuda_count < 1:
        return DevicePlan("cpu", "backend nccl but no CUDA device is visible")
    if current is not None:
        return DevicePlan(f"cuda:{current}", "backend nccl: the current CUDA device")
    local = int(environ.get("LOCAL_RANK", "0") or 0)
    return DevicePlan(f"cuda:{local % cuda_count}",
                      f"backend nccl: LOCAL_RANK {local} of {cuda_count} visible GPUs")


class Timer(Protocol):
    def start(self) -> None: ...
    def stop(self) -> float:
        """Seconds since start(), once the timed work is complete."""
        ...


class WallTimer:
    """perf_counter around a synchronous host collective."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._t0 = 0.0

    def start(self) -> None:
        self._t0 = self._clock()

    def stop(self) -> float:
        return self._clock() - self._t0


class CudaEventTimer:
    """A pair of CUDA events recorded on the current stream around the collective (which makes
    the current stream wait for NCCL's); ``elapsed_time`` is in milliseconds."""

    def __init__(self, cuda: Any) -> None:
        self._cuda = cuda
        self._begin = cuda.Event(enable_timing=True)
        self._end = cuda.Event(enable_timing=True)

    def start(self) -> None:
        self._begin.record()

    def stop(self) -> float:
        self._end.record()
        self._end.synchronize()
        return float(self._begin.elapsed_time(self._end)) / 1000.0


def make_timer(plan: DevicePlan, torch: Any) -> Timer:
    if plan.is_cuda:
        return CudaEventTimer(torch.cuda)
    return WallTimer()

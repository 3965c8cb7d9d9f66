"""Device planning and timers: wall clock for gloo, CUDA events for NCCL (the CUDA parts run
only where a GPU is visible; the event logic is tested with a fake ``torch.cuda``)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from ddpnet.bench.timing import CudaEventTimer, WallTimer, make_timer, plan_device


@pytest.mark.parametrize(("backend", "environ", "count", "current", "device"), [
    ("gloo", {}, 0, None, "cpu"),
    ("gloo", {"LOCAL_RANK": "3"}, 8, None, "cpu"),       # gloo benchmarks host memory
    ("nccl", {"LOCAL_RANK": "3"}, 8, None, "cuda:3"),
    ("nccl", {"LOCAL_RANK": "9"}, 8, None, "cuda:1"),
    ("nccl", {}, 4, None, "cuda:0"),
    ("nccl", {"LOCAL_RANK": "3"}, 8, 5, "cuda:5"),        # set_device already chose
    ("nccl", {"LOCAL_RANK": "0"}, 0, None, "cpu"),
])
def test_plan_device(backend: str, environ: dict[str, str], count: int, current: int | None,
                     device: str) -> None:
    plan = plan_device(backend, environ, count, current)
    assert plan.device == device and plan.reason
    assert plan.is_cuda == device.startswith("cuda")


def test_wall_timer() -> None:
    ticks = iter([10.0, 10.25])
    timer = WallTimer(clock=lambda: next(ticks))
    timer.start()
    assert timer.stop() == pytest.approx(0.25)


class FakeEvent:
    log: ClassVar[list[str]] = []

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.recorded = False
        self.synced = False

    def record(self) -> None:
        self.recorded = True
        FakeEvent.log.append("record")

    def synchronize(self) -> None:
        assert self.recorded
        self.synced = True
        FakeEvent.log.append("sync")

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.recorded and end.recorded and end.synced  # only after the end completed
        return 12.5  # milliseconds, as CUDA events report


class FakeCuda:
    Event = FakeEvent


def test_cuda_event_timer_waits_for_the_end_event_and_converts_ms() -> None:
    FakeEvent.log = []
    timer = CudaEventTimer(FakeCuda())
    timer.start()
    assert timer.stop() == pytest.approx(0.0125)
    assert FakeEvent.log == ["record", "record", "sync"]


def test_make_timer_picks_by_device() -> None:
    from ddpnet.bench.timing import DevicePlan

    class FakeTorch:
        cuda = FakeCuda()

    assert isinstance(make_timer(DevicePlan("cpu", ""), FakeTorch()), WallTimer)
    assert isinstance(make_timer(DevicePlan("cuda:0", ""), FakeTorch()), CudaEventTimer)


def _cuda() -> Any:
    import torch

    return torch if torch.cuda.is_available() else None


@pytest.mark.skipif(_cuda() is None, reason="no CUDA GPU visible (CPU-only torch)")
def test_cuda_event_timer_real_gpu() -> None:
    import torch

    timer = CudaEventTimer(torch.cuda)
    x = torch.ones(1 << 24, device="cuda")
    timer.start()
    for _ in range(10):
        x.mul_(1.0001)
    assert timer.stop() > 0


class RecordingDist:
    """The parts of torch.distributed the driver's sync touches, recording calls."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.calls: list[tuple[str, Any]] = []

    def get_rank(self) -> int:
        return 1

    def get_world_size(self) -> int:
        return 2

    def get_backend(self) -> str:
        return self.backend

    def barrier(self, **kwargs: Any) -> None:
        self.calls.append(("barrier", kwargs))


def test_driver_sync_on_nccl_waits_for_the_gpu_then_barriers_on_its_device() -> None:
    import torch

    from ddpnet.bench.config import BenchConfig
    from ddpnet.bench.driver import Driver
    from ddpnet.bench.timing import DevicePlan

    dist = RecordingDist("nccl")
    synced: list[Any] = []

    class TorchWithFakeCuda:
        device = torch.device
        cuda = type("cuda", (), {"synchronize": staticmethod(synced.append)})

    driver = Driver(BenchConfig(), TorchWithFakeCuda(), dist, DevicePlan("cuda:1", "test"),
                    timer=WallTimer())
    driver.sync()
    assert synced == [torch.device("cuda:1")]
    assert dist.calls == [("barrier", {"device_ids": [1]})]
    assert driver.ctx.device == torch.device("cuda:1")  # buffers are allocated there

    gloo = RecordingDist("gloo")
    Driver(BenchConfig(), torch, gloo, DevicePlan("cpu", "test")).sync()
    assert gloo.calls == [("barrier", {})]


@pytest.mark.skipif(_cuda() is None or not _cuda().distributed.is_nccl_available(),
                    reason="no CUDA GPU / NCCL (CPU-only torch)")
def test_nccl_one_rank_real_gpu(tmp_path: Any) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from ddpnet.bench import BenchConfig, run

    dist.init_process_group("nccl", init_method=f"file://{tmp_path}/store", rank=0,
                            world_size=1, timeout=timedelta(seconds=60))
    try:
        result = run(BenchConfig(collectives=("all_reduce", "broadcast"), min_bytes=1 << 20,
                                 max_bytes=1 << 20, iters=3, warmup=1, check=True,
                                 baseline="none"), environ={"LOCAL_RANK": "0"})
    finally:
        dist.destroy_process_group()
    assert result.device.startswith("cuda") and torch.cuda.is_available()
    assert all(r.wrong == 0 and r.time_us > 0 for r in result.rows)
    assert {s.collective for s in result.skipped} == set()

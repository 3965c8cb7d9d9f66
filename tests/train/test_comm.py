"""Bytes handed to all-reduce per step, per hook, against torch's own PowerSGD accounting."""

from __future__ import annotations

import pytest

from ddpnet.train.comm import allreduce_bytes
from ddpnet.train.model import build_model, count_parameters
from ddpnet.train.powersgd import compresses as powersgd_compresses

SHAPES = [(2500, 2500), (2500,), (4, 2500)]


def test_fp32_and_16_bit_hooks() -> None:
    numel = 2500 * 2500 + 2500 + 10000
    assert allreduce_bytes(SHAPES, "none") == 4 * numel
    assert allreduce_bytes(SHAPES, "bf16") == allreduce_bytes(SHAPES, "fp16") == 2 * numel


def test_powersgd_compresses_big_matrices_only() -> None:
    assert powersgd_compresses(2500, 2500, 4)
    assert not powersgd_compresses(4, 2500, 4)  # (4+2500)*4*2 > 10000: sent whole
    got = allreduce_bytes(SHAPES, "powersgd", powersgd_rank=4)
    assert got == 4 * ((2500 + 2500) * 4 + 2500 + 10000)
    assert got < allreduce_bytes(SHAPES, "none") / 100


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_models_scale_with_width(name: str) -> None:
    small = count_parameters(build_model(name, 16, 2, 10))
    big = count_parameters(build_model(name, 64, 2, 10))
    assert big > 3 * small


def test_the_benchmark_mlp_is_about_25m_parameters() -> None:
    n = count_parameters(build_model("mlp", 5000, 2, 10))
    assert 24e6 < n < 26e6


class _FakeDDP:
    """What register_hook touches of a DistributedDataParallel: the module and the call."""

    def __init__(self) -> None:
        import torch

        self.module = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Linear(32, 10))
        self.registered: list[tuple[object, object]] = []

    def register_comm_hook(self, state: object, hook: object) -> None:
        self.registered.append((state, hook))


@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_powersgd_registers_ours_on_gloo_and_torchs_on_nccl(
        monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

    from ddpnet.train.comm import register_hook
    from ddpnet.train.powersgd import PowerSGD, powersgd_hook

    monkeypatch.setattr(dist, "get_backend", lambda *a, **k: backend)
    ddp = _FakeDDP()
    plan = register_hook(ddp, "powersgd", powersgd_rank=3, start_iter=5)
    [(state, hook)] = ddp.registered
    if backend == "gloo":
        assert hook is powersgd_hook and isinstance(state, PowerSGD)
        assert (state.rank, state.start_iter) == (3, 5)
        assert "ddpnet's hook" in plan.note
    else:
        assert hook is psgd.powerSGD_hook and isinstance(state, psgd.PowerSGDState)
        assert state.matrix_approximation_rank == 3 and state.start_powerSGD_iter == 5
        assert "torch's hook" in plan.note
    assert plan.bytes_per_step == allreduce_bytes(
        [tuple(p.shape) for p in ddp.module.parameters()], "powersgd", powersgd_rank=3)


def test_timed_hook_reports_launch_to_completion_and_returns_the_inner_future() -> None:
    import torch

    from ddpnet.train.comm import timed_hook

    clock = iter([1.0, 3.5]).__next__
    fut: torch.futures.Future[object] = torch.futures.Future()
    calls: list[tuple[object, object]] = []
    spans: list[tuple[float, float]] = []

    def inner(state: object, bucket: object) -> torch.futures.Future[object]:
        calls.append((state, bucket))
        return fut

    hook = timed_hook(inner, lambda a, b: spans.append((a, b)), clock=clock)
    assert hook("state", "bucket") is fut and calls == [("state", "bucket")]
    assert spans == []  # launched, not completed
    fut.set_result("done")
    assert spans == [(1.0, 3.5)] and hook.__annotations__ == {}
    assert hook.__name__ == "timed_inner"


@pytest.mark.parametrize("name", ["none", "bf16", "powersgd"])
def test_register_hook_wraps_whichever_hook_runs_when_timed(
        monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    from ddpnet.train.comm import register_hook
    from ddpnet.train.powersgd import PowerSGD

    monkeypatch.setattr(dist, "get_backend", lambda *a, **k: "gloo")
    plain, timed = _FakeDDP(), _FakeDDP()
    a = register_hook(plain, name, powersgd_rank=2, start_iter=1)
    b = register_hook(timed, name, powersgd_rank=2, start_iter=1, timing=lambda s, e: None)
    assert a.bytes_per_step == b.bytes_per_step
    assert (a.note == b.note) == (name != "none"), b.note  # none says it runs a Python hook
    [(state, hook)] = timed.registered
    assert getattr(hook, "__name__", "").startswith("timed_")
    if name == "none":
        assert plain.registered == []  # DDP's built-in all-reduce, untouched
        assert hook.__name__ == f"timed_{allreduce_hook.__name__}"  # type: ignore[attr-defined]
    else:
        assert len(plain.registered) == 1
    if name == "powersgd":
        assert isinstance(state, PowerSGD) and (state.rank, state.start_iter) == (2, 1)


def test_only_a_watched_gloo_group_is_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    from ddpnet.train.comm import watch_timing
    from ddpnet.watch import session

    monkeypatch.setattr(session, "active", lambda: True)
    assert watch_timing("gloo") == session.recorder().add_wait
    assert watch_timing("nccl") is None  # NCCL's Flight Recorder times its own
    monkeypatch.setattr(session, "active", lambda: False)
    assert watch_timing("gloo") is None

"""``ddpnet train`` marks its legitimately long phases for the watch (each gets its own
allowance, ``watch.threshold``): the checkpoint save, evaluation, the first steps and each
epoch's first batch. Loop methods on stand-in parts; the recorder is the real one."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from ddpnet.train import loop
from ddpnet.watch.session import recorder


def _loop(**kw: Any) -> Any:
    parts = SimpleNamespace(steps_per_epoch=3, total_steps=7, loader=[], optimizer=None,
                            scaler=None, split=SimpleNamespace(eval=None),
                            sampler=SimpleNamespace(set_epoch=lambda _e: None))
    base = dict(parts=parts, cfg=SimpleNamespace(seed=0, grad_accum=1), d=None, step=0,
                start_step=0, warmup=2, ddp=SimpleNamespace(module=None), meter=None)
    return SimpleNamespace(**{**base, **kw})


def test_the_checkpoint_save_is_marked(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    monkeypatch.setattr(loop, "save", lambda *a, **k: seen.append(recorder().long_phase))
    loop.Loop.save_checkpoint(_loop(step=6))
    assert seen == ["checkpoint"] and recorder().long_phase == ""


def test_evaluation_is_marked(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def evaluate(*_a: Any) -> tuple[float, float]:
        seen.append(recorder().long_phase)
        return 1.0, 0.5

    monkeypatch.setattr(loop, "evaluate", evaluate)
    monkeypatch.setattr(loop, "_mean_across_ranks", lambda value, _device: value)
    meter = SimpleNamespace(interval_rate=lambda _n: 1.0)
    loop.Loop.log_metrics(_loop(meter=meter, global_samples=8, d=SimpleNamespace(device="cpu")),
                          2.0)
    assert seen == ["eval"] and recorder().long_phase == ""


def test_the_first_steps_and_each_epochs_first_batch_are_warm_up() -> None:
    steps: list[tuple[int, str]] = []
    fake = _loop()

    def one_step(_epoch: int, _batches: Any) -> None:
        steps.append((fake.step, recorder().long_phase))
        fake.step += 1

    fake.one_step, fake.preempt_point = one_step, lambda: None
    loop.Loop.run(fake)
    # steps 0 and 1 (DDP builds its buckets), step 3 and 6 (new epochs: the loader restarts)
    assert steps == [(0, "warmup"), (1, "warmup"), (2, ""), (3, "warmup"), (4, ""), (5, ""),
                     (6, "warmup")]

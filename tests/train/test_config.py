"""Flag validation is pure and runs before torch is asked anything."""

from __future__ import annotations

import pytest

from ddpnet.errors import ConfigError
from ddpnet.train.config import TrainConfig, validate


def _never() -> bool:
    raise AssertionError("CUDA was probed before the flag errors")


@pytest.mark.parametrize(("changes", "needle"), [
    ({"comm_hook": "powersgd", "powersgd_rank": 0}, "--powersgd-rank"),
    ({"comm_hook": "powersgd", "powersgd_start_iter": 1}, "--powersgd-start-iter"),
    ({"checkpoint_every": 5}, "--checkpoint-dir"),
    ({"grad_accum": 0}, "--grad-accum"),
    ({"bucket_cap_mb": 0}, "--bucket-cap-mb"),
    ({"lr": -1}, "--lr"),
])
def test_flag_errors_come_before_any_cuda_probe(changes: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate(TrainConfig(**changes), cuda_available=_never)  # type: ignore[arg-type]
    assert needle in info.value.message and info.value.hint


def test_fp16_needs_cuda_and_bf16_does_not() -> None:
    with pytest.raises(ConfigError, match="CUDA"):
        validate(TrainConfig(amp="fp16"), cuda_available=False)
    assert validate(TrainConfig(amp="fp16"), cuda_available=True).amp == "fp16"
    assert validate(TrainConfig(amp="bf16"), cuda_available=False).amp == "bf16"
    with pytest.raises(ConfigError, match="no CUDA"):
        validate(TrainConfig(device="cuda"), cuda_available=False)

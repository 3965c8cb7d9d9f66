"""Flags -> BenchOptions: the bound on --local before anything starts, --timeout, and the JSON
string that carries the options to each local rank."""

from __future__ import annotations

from typing import Any

import pytest

from ddpnet.bench.config import BenchConfig
from ddpnet.bench.options import BenchOptions, build_options
from ddpnet.errors import ConfigError
from ddpnet.local import MAX_LOCAL_RANKS

FLAGS: dict[str, Any] = {
    "collectives": "all_reduce,broadcast", "min_bytes": "1K", "max_bytes": "64K",
    "factor": 4, "iters": 3, "warmup": 1, "dtype": "float16", "op": "max", "mode": "inplace",
    "check": True, "baseline": "tcp", "baseline_time": 0.5, "min_busbw": 1.5,
    "backend": "gloo", "timeout": 30.0, "as_json": True, "csv_path": "rows.csv",
    "plot_path": None, "local": 2,
}


def test_build_options_from_flags() -> None:
    options = build_options(**FLAGS)
    cfg = options.config
    assert cfg.collectives == ("all_reduce", "broadcast")
    assert (cfg.min_bytes, cfg.max_bytes, cfg.dtype, cfg.min_busbw_gbps) == (
        1024, 64 << 10, "float16", 1.5)
    assert cfg.progress is False  # --json: no progress bar
    assert (options.backend, options.timeout, options.local) == ("gloo", 30.0, 2)
    assert build_options(**{**FLAGS, "as_json": False}).config.progress is True


@pytest.mark.parametrize(("local", "needle"), [
    (0, "--local 0: need at least 1 rank"),
    (-3, "--local -3"),
    (MAX_LOCAL_RANKS + 1, f"more than {MAX_LOCAL_RANKS} ranks"),
    (100000, "--local 100000"),
])
def test_local_is_bounded(local: int, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_options(**{**FLAGS, "local": local})
    assert needle in err.value.message and err.value.hint


def test_local_at_the_bound_and_none_are_accepted() -> None:
    assert build_options(**{**FLAGS, "local": MAX_LOCAL_RANKS}).local == MAX_LOCAL_RANKS
    assert build_options(**{**FLAGS, "local": None}).local is None


@pytest.mark.parametrize("timeout", [0.0, -1.0, float("nan"), float("inf")])
def test_timeout_must_be_positive_and_finite(timeout: float) -> None:
    with pytest.raises(ConfigError, match="--timeout") as err:
        build_options(**{**FLAGS, "timeout": timeout})
    assert "--timeout 900" in err.value.hint


def test_json_round_trip_for_a_rank() -> None:
    options = build_options(**FLAGS)
    back = BenchOptions.from_json(options.to_json())
    assert back == options
    assert isinstance(back.config, BenchConfig) and isinstance(back.config.collectives, tuple)
    rank = options.for_rank()
    assert rank.local is None and rank.config == options.config
    assert BenchOptions.from_json(rank.to_json()) == rank

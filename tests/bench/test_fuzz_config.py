"""Property-based: bench's sizes, collective lists and whole configs parse to a valid value or
one clean ConfigError (exit 2), never another exception, and never an absurd value."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from ddpnet.bench.config import BenchConfig, parse_collectives, parse_size
from ddpnet.bench.options import check_timeout
from tests.fuzzing import FUZZ, clean, text

_size = st.one_of(st.from_regex(r"\s?[0-9\u0661]{1,30}\s?(K|M|G|KiB|MB|b|T|)\s?", fullmatch=True),
                  text)
_float = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(-1, 1e4))


@FUZZ
@given(_size)
def test_size_parses_or_fails_cleanly(value: str) -> None:
    size = clean(parse_size, value)
    assert size is None or size >= 0


@FUZZ
@given(st.one_of(text, st.lists(st.sampled_from(["all_reduce", "all-gather", "x", "", "all"]),
                                max_size=4).map(",".join)))
def test_collectives_parse_or_fail_cleanly(value: str) -> None:
    names = clean(parse_collectives, value)
    assert names is None or len(names) >= 1


@FUZZ
@given(st.integers(-2, 1 << 45), st.integers(-2, 1 << 45), st.integers(-2, 10**12),
       st.integers(-2, 10**12), _float, st.one_of(st.none(), _float))
def test_accepted_configs_are_finite_and_bounded(low: int, high: int, iters: int, warmup: int,
                                                 seconds: float, busbw: float | None) -> None:
    cfg = clean(BenchConfig, min_bytes=low, max_bytes=high, iters=iters, warmup=warmup,
                baseline_seconds=seconds, min_busbw_gbps=busbw)
    if cfg is not None:
        assert 1 <= cfg.min_bytes <= cfg.max_bytes <= 1 << 34
        assert 1 <= cfg.iters <= 100_000 and 0 <= cfg.warmup <= 100_000
        assert math.isfinite(cfg.baseline_seconds) and 0 < cfg.baseline_seconds <= 3600
        assert cfg.min_busbw_gbps is None or math.isfinite(cfg.min_busbw_gbps)
        assert len(cfg.sizes()) <= 64


def test_nan_inf_and_absurd_values_are_refused() -> None:
    # all of these used to be accepted (nan compares false with every bound)
    for kwargs in ({"baseline_seconds": math.nan}, {"baseline_seconds": math.inf},
                   {"min_busbw_gbps": math.nan}, {"min_busbw_gbps": math.inf},
                   {"max_bytes": 1 << 40}, {"iters": 10**9}, {"warmup": 10**9}):
        assert clean(BenchConfig, **kwargs) is None, kwargs
    assert BenchConfig(max_bytes=16 << 30, iters=100_000).max_bytes == 16 << 30


def test_a_name_with_a_newline_stays_on_one_line() -> None:
    assert clean(parse_collectives, "all_reduce,a\nb") is None  # clean() checks one line


def test_bench_timeout_is_bounded() -> None:
    for seconds in (math.nan, math.inf, 0.0, -1.0, 1e9):
        assert clean(check_timeout, seconds) is None, seconds
    assert check_timeout(900.0) == 900.0


def test_a_size_of_5000_digits_is_a_config_error() -> None:
    # int() refuses strings of more than 4300 digits with a ValueError, which escaped
    assert clean(parse_size, "9" * 5000) is None

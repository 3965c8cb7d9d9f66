"""Flags -> BenchConfig: sizes, the sweep and every bad value as a ConfigError."""

from __future__ import annotations

import pytest

from ddpnet.bench.config import (
    ALL_COLLECTIVES,
    BenchConfig,
    format_size,
    parse_collectives,
    parse_size,
)
from ddpnet.errors import ConfigError


@pytest.mark.parametrize(("text", "value"), [
    ("1K", 1024), ("256M", 256 << 20), ("64MiB", 64 << 20), ("1G", 1 << 30), ("512", 512),
    ("8kb", 8192), (" 2M ", 2 << 20),
])
def test_parse_size(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "1T", "-1K", "1.5M", "K"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_size(text)
    assert err.value.hint


def test_format_size_round_trips() -> None:
    for n in (1024, 64 << 20, 1 << 30, 512):
        assert parse_size(format_size(n)) == n


def test_a_size_just_under_a_unit_is_labelled_in_it() -> None:
    assert [format_size(n) for n in (1048572, 1536, 3 << 20 | 7, 1023, 1047552)] == [
        "1M", "1.5K", "3M", "1023B", "1023K"]


def test_sizes_sweep_like_nccl_tests() -> None:
    assert BenchConfig(min_bytes=1024, max_bytes=8192).sizes() == (1024, 2048, 4096, 8192)
    assert BenchConfig(min_bytes=1024, max_bytes=5000, factor=4).sizes() == (1024, 4096, 5000)
    assert BenchConfig(min_bytes=64, max_bytes=64).sizes() == (64,)
    assert BenchConfig(min_bytes=64, max_bytes=256, factor=1).sizes() == (64, 256)
    default = BenchConfig().sizes()
    assert default[0] == 1024 and default[-1] == 256 << 20 and len(default) == 19
    # without -e: seconds on CPU, nccl-tests' range on GPUs; -e or a larger -b wins
    assert BenchConfig().on_device(cuda=False).sizes()[-1] == 16 << 20
    assert BenchConfig().on_device(cuda=True).sizes()[-1] == 256 << 20
    assert BenchConfig(max_bytes=256 << 20).on_device(cuda=False).sizes()[-1] == 256 << 20
    assert BenchConfig(min_bytes=64 << 20).on_device(cuda=False).sizes() == (64 << 20,)


def test_parse_collectives() -> None:
    assert parse_collectives("all") == ALL_COLLECTIVES
    assert parse_collectives("all-reduce, send_recv,all_reduce") == ("all_reduce", "send_recv")
    with pytest.raises(ConfigError, match="allreduce"):
        parse_collectives("allreduce")


@pytest.mark.parametrize("kwargs", [
    {"min_bytes": 0}, {"min_bytes": 10, "max_bytes": 5}, {"factor": 0}, {"iters": 0},
    {"warmup": -1}, {"dtype": "int8"}, {"op": "xor"}, {"mode": "sideways"},
    {"baseline": "ping"}, {"baseline_seconds": 0}, {"min_busbw_gbps": -1.0},
    {"collectives": ()}, {"collectives": ("all_reduce", "gather")},
])
def test_bad_config(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError) as err:
        BenchConfig(**kwargs)  # type: ignore[arg-type]
    assert err.value.hint

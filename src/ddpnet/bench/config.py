"""What a benchmark run measures: a frozen config built from flags or by callers (``check``).

Pure: parsing sizes, dtypes and ops, and the size sweep, never touch torch or the network.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

from ddpnet.errors import ConfigError

#: every collective, in the order runs and tables show them
ALL_COLLECTIVES = (
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all",
    "send_recv",
)
DTYPES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int32": 4}
OPS = ("sum", "prod", "max", "min", "avg")
MODES = ("both", "inplace", "outofplace")
BASELINES = ("auto", "iperf3", "tcp", "none")

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20,
          "MB": 1 << 20, "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}


def parse_size(text: str) -> int:
    """``1K`` -> 1024, ``256M`` -> 268435456, ``64MiB``; binary units as nccl-tests uses."""
    match = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", str(text))
    if not match or match.group(2).upper() not in _UNITS:
        raise ConfigError(f"bad size {text!r}", "use a byte count with an optional "
                          "K/M/G suffix (binary), e.g. 1K, 64M, 1G")
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


def format_size(n: int) -> str:
    """Short binary size for tables and messages: 1024 -> ``1K``, 67108864 -> ``64M``."""
    for suffix, unit in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= unit and n % unit == 0:
            return f"{n // unit}{suffix}"
    return f"{n}B" if n < 1024 else f"{n / 1024:.1f}K"


def parse_collectives(text: str) -> tuple[str, ...]:
    """Comma list, ``all`` or empty for every collective; unknown names are a usage error."""
    names = [n.strip().replace("-", "_") for n in text.split(",") if n.strip()]
    if not names or names == ["all"]:
        return ALL_COLLECTIVES
    unknown = [n for n in names if n not in ALL_COLLECTIVES]
    if unknown:
        raise ConfigError(f"unknown collective(s): {', '.join(unknown)}",
                          f"choose from: {', '.join(ALL_COLLECTIVES)}")
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class BenchConfig:
    """One benchmark run. Sizes are bytes of the collective's total buffer (nccl-tests "size").

    ``baseline``: ``auto`` (iperf3 when installed, else tcp), ``iperf3``, ``tcp`` or ``none``;
    ``baseline_seconds`` is how long each link stream runs. ``min_busbw_gbps`` (gigabits/s):
    a collective whose best busbw is below it fails the run.
    """

    collectives: tuple[str, ...] = ALL_COLLECTIVES
    min_bytes: int = 1 << 10
    max_bytes: int = 256 << 20
    factor: int = 2
    iters: int = 20
    warmup: int = 5
    dtype: str = "float32"
    op: str = "sum"
    mode: str = "both"
    check: bool = False
    baseline: str = "auto"
    baseline_seconds: float = 3.0
    min_busbw_gbps: float | None = None
    progress: bool = False

    def __post_init__(self) -> None:
        validate(self)

    def sizes(self) -> tuple[int, ...]:
        """The size sweep: min, min*f, ... up to and including max (as nccl-tests -b/-e/-f)."""
        out = [self.min_bytes]
        if self.factor > 1:
            while out[-1] * self.factor <= self.max_bytes:
                out.append(out[-1] * self.factor)
        if out[-1] != self.max_bytes:
            out.append(self.max_bytes)
        return tuple(out)


def _unknown(value: str, allowed: Collection[str], what: str) -> tuple[bool, str, str]:
    return value not in allowed, f"unknown {what} {value!r}", f"choose from: {', '.join(allowed)}"


def problems(cfg: BenchConfig) -> list[tuple[str, str]]:
    """(message, hint) for every bad value, in flag order (pure)."""
    unknown = [n for n in cfg.collectives if n not in ALL_COLLECTIVES]
    checks = [
        (not cfg.collectives, "no collective chosen", "pass --collectives all_reduce,..."),
        *(_unknown(name, ALL_COLLECTIVES, "collective") for name in unknown),
        (cfg.min_bytes < 1 or cfg.max_bytes < cfg.min_bytes,
         f"bad size range {cfg.min_bytes}..{cfg.max_bytes}",
         "need 1 <= --min-bytes <= --max-bytes"),
        (cfg.factor < 1, f"bad --factor {cfg.factor}", "use an integer >= 1 (2 doubles)"),
        (cfg.iters < 1 or cfg.warmup < 0, f"bad --iters {cfg.iters} / --warmup {cfg.warmup}",
         "need --iters >= 1 and --warmup >= 0"),
        _unknown(cfg.dtype, DTYPES, "dtype"),
        _unknown(cfg.op, OPS, "op"),
        _unknown(cfg.mode, MODES, "mode"),
        _unknown(cfg.baseline, BASELINES, "baseline"),
        (cfg.baseline_seconds <= 0, "--baseline-time must be > 0", "e.g. --baseline-time 3"),
        (cfg.min_busbw_gbps is not None and cfg.min_busbw_gbps < 0,
         "--min-busbw must be >= 0", "a rate in Gb/s, e.g. --min-busbw 0.9"),
    ]
    return [(message, hint) for bad, message, hint in checks if bad]


def validate(cfg: BenchConfig) -> None:
    """Every bad value is a ConfigError naming the flag and the fix (the first one found)."""
    found = problems(cfg)
    if found:
        raise ConfigError(*found[0])

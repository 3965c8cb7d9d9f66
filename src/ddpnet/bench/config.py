"""What a benchmark run measures: a frozen config built from flags or by callers (``check``).

Pure: parsing sizes, dtypes and ops, and the size sweep, never touch torch or the network.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from dataclasses import dataclass, replace

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

#: bounds on what a user can make big (docs/bench.md): a buffer of 16 GiB, 100000 iterations,
#: an hour of baseline stream
MAX_BYTES = 16 << 30
#: the largest size without ``--max-bytes``: 256M on GPUs (nccl-tests' range), 16M on CPU,
#: where gloo moves a 256M buffer in ~0.3 s and the full sweep took 2.7 min on 2 ranks
#: (2026-12-07, 2 cores) against seconds to 16M (``-e 256M`` is the long sweep)
GPU_MAX_BYTES = 256 << 20
CPU_MAX_BYTES = 16 << 20
MAX_ITERS = 100_000
MAX_BASELINE_SECONDS = 3600.0

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20,
          "MB": 1 << 20, "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}


def parse_size(text: str) -> int:
    """``1K`` -> 1024, ``256M`` -> 268435456, ``64MiB``; binary units as nccl-tests uses."""
    match = re.fullmatch(r"\s*(\d{1,30})\s*([A-Za-z]*)\s*", str(text))  # not 4300+ digits
    if not match or match.group(2).upper() not in _UNITS:
        raise ConfigError(f"bad size {text!r}", "use a byte count with an optional "
                          "K/M/G suffix (binary), e.g. 1K, 64M, 1G")
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


_BINARY = (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10))


def format_size(n: int) -> str:
    """Short binary size for tables and messages: 1024 -> ``1K``, 67108864 -> ``64M``; a size
    a few bytes off (all_gather's per-rank count rounded on 3 ranks) in the largest unit it
    reaches at one decimal: 1048572 -> ``1M``, not ``1024.0K``."""
    for suffix, unit in _BINARY:
        if n >= unit and n % unit == 0:
            return f"{n // unit}{suffix}"
    if n < 1024:
        return f"{n}B"
    suffix, unit = next((s, u) for s, u in _BINARY if round(n / u, 1) >= 1)
    return f"{n / unit:.1f}".removesuffix(".0") + suffix


def parse_collectives(text: str) -> tuple[str, ...]:
    """Comma list, ``all`` or empty for every collective; unknown names are a usage error."""
    names = [n.strip().replace("-", "_") for n in text.split(",") if n.strip()]
    if not names or names == ["all"]:
        return ALL_COLLECTIVES
    unknown = [n for n in names if n not in ALL_COLLECTIVES]
    if unknown:
        shown = ", ".join(n if n.isprintable() else repr(n) for n in unknown)  # one line
        raise ConfigError(f"unknown collective(s): {shown}",
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
    #: None: by device (:meth:`on_device`; GPU's where it is not known yet)
    max_bytes: int | None = None
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

    @property
    def top(self) -> int:
        """The largest size: ``max_bytes``, else the GPU default (never below the smallest)."""
        return self.max_bytes if self.max_bytes is not None else max(GPU_MAX_BYTES,
                                                                     self.min_bytes)

    def on_device(self, cuda: bool) -> BenchConfig:
        """The sweep where the tensors live: without ``max_bytes``, 16M on CPU (seconds on
        gloo) and 256M on GPUs."""
        if self.max_bytes is not None:
            return self
        return replace(self, max_bytes=max(GPU_MAX_BYTES if cuda else CPU_MAX_BYTES,
                                           self.min_bytes))

    def sizes(self) -> tuple[int, ...]:
        """The size sweep: min, min*f, ... up to and including max (as nccl-tests -b/-e/-f)."""
        out = [self.min_bytes]
        if self.factor > 1:
            while out[-1] * self.factor <= self.top:
                out.append(out[-1] * self.factor)
        if out[-1] != self.top:
            out.append(self.top)
        return tuple(out)


def _unknown(value: str, allowed: Collection[str], what: str) -> tuple[bool, str, str]:
    return value not in allowed, f"unknown {what} {value!r}", f"choose from: {', '.join(allowed)}"


def problems(cfg: BenchConfig) -> list[tuple[str, str]]:
    """(message, hint) for every bad value, in flag order (pure)."""
    unknown = [n for n in cfg.collectives if n not in ALL_COLLECTIVES]
    checks = [
        (not cfg.collectives, "no collective chosen", "pass --collectives all_reduce,..."),
        *(_unknown(name, ALL_COLLECTIVES, "collective") for name in unknown),
        (cfg.min_bytes < 1 or cfg.top < cfg.min_bytes or cfg.top > MAX_BYTES,
         f"bad size range {cfg.min_bytes}..{cfg.top}",
         f"need 1 <= --min-bytes <= --max-bytes <= {format_size(MAX_BYTES)}"),
        (cfg.factor < 1, f"bad --factor {cfg.factor}", "use an integer >= 1 (2 doubles)"),
        (not (1 <= cfg.iters <= MAX_ITERS and 0 <= cfg.warmup <= MAX_ITERS),
         f"bad --iters {cfg.iters} / --warmup {cfg.warmup}",
         f"need 1 <= --iters <= {MAX_ITERS} and 0 <= --warmup <= {MAX_ITERS}"),
        _unknown(cfg.dtype, DTYPES, "dtype"),
        _unknown(cfg.op, OPS, "op"),
        _unknown(cfg.mode, MODES, "mode"),
        _unknown(cfg.baseline, BASELINES, "baseline"),
        (not 0 < cfg.baseline_seconds <= MAX_BASELINE_SECONDS,  # nan fails too
         f"--baseline-time must be > 0 and <= {MAX_BASELINE_SECONDS:g} s",
         "e.g. --baseline-time 3"),
        (cfg.min_busbw_gbps is not None and not 0 <= cfg.min_busbw_gbps < math.inf,
         "--min-busbw must be a finite number >= 0", "a rate in Gb/s, e.g. --min-busbw 0.9"),
    ]
    return [(message, hint) for bad, message, hint in checks if bad]


def validate(cfg: BenchConfig) -> None:
    """Every bad value is a ConfigError naming the flag and the fix (the first one found)."""
    found = problems(cfg)
    if found:
        raise ConfigError(*found[0])

"""What a benchmark run measures: a frozen config built from flags or by callers (``check``).

Pure: parsing sizes, dtypes and ops, and the size sweep, never touch torch or the network.
"""

from __future__ import annotations

import re
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


def validate(cfg: BenchConfig) -> None:
    """Every bad value is a ConfigError naming the flag and the fix."""
    problems: list[tuple[str, str]] = []
    if not cfg.collectives:
        problems.append(("no collective chosen", "pass --collectives all_reduce,..."))
    for name in cfg.collectives:
        if name not in ALL_COLLECTIVES:
            problems.append((f"unknown collective {name!r}",
                             f"choose from: {', '.join(ALL_COLLECTIVES)}"))
    if cfg.min_bytes < 1 or cfg.max_bytes < cfg.min_bytes:
        problems.append((f"bad size range {cfg.min_bytes}..{cfg.max_bytes}",
                         "need 1 <= --min-bytes <= --max-bytes"))
    if cfg.factor < 1:
        problems.append((f"bad --factor {cfg.factor}", "use an integer >= 1 (2 doubles)"))
    if cfg.iters < 1 or cfg.warmup < 0:
        problems.append((f"bad --iters {cfg.iters} / --warmup {cfg.warmup}",
                         "need --iters >= 1 and --warmup >= 0"))
    if cfg.dtype not in DTYPES:
        problems.append((f"unknown dtype {cfg.dtype!r}", f"choose from: {', '.join(DTYPES)}"))
    if cfg.op not in OPS:
        problems.append((f"unknown op {cfg.op!r}", f"choose from: {', '.join(OPS)}"))
    if cfg.mode not in MODES:
        problems.append((f"unknown mode {cfg.mode!r}", f"choose from: {', '.join(MODES)}"))
    if cfg.baseline not in BASELINES:
        problems.append((f"unknown baseline {cfg.baseline!r}",
                         f"choose from: {', '.join(BASELINES)}"))
    if cfg.baseline_seconds <= 0:
        problems.append(("--baseline-time must be > 0", "e.g. --baseline-time 3"))
    if cfg.min_busbw_gbps is not None and cfg.min_busbw_gbps < 0:
        problems.append(("--min-busbw must be >= 0", "a rate in Gb/s, e.g. --min-busbw 0.9"))
    if problems:
        raise ConfigError(problems[0][0], problems[0][1])

"""Benchmark results: rows, the link baseline, verdicts, and the ``--json`` schema.

Units: every field ending in ``_gbps`` is gigabits per second (10^9 bits/s), the unit of link
speeds and iperf3; tables show GB/s (10^9 bytes/s) like nccl-tests (:func:`gbps_to_GBps`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def gbps_to_GBps(gbps: float) -> float:
    return gbps / 8.0


@dataclass(frozen=True)
class PairRate:
    """One TCP stream measured from rank ``src`` to rank ``dst``."""

    src: int
    dst: int
    gbps: float | None
    error: str = ""


@dataclass(frozen=True)
class LinkRate:
    """What the link carries: ``gbps`` is the slowest measured pair (a ring collective moves
    at its slowest link); ``nominal_gbps`` the NIC speed from sysfs (None when unknown)."""

    gbps: float | None
    method: str
    nominal_gbps: float | None = None
    interface: str | None = None
    pairs: tuple[PairRate, ...] = ()
    note: str = ""
    #: every rank on one host over loopback: the "link" is memory copies, not a NIC
    loopback: bool = False

    @property
    def name(self) -> str:
        """What a busbw is a share of: ``link``, or ``loopback`` (no network in between)."""
        return "loopback" if self.loopback else "link"

    def to_dict(self) -> dict[str, Any]:
        return {
            "gbps": self.gbps,
            "method": self.method,
            "nominal_gbps": self.nominal_gbps,
            "interface": self.interface,
            "pairs": [{"src": p.src, "dst": p.dst, "gbps": p.gbps, "error": p.error or None}
                      for p in self.pairs],
            "note": self.note or None,
            "loopback": self.loopback,
        }


@dataclass(frozen=True)
class BenchRow:
    """One (collective, size, place) measurement. Times are per iteration, each iteration's
    time being the slowest rank's; ``time_us`` is their median."""

    collective: str
    bytes: int
    count: int
    dtype: str
    op: str | None
    inplace: bool
    time_us: float
    min_us: float
    max_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None = None
    link_efficiency: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "collective": self.collective,
            "bytes": self.bytes,
            "count": self.count,
            "dtype": self.dtype,
            "op": self.op,
            "inplace": self.inplace,
            "time_us": round(self.time_us, 3),
            "min_us": round(self.min_us, 3),
            "max_us": round(self.max_us, 3),
            "algbw_gbps": round(self.algbw_gbps, 6),
            "busbw_gbps": round(self.busbw_gbps, 6),
            "wrong": self.wrong,
            "link_efficiency": (None if self.link_efficiency is None
                                else round(self.link_efficiency, 4)),
        }


def make_row(
    collective: str, nbytes: int, count: int, dtype: str, op: str | None, inplace: bool,
    times_s: list[float], bus_factor: float, link_gbps: float | None, wrong: int | None,
) -> BenchRow:
    """Turn per-iteration times (seconds) into a row: algbw = bytes / median time."""
    ordered = sorted(times_s)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    algbw = nbytes * 8 / median / 1e9 if median > 0 else 0.0
    busbw = algbw * bus_factor
    eff = busbw / link_gbps if link_gbps else None
    return BenchRow(collective, nbytes, count, dtype, op, inplace, median * 1e6,
                    ordered[0] * 1e6, ordered[-1] * 1e6, algbw, busbw, wrong, eff)


@dataclass(frozen=True)
class Skipped:
    collective: str
    reason: str


#: the plateau is at most this many of the largest sizes ...
PLATEAU_SIZES = 3
#: ... each within this factor of the largest (a sweep's small sizes are not the plateau)
PLATEAU_SPAN = 16


@dataclass(frozen=True)
class Plateau:
    """A collective's busbw where it has settled: the median, over the largest sizes, of
    each size's best row. Small sizes can beat the link (a traffic shaper's burst lets
    a few MB through faster, issue 19), so the verdict is judged here, not at the peak."""

    sizes: tuple[int, ...]
    busbw_gbps: float
    link_efficiency: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"bytes": list(self.sizes), "busbw_gbps": round(self.busbw_gbps, 6),
                "link_efficiency": (None if self.link_efficiency is None
                                    else round(self.link_efficiency, 4))}


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def plateau(rows: list[BenchRow], link_gbps: float | None) -> Plateau:
    """The plateau of one collective's rows (pure): up to :data:`PLATEAU_SIZES` of the
    largest sizes within :data:`PLATEAU_SPAN` of the largest, each size's best place."""
    best: dict[int, float] = {}
    for row in rows:
        best[row.bytes] = max(best.get(row.bytes, 0.0), row.busbw_gbps)
    top = max(best)
    sizes = tuple(sorted((n for n in best if n * PLATEAU_SPAN >= top),
                         reverse=True)[:PLATEAU_SIZES])[::-1]
    busbw = _median([best[n] for n in sizes])
    return Plateau(sizes, busbw, busbw / link_gbps if link_gbps else None)


def _sizes(sizes: tuple[int, ...]) -> str:
    return _size(sizes[0]) if len(sizes) == 1 else f"{_size(sizes[0])}-{_size(sizes[-1])}"


def verdict_line(name: str, plat: Plateau, peak: BenchRow, link_gbps: float | None,
                 loopback: bool = False) -> str:
    """``all_reduce reaches 100% of the link at the plateau (...)`` (pure); the peak is
    named too where a smaller size went more than 10% faster. On ``loopback`` the share is
    of loopback's rate and says so: no NIC is in between, so it says nothing of a network."""
    where = f"median busbw at {_sizes(plat.sizes)}"
    if plat.link_efficiency is not None and link_gbps:
        of = ("loopback (ranks of one host: memory copies, not a network)" if loopback
              else "the link")
        line = (f"{name} reaches {plat.link_efficiency:.0%} of {of} at the plateau "
                f"({plat.busbw_gbps:.3f} of {link_gbps:.3f} Gb/s, {where})")
    else:  # no verdict without a link: the peak, and the plateau beside it
        return (f"{name} peaks at {peak.busbw_gbps:.3f} Gb/s busbw (at {_size(peak.bytes)}), "
                f"{plat.busbw_gbps:.3f} at the plateau ({where}); "
                "no link baseline to compare with")
    if peak.bytes not in plat.sizes and peak.busbw_gbps > 1.1 * plat.busbw_gbps:
        line += (f"; peak {peak.busbw_gbps:.3f} Gb/s at {_size(peak.bytes)} is not the link's "
                 "rate (a shaper's burst or a cache lets small sizes through faster)")
    return line


@dataclass(frozen=True)
class BenchResult:
    """Everything one run measured; identical on every rank (times are reduced across ranks)."""

    backend: str
    world_size: int
    device: str
    link: LinkRate
    rows: tuple[BenchRow, ...]
    skipped: tuple[Skipped, ...] = ()
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def wrong(self) -> int:
        return sum(r.wrong or 0 for r in self.rows)

    def peak(self) -> dict[str, BenchRow]:
        """Per collective, the row with the highest busbw."""
        best: dict[str, BenchRow] = {}
        for row in self.rows:
            if row.collective not in best or row.busbw_gbps > best[row.collective].busbw_gbps:
                best[row.collective] = row
        return best

    def below(self, min_busbw_gbps: float) -> list[BenchRow]:
        """The peak rows of collectives whose best busbw stays under the threshold."""
        return [r for r in self.peak().values() if r.busbw_gbps < min_busbw_gbps]

    def plateaus(self) -> dict[str, Plateau]:
        """Per collective, its busbw at the plateau (the largest sizes, :func:`plateau`)."""
        by_name: dict[str, list[BenchRow]] = {}
        for row in self.rows:
            by_name.setdefault(row.collective, []).append(row)
        return {name: plateau(rows, self.link.gbps) for name, rows in by_name.items()}

    def verdicts(self) -> list[str]:
        """One line per collective: its busbw at the plateau against the link, and the peak
        where a smaller size went faster (a shaper's burst or a cache, not the link)."""
        if self.world_size == 1:
            return ["one rank: nothing crosses a link, so busbw says nothing about the "
                    "network; run on 2 or more ranks (--local N, or one per node)"]
        peaks = self.peak()
        return [verdict_line(name, plat, peaks[name], self.link.gbps, self.link.loopback)
                for name, plat in self.plateaus().items()]

    def to_dict(self) -> dict[str, Any]:
        """The ``ddpnet bench --json`` object."""
        return {
            "backend": self.backend,
            "world_size": self.world_size,
            "device": self.device,
            "link": self.link.to_dict(),
            "rows": [r.to_dict() for r in self.rows],
            "skipped": [{"collective": s.collective, "reason": s.reason} for s in self.skipped],
            "wrong": self.wrong if any(r.wrong is not None for r in self.rows) else None,
            "verdicts": self.verdicts(),
            "plateau": {name: p.to_dict() for name, p in self.plateaus().items()},
            "config": self.config,
        }


def _size(n: int) -> str:
    from ddpnet.bench.config import format_size

    return format_size(n)

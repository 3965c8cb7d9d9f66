"""How long the job may go without progress before the watchdog names a hang (pure).

Learned from the job itself rather than a fixed minute: the hub records every gap between two
changes of the job's progress (``watchdog.progress_key``: a collective, a step, a phase mark on
any rank), the very quantity the watchdog compares, and the threshold is
``max(FLOOR_S, FACTOR x p99 of those gaps)``. A job whose ranks step every 20 ms stalls for
5 s before it is named; one whose forward alone takes 4 s, for 12 s.

Legitimately long phases get their own allowance instead of inflating the threshold: while any
rank is inside ``ddpnet.phase("checkpoint" | "eval" | "warmup")`` (``ddpnet train`` marks its
own) the threshold is at least that phase's allowance, ``max(ALLOWANCE_S[phase], PHASE_FACTOR
x the longest such phase seen)``, and gaps that overlap such a phase teach nothing. Until
``MIN_GAPS`` gaps are seen (the first seconds of the job) the threshold is ``WARMUP_S``; and
gaps that began before every rank had finished a collective or a step (:func:`warmed_up`: the
backend's connections, DDP's broadcast, the first collective's lazy set-up) are the warm-up's
and teach nothing either. Learned from, one 4 s start-up gap among 30 gaps of 0.1 s set the
threshold of a 20 ms loop to 12 s instead of 5 s (p99 of so few gaps is their largest).
``watch_timeout`` / ``DDPNET_WATCH_TIMEOUT`` overrides all of it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ddpnet.watch.state import LONG_PHASES, Snapshot

#: no threshold is shorter: a heartbeat (1 s), its transit and a scheduling hiccup fit in it
FLOOR_S = 5.0
#: the threshold is this many times the job's 99th-percentile gap between progress
FACTOR = 3.0
#: gaps needed before the threshold is learned; before that, the warm-up allowance
MIN_GAPS = 10
#: the threshold while too little is known (imports, the first steps, compilation)
WARMUP_S = 60.0
#: allowance of each long phase before any of its kind was seen to end
ALLOWANCE_S: Mapping[str, float] = {"warmup": 60.0, "checkpoint": 120.0, "eval": 120.0}
#: a long phase may take this many times the longest one of its kind seen so far
PHASE_FACTOR = 3.0
#: gaps kept (the most recent)
KEEP = 512
#: where a threshold came from
SOURCES = ("override", "learned", "warm-up", "phase")


@dataclass(frozen=True)
class Threshold:
    """Seconds without progress before the watchdog acts, where that came from and why."""

    seconds: float
    source: str                    # one of SOURCES
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Threshold:
        return cls(float(data.get("seconds", WARMUP_S)), str(data.get("source", "warm-up")),
                   str(data.get("reason", "")))


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of a non-empty sequence."""
    ordered = sorted(values)
    index = max(0, math.ceil(q / 100 * len(ordered)) - 1)
    return ordered[min(index, len(ordered) - 1)]


#: seconds between a rank's heartbeats, up to PERIOD_RANKS ranks; above, the period grows
#: with N so that the hub reads PERIOD_RANKS states a second at most (each costs the hub
#: ~0.2 ms and its rank ~0.3 ms: at 4,096 ranks and 1 s, ~1 core each on a 2-core machine)
PERIOD_S, PERIOD_RANKS = 1.0, 2048
#: a live rank is not answering after this many periods of silence, at least
STALE_PERIODS = 2.5


def period_for(world_size: int) -> float:
    """Seconds between heartbeats in a job of ``world_size`` ranks (pure): 1 s up to 2,048
    ranks, 2 s at 4,096."""
    return PERIOD_S * max(1.0, world_size / PERIOD_RANKS)


def stale_after(seconds: float, period: float = PERIOD_S) -> float:
    """A live rank silent this long is not answering: below the threshold, above a few
    heartbeats (the analysis' ``stale_after``; a slower heartbeat, more)."""
    return max(3.0, STALE_PERIODS * period, min(10.0, 0.8 * seconds))


def warmed_up(snapshot: Snapshot) -> bool:
    """Whether every live rank has published and finished a collective or a step: gaps from
    before that (connections, DDP's broadcast, the first collective's set-up) teach nothing."""
    live = [s for r, s in snapshot.states.items() if r not in snapshot.gone]
    return bool(live) and all(s is not None and (s.last_seq > 0 or s.step > 0) for s in live)


def long_phases(snapshot: Snapshot) -> dict[str, tuple[int, ...]]:
    """Each long phase some live rank is inside, with those ranks."""
    out: dict[str, list[int]] = {}
    for rank, state in sorted(snapshot.states.items()):
        if state is not None and state.long_phase in LONG_PHASES and rank not in snapshot.gone:
            out.setdefault(state.long_phase, []).append(rank)
    return {phase: tuple(ranks) for phase, ranks in out.items()}


def allowance(phase: str, longest: Mapping[str, float]) -> float:
    """Seconds a long phase may keep the others waiting."""
    return max(ALLOWANCE_S.get(phase, WARMUP_S), PHASE_FACTOR * longest.get(phase, 0.0))


def learned(gaps: Sequence[float]) -> Threshold:
    """From the job's gaps between progress alone (no phase, no override)."""
    if len(gaps) < MIN_GAPS:
        return Threshold(WARMUP_S, "warm-up", f"only {len(gaps)} gap(s) between progress seen "
                         f"yet (learning needs {MIN_GAPS}): the first steps' allowance")
    p99 = percentile(gaps, 99)
    seconds = max(FLOOR_S, FACTOR * p99)
    rule = f"max({FLOOR_S:g} s, {FACTOR:g} x p99)" if seconds > FLOOR_S else f"floor {FLOOR_S:g} s"
    return Threshold(round(seconds, 1), "learned",
                     f"{rule}: p99 of the last {len(gaps)} gaps between progress is "
                     f"{p99:.2f} s")


def learn(gaps: Sequence[float], snapshot: Snapshot | None = None, *,
          override: float | None = None, longest: Mapping[str, float] | None = None,
          base: Threshold | None = None) -> Threshold:
    """The threshold now: the override, else the learned one (``base``, when the caller
    kept ``learned(gaps)``) raised to the allowance of any long phase a live rank is in."""
    if override is not None:
        return Threshold(float(override), "override",
                         f"watch_timeout / DDPNET_WATCH_TIMEOUT = {override:g} s")
    base = base if base is not None else learned(gaps)
    active = long_phases(snapshot) if snapshot is not None else {}
    best = base
    for phase, ranks in sorted(active.items()):
        seconds = allowance(phase, longest or {})
        if seconds > best.seconds:
            shown = ", ".join(str(r) for r in ranks[:8])
            best = Threshold(seconds, "phase", f"rank(s) {shown} in phase {phase!r}: its "
                             f"allowance {seconds:g} s (learned alone: {base.seconds:g} s)")
    return best


def add_gap(gaps: Iterable[float], gap: float) -> tuple[float, ...]:
    """``gaps`` with one more, the oldest dropped beyond :data:`KEEP`."""
    return (*gaps, gap)[-KEEP:]

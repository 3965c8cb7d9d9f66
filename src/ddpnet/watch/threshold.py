"""How long the job may go without progress before the watchdog names a hang (pure); the rules are
in docs/watch.md, "Thresholds learned from the job"."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ddpnet.watch.gaps import KEY, WARM_STEPS, Summary
from ddpnet.watch.state import LONG_PHASES, RankState, Snapshot

#: no threshold is shorter: a heartbeat (1 s), its transit and a scheduling hiccup fit in it
FLOOR_S = 5.0
#: the threshold is this many times the ranks' largest 99th-percentile gap between progress
FACTOR = 3.0
#: gaps each live rank needs before the threshold is learned
MIN_GAPS = 10
#: the threshold while too little is known (imports, the first steps, compilation)
WARMUP_S = 60.0
#: allowance of each long phase before any of its kind was seen to end
ALLOWANCE_S: Mapping[str, float] = {"warmup": 60.0, "checkpoint": 120.0, "eval": 120.0}
#: a long phase may take this many times the longest one of its kind seen so far
PHASE_FACTOR = 3.0
#: where a threshold came from
SOURCES = ("override", "learned", "warm-up", "phase", "working", "unheard")
#: the sources during which a gap teaches nothing (:func:`teaches_nothing`)
TEACH_NOTHING = ("phase", "working", "unheard")


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


#: seconds between heartbeats up to PERIOD_RANKS ranks; above, the hub reads PERIOD_RANKS a second
PERIOD_S, PERIOD_RANKS = 1.0, 2048
#: a live rank is not answering after this many periods of silence, at least
STALE_PERIODS = 2.5


def period_for(world_size: int) -> float:
    """Seconds between heartbeats for ``world_size`` ranks (pure): 1 s up to 2,048, then longer."""
    return PERIOD_S * max(1.0, world_size / PERIOD_RANKS)


def stale_after(seconds: float, period: float = PERIOD_S) -> float:
    """A live rank silent this long is not answering: below the threshold, above a few
    heartbeats."""
    return max(3.0, STALE_PERIODS * period, min(10.0, 0.8 * seconds))


def long_phases(snapshot: Snapshot, silent_after: float = math.inf
                ) -> dict[str, tuple[int, ...]]:
    """Each long phase some live rank does the work of, with those ranks. Not a rank inside a
    collective (it waits, the work is not its own) nor one silent ``silent_after`` s (a stopped rank
    would hold every rank for minutes)."""
    out: dict[str, list[int]] = {}
    for rank, state in sorted(snapshot.states.items()):
        if state is not None and state.long_phase in LONG_PHASES and \
                rank not in snapshot.gone and snapshot.age(rank) <= silent_after \
                and state.in_flight() is None:
            out.setdefault(state.long_phase, []).append(rank)
    return {phase: tuple(ranks) for phase, ranks in out.items()}


def allowance(phase: str, longest: Mapping[str, float]) -> float:
    """Seconds a long phase may keep the others waiting."""
    return max(ALLOWANCE_S.get(phase, WARMUP_S), PHASE_FACTOR * longest.get(phase, 0.0))


def summaries(snapshot: Snapshot) -> dict[int, Summary | None]:
    """Each live rank's published gap summary (None: not published, or an older rank)."""
    return {rank: None if state is None else Summary.from_dict(state.extra.get(KEY))
            for rank, state in snapshot.states.items() if rank not in snapshot.gone}


def learned(found: Mapping[int, Summary | None]) -> Threshold:
    """From the gap summaries alone: the warm-up allowance until every rank has MIN_GAPS gaps, then
    ``max(FLOOR_S, FACTOR x the largest p99)``."""
    waiting = sorted(r for r, s in found.items() if s is None or s.count < MIN_GAPS)
    if not found or waiting:
        shown = ", ".join(str(r) for r in waiting[:8]) + (", ..." if len(waiting) > 8 else "")
        return Threshold(WARMUP_S, "warm-up",
                         f"rank(s) {shown or 'none'} have fewer than {MIN_GAPS} gaps between "
                         f"progress after their first {WARM_STEPS} steps yet: the start-up's "
                         f"allowance")
    rank, top = max(found.items(), key=lambda item: (item[1].p99 if item[1] else 0.0, -item[0]))
    assert top is not None
    seconds = max(FLOOR_S, FACTOR * top.p99)
    rule = f"max({FLOOR_S:g} s, {FACTOR:g} x p99)" if seconds > FLOOR_S else f"floor {FLOOR_S:g} s"
    return Threshold(round(seconds, 1), "learned",
                     f"{rule}: the largest p99 gap between progress is rank {rank}'s, "
                     f"{top.p99:.2f} s (time-weighted, of its last {top.count} gaps; "
                     f"{len(found)} rank(s))")


def learn(base: Threshold, snapshot: Snapshot | None = None, *,
          override: float | None = None, longest: Mapping[str, float] | None = None,
          silent_after: float = math.inf) -> Threshold:
    """The override, else the learned ``base`` raised to any long phase a live rank is in."""
    if override is not None:
        return Threshold(float(override), "override",
                         f"watch_timeout / DDPNET_WATCH_TIMEOUT = {override:g} s")
    active = long_phases(snapshot, silent_after) if snapshot is not None else {}
    best = base
    for phase, ranks in sorted(active.items()):
        seconds = allowance(phase, longest or {})
        if seconds > best.seconds:
            shown = ", ".join(str(r) for r in ranks[:8])
            best = Threshold(seconds, "phase", f"rank(s) {shown} in phase {phase!r}: its "
                             f"allowance {seconds:g} s (learned alone: {base.seconds:g} s)")
    return best


def held(threshold: Threshold, ranks: tuple[int, ...]) -> Threshold:
    """The threshold while working ranks hold a stall's verdict: source ``working`` (teaches
    nothing)."""
    shown = ", ".join(str(r) for r in ranks[:8])
    return Threshold(threshold.seconds, "working", f"rank(s) {shown} work while the others "
                     f"wait: held past {threshold.seconds:g} s ({threshold.source}: "
                     f"{threshold.reason})")


def unheard(threshold: Threshold, ranks: tuple[int, ...]) -> Threshold:
    """The threshold while ranks are unheard: source ``unheard``; a flap's gap teaches nothing."""
    shown = ", ".join(str(r) for r in ranks[:8])
    return Threshold(threshold.seconds, "unheard", f"rank(s) {shown} unheard: "
                     f"{threshold.seconds:g} s ({threshold.source}: {threshold.reason})")


def teaches_nothing(told: Threshold, unheard_for: float, period: float = PERIOD_S) -> bool:
    """Whether a gap spanning now teaches a rank nothing: the hub's source says so, or the rank has
    not heard the hub's acks for ``stale_after`` (the hub cannot tell it)."""
    return told.source in TEACH_NOTHING or unheard_for > stale_after(told.seconds, period)


def self_judged(told: Threshold, base: Threshold | None, own: Threshold,
                state: RankState) -> Threshold:
    """What a rank that hears nothing judges itself by (``watch.cutoff``): the hub's override, else
    its learned base, else the rank's ``own``; raised only by its own long phase, never inside a
    collective. Not ``told``: another rank's phase raised it."""
    if told.source == "override":
        return told
    hub = base if base is not None else told  # an ack without a base: the hub's own word
    found = hub if hub.source == "learned" else own
    phase = state.long_phase
    if phase in LONG_PHASES and state.in_flight() is None:
        seconds = allowance(phase, {})
        if seconds > found.seconds:
            return Threshold(seconds, "phase", f"this rank is in phase {phase!r} (not inside "
                             f"a collective): its allowance {seconds:g} s (learned: "
                             f"{found.seconds:g} s)")
    return found

"""When to name a cause (pure): the hub feeds every tick's snapshot; the watchdog answers
whether the job has stalled or lost a rank, and so whether to analyze and act now.

A stall is: at least one rank inside a collective (someone waits) and no rank's progress
(its last collective, step, phase, in-flight collective) changed for the threshold: learned
from the job's own gaps between progress and raised while a rank is in a long phase
(:mod:`ddpnet.watch.threshold`), or the user's ``watch_timeout``. A rank that left without
saying goodbye (killed, crashed, an exception) triggers after ``grace`` seconds, time for the
survivors' last heartbeats to arrive.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ddpnet.watch import threshold as thresholds
from ddpnet.watch.state import Snapshot

#: seconds without progress before the watchdog acts while nothing is learned yet (torch:
#: gloo 1800, NCCL 600); after that, ``threshold.learn``
TIMEOUT_S = thresholds.WARMUP_S
#: what the watchdog does with a verdict
ACTIONS = ("exit", "warn")


@dataclass(frozen=True)
class Settings:
    #: the user's override; None: learned
    timeout: float | None = None
    action: str = "exit"
    grace: float = 2.0
    #: seconds between the ranks' heartbeats (``threshold.period_for``)
    period: float = thresholds.PERIOD_S


def progress_key(snapshot: Snapshot) -> tuple[object, ...]:
    """What changes whenever any rank makes progress (pure)."""
    key: list[object] = []
    for rank, state in sorted(snapshot.states.items()):
        if state is None:
            continue
        flight = state.in_flight()
        key.append((rank, state.last_seq, state.step, state.phase, state.phase_since,
                    flight.seq if flight else None))
    return tuple(key)


def someone_waits(snapshot: Snapshot) -> bool:
    return any(s is not None and s.in_flight() is not None for s in snapshot.states.values())


@dataclass
class Watchdog:
    """Tracks progress across ticks; :meth:`due` says why to act now, or None."""

    settings: Settings
    key: tuple[object, ...] = ()
    since: float | None = None
    gone_since: dict[int, float] = field(default_factory=dict)
    fired: bool = False
    #: the job's gaps between progress (outside long phases), what the threshold learns from
    gaps: tuple[float, ...] = ()
    #: while the current gap overlapped a long phase (it teaches nothing then)
    in_long: bool = False
    #: whether the current gap began after the warm-up (``threshold.warmed_up``)
    warm: bool = False
    #: the longest long phase of each kind seen to end, and each rank's current one
    longest: dict[str, float] = field(default_factory=dict)
    long_of: dict[int, tuple[str, float]] = field(default_factory=dict)
    threshold: thresholds.Threshold = field(default_factory=lambda: thresholds.learn(()))
    #: ``threshold.learned(gaps)``, kept between ticks (its p99 sorts the gaps)
    base: thresholds.Threshold = field(default_factory=lambda: thresholds.learned(()))

    @property
    def stale_after(self) -> float:
        """A live rank silent this long is not answering (below the threshold, above a few
        heartbeats)."""
        return thresholds.stale_after(self.threshold.seconds, self.settings.period)

    def learn(self, snapshot: Snapshot, key: tuple[object, ...], now: float) -> None:
        """Record the gap that ``key`` ends and the long phases that ended; set the
        threshold."""
        active = thresholds.long_phases(snapshot)
        if key != self.key and self.since is not None and self.warm and \
                not (self.in_long or active):
            self.gaps = thresholds.add_gap(self.gaps, now - self.since)
            self.base = thresholds.learned(self.gaps)
        if key != self.key:  # the next gap begins now
            self.warm = self.warm or thresholds.warmed_up(snapshot)
        self.in_long = bool(active) if key != self.key else self.in_long or bool(active)
        for rank, state in snapshot.states.items():
            if state is None:
                continue
            before = self.long_of.get(rank)
            if before is not None and before != (state.long_phase, state.long_since):
                took = state.published - before[1]
                self.longest[before[0]] = max(self.longest.get(before[0], 0.0), took)
            if state.long_phase:
                self.long_of[rank] = (state.long_phase, state.long_since)
            else:
                self.long_of.pop(rank, None)
        self.threshold = thresholds.learn(self.gaps, snapshot, override=self.settings.timeout,
                                          longest=self.longest, base=self.base)

    def due(self, snapshot: Snapshot, now: float) -> str | None:
        key = progress_key(snapshot)
        self.learn(snapshot, key, now)
        if key != self.key or self.since is None:
            self.key, self.since = key, now
            self.fired = False  # progress again: a warned stall may warn again later
        for rank in snapshot.gone:
            self.gone_since.setdefault(rank, now)
        if self.fired:
            return None
        if self.gone_since and now - min(self.gone_since.values()) >= self.settings.grace:
            return "a rank left"
        waited = now - self.since
        if someone_waits(snapshot) and waited >= self.threshold.seconds:
            return f"no progress for {waited:.0f} s"
        return None

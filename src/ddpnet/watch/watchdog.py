"""When to name a cause (pure): fed every tick's snapshot, the watchdog says whether the job stalled
or lost a rank. What is not a hang (working ranks, silent ranks behind them, a link that flapped) is
in docs/watch.md, "A working rank is not a hang"."""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass, field

from ddpnet.watch import activity
from ddpnet.watch import threshold as thresholds
from ddpnet.watch.analyze import behind, describe
from ddpnet.watch.network import name
from ddpnet.watch.progress import any_progressed
from ddpnet.watch.state import Diagnosis, Snapshot

#: seconds without progress before acting while nothing is learned yet
TIMEOUT_S = thresholds.WARMUP_S
#: the longest a working rank may keep the others waiting (torch's gloo timeout)
WORKING_MAX_S = 1800.0
#: what the watchdog does with a verdict
ACTIONS = ("exit", "warn")
#: seconds a stall's verdict is held, once, when the ranks late in it are back
OUTAGE_HOLD_S = 10.0


@dataclass(frozen=True)
class Settings:
    #: the user's override; None: learned
    timeout: float | None = None
    action: str = "exit"
    grace: float = 2.0
    #: seconds between the ranks' heartbeats (``threshold.period_for``)
    period: float = thresholds.PERIOD_S


def someone_waits(snapshot: Snapshot) -> bool:
    return any(s is not None and s.in_flight() is not None for s in snapshot.states.values())


def working_laggards(snapshot: Snapshot, threshold: float,
                     stale_after: float) -> tuple[int, ...]:
    """The ranks behind the collective the others wait in, when every one of them works (pure);
    empty when one of them does not (or published no activity)."""
    found = behind(snapshot)
    if found is None:
        return ()
    for rank in found[2]:
        state = snapshot.states.get(rank)
        idle = activity.idle_for(snapshot, rank)
        if state is None or idle is None or idle >= threshold or \
                snapshot.age(rank) > stale_after:
            return ()
    return found[2]


def working_warning(snapshot: Snapshot, ranks: tuple[int, ...], began: Snapshot | None,
                    waited: float) -> Diagnosis:
    """The warning for working ranks that keep the others waiting (pure)."""
    found = behind(snapshot)
    target = f" in {describe(found[0])}" if found is not None else ""
    waiting = len(found[1]) if found is not None else 0
    lines = []
    for rank in ranks:
        now = activity.of(snapshot.states.get(rank))
        then = activity.of(began.states.get(rank)) if began is not None else None
        lines.append(f"{name(snapshot.states, rank)} works: "
                     f"{activity.doing(now, then) if now else '?'}")
    first = ranks[0]
    state = snapshot.states.get(first)
    hosts = tuple(dict.fromkeys(s.host for r in ranks if (s := snapshot.states.get(r))))
    summary = (f"{name(snapshot.states, first)}{' and others' if ranks[1:] else ''} "
               f"{'keeps' if not ranks[1:] else 'keep'} {waiting} rank(s) waiting{target} "
               f"for {waited:.0f} s, working (no verdict while it works, at most "
               f"{WORKING_MAX_S:.0f} s)")
    phase = f" (phase {state.phase!r})" if state is not None and state.phase else ""
    return Diagnosis("working", summary + phase, ranks, hosts, tuple(lines),
                     "expected (a checkpoint, an evaluation on one rank)? mark it: with "
                     "ddpnet.phase('checkpoint' | 'eval'): ...; else see what it does")


def back(snapshot: Snapshot, late: Collection[int], late_after: float) -> bool:
    """Whether every rank in ``late`` is heard again or answered a connect probe (pure)."""
    reached = {p.dst_rank for p in snapshot.probes if p.what == "connect" and p.reachable}
    return all(r in reached or snapshot.age(r) <= late_after for r in late)


@dataclass
class Watchdog:
    """Tracks progress across ticks; :meth:`due` says why to act now, or None."""

    settings: Settings
    since: float | None = None
    gone_since: dict[int, float] = field(default_factory=dict)
    fired: bool = False
    #: the longest long phase of each kind seen to end, and each rank's current one
    longest: dict[str, float] = field(default_factory=dict)
    long_of: dict[int, tuple[str, float]] = field(default_factory=dict)
    #: ``threshold.learned`` from the ranks' gap summaries, before any long phase raises it
    base: thresholds.Threshold = field(default_factory=lambda: thresholds.learned({}))
    threshold: thresholds.Threshold = field(
        default_factory=lambda: thresholds.learn(thresholds.learned({})))
    #: the snapshot when the current gap began
    began: Snapshot | None = None
    #: the working ranks holding this stall's verdict and when each last moved
    held: dict[int, float] = field(default_factory=dict)
    warning: Diagnosis | None = None
    #: the verdict's word on them: until when they worked ("" when none held it)
    note: str = ""
    #: the ranks late at some tick of this stall (:meth:`outage`)
    late: set[int] = field(default_factory=set)
    quiet_until: float | None = None
    outage_note: str = ""

    @property
    def stale_after(self) -> float:
        """A live rank silent this long is not answering."""
        return thresholds.stale_after(self.threshold.seconds, self.settings.period)

    @property
    def told(self) -> thresholds.Threshold:
        """The threshold the ranks are told: source ``unheard`` while a rank was late in this
        stall."""
        if not self.late:
            return self.threshold
        return thresholds.unheard(self.threshold, tuple(sorted(self.late)))

    @property
    def late_after(self) -> float:
        """A rank unheard this long is late (a few heartbeats: a flap's first seconds)."""
        return thresholds.STALE_PERIODS * self.settings.period

    def learn(self, snapshot: Snapshot) -> None:
        """Combine the ranks' gap summaries and ended long phases; set the threshold."""
        self.base = thresholds.learned(thresholds.summaries(snapshot))
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
        self.threshold = thresholds.learn(self.base, snapshot, override=self.settings.timeout,
                                          longest=self.longest, silent_after=self.stale_after)

    def due(self, snapshot: Snapshot, now: float, silent: tuple[int, ...] = (),
            late: tuple[int, ...] = ()) -> str | None:
        """Why to act now, or None. ``silent``: unheard for ``stale_after`` (a stall at once while
        others wait); ``late``: unheard for :attr:`late_after` (this stall's gaps teach nothing)."""
        self.learn(snapshot)
        if self.since is None or any_progressed(self.began, snapshot):
            self.since, self.began = now, snapshot
            self.fired = False  # progress again: a warned stall may warn again later
            self.held, self.warning, self.note = {}, None, ""
            self.late, self.quiet_until, self.outage_note = set(), None, ""
        self.late.update(late, silent)  # until progress (:attr:`told`, :meth:`outage`)
        # a rank back (it connected anew: its channel broke, it lived) is gone no more
        self.gone_since = {r: self.gone_since.get(r, now) for r in snapshot.gone}
        if self.fired:
            return None
        if self.gone_since and now - min(self.gone_since.values()) >= self.settings.grace:
            return "a rank left"
        if self.quiet_until is not None and now < self.quiet_until:
            return None
        waited = now - self.since
        if silent and someone_waits(snapshot) and waited >= self.stale_after and \
                not self.behind_working(snapshot, silent):
            shown = ", ".join(str(r) for r in silent[:8])
            return f"no progress for {waited:.0f} s; rank(s) {shown} silent"
        if someone_waits(snapshot) and waited >= self.threshold.seconds:
            if self.hold(snapshot, waited):
                return None
            self.note = self.worked(waited)
            return f"no progress for {waited:.0f} s" + (f"; {self.note}" if self.note else "")
        return None

    def behind_working(self, snapshot: Snapshot, silent: tuple[int, ...]) -> bool:
        """Whether the silent ranks wait behind working ranks: the stall is theirs."""
        states = snapshot.states
        return all((s := states.get(r)) is not None and s.in_flight() is not None
                   for r in silent) and \
            bool(working_laggards(snapshot, self.threshold.seconds, self.stale_after))

    def outage(self, snapshot: Snapshot, now: float) -> bool:
        """Whether to hold this stall's verdict OUTAGE_HOLD_S more (once): every late rank is back.
        The user's ``watch_timeout`` is not held."""
        late = sorted(self.late)
        if self.settings.timeout is not None or self.quiet_until is not None or not late or \
                not back(snapshot, late, self.late_after):
            return False
        self.quiet_until = now + OUTAGE_HOLD_S
        shown = ", ".join(str(r) for r in late[:8])
        self.outage_note = (f"held {OUTAGE_HOLD_S:g} s: rank(s) {shown} went unheard in this "
                            f"stall and answered again (heard, or the probes' connects): a "
                            f"link flap's retransmission backoff")
        return True

    def hold(self, snapshot: Snapshot, waited: float) -> bool:
        """Whether working ranks hold this stall's verdict; the warning the first time."""
        if self.settings.timeout is not None or waited >= WORKING_MAX_S:
            return False
        ranks = working_laggards(snapshot, self.threshold.seconds, self.stale_after)
        if not ranks:
            return False
        # told to every rank: a gap a working rank held teaches the threshold nothing
        self.threshold = thresholds.held(self.threshold, ranks)
        if not self.held:
            self.warning = working_warning(snapshot, ranks, self.began, waited)
        for rank in ranks:
            found = activity.of(snapshot.states.get(rank))
            self.held[rank] = found.active_at if found is not None else 0.0
        return True

    def worked(self, waited: float) -> str:
        """For the verdict of a stall working ranks held: until when they worked."""
        if not self.held:
            return ""
        ranks = ", ".join(str(r) for r in sorted(self.held))
        if waited >= WORKING_MAX_S:
            return f"rank(s) {ranks} worked past the bound ({WORKING_MAX_S:.0f} s)"
        until = time.strftime("%H:%M:%S", time.localtime(max(self.held.values())))
        return f"rank(s) {ranks} worked until {until}"

"""When to name a cause (pure): the hub feeds every tick's snapshot; the watchdog answers
whether the job has stalled or lost a rank, and so whether to analyze and act now.

A stall is: at least one rank inside a collective (someone waits) and no rank's progress
(its last collective, step, phase, in-flight collective) changed for ``timeout`` seconds.
A rank that left without saying goodbye (killed, crashed, an exception) triggers after
``grace`` seconds, time for the survivors' last heartbeats to arrive.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ddpnet.watch.state import Snapshot

#: default seconds without progress before the watchdog acts (torch: gloo 1800, NCCL 600)
TIMEOUT_S = 60.0
#: what the watchdog does with a verdict
ACTIONS = ("exit", "warn")


@dataclass(frozen=True)
class Settings:
    timeout: float = TIMEOUT_S
    action: str = "exit"
    grace: float = 2.0

    @property
    def stale_after(self) -> float:
        """A live rank silent this long is not answering (below ``timeout``, above a few
        heartbeats)."""
        return max(3.0, min(10.0, 0.8 * self.timeout))


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

    def due(self, snapshot: Snapshot, now: float) -> str | None:
        key = progress_key(snapshot)
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
        if someone_waits(snapshot) and waited >= self.settings.timeout:
            return f"no progress for {waited:.0f} s"
        return None

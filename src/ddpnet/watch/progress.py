"""What "a rank progressed" means, in one place (pure), so the watchdog, self-judging ranks and the
metrics agree: step, phase mark, or last or current collective changed (its own clock)."""

from __future__ import annotations

from dataclasses import dataclass

from ddpnet.watch.state import RankState, Snapshot


@dataclass(frozen=True)
class Progress:
    """What moved between two states of one rank (all False: it stood still)."""

    step: bool = False
    collective: bool = False
    phase: bool = False

    def __bool__(self) -> bool:
        return self.step or self.collective or self.phase


#: a rank's first state: everything it shows is new
FIRST = Progress(step=True, collective=True, phase=True)
STILL = Progress()


def progressed(before: RankState | None, after: RankState) -> Progress:
    """What ``after`` moved since ``before`` (None: all new); a heartbeat alone is no progress."""
    if before is None:
        return FIRST
    if before is after:
        return STILL  # the hub's snapshots share a state until a new one arrives
    first, then = before.in_flight(), after.in_flight()
    return Progress(
        step=before.step != after.step,
        collective=(before.last_seq != after.last_seq or
                    (first.seq if first else None) != (then.seq if then else None)),
        phase=(before.phase, before.phase_since, before.long_phase) !=
              (after.phase, after.phase_since, after.long_phase))


def any_progressed(before: Snapshot | None, after: Snapshot) -> bool:
    """Whether any rank moved between two snapshots of the job (None: the first one)."""
    if before is None:
        return True
    return any(progressed(before.states.get(r), s)
               for r, s in after.states.items() if s is not None)


def moved_at(state: RankState) -> float:
    """When the rank last moved by its own clock: its latest phase mark or collective (0.0:
    none)."""
    times = [state.phase_since, state.long_since]
    for record in state.recent:
        times.append(record.ended if record.ended is not None else record.started)
    return max(times)

"""What the hub answers a rank that got SIGTERM (pure; the rank's side: ``watch.dying``): wait for
the verdict when a failure is known, else ``no-fault`` after :data:`HOLD_S`."""

from __future__ import annotations

from collections.abc import Collection, Mapping

#: how long the hub looks for a failure after a rank's SIGTERM before it answers no fault
HOLD_S = 0.5
#: why a rank that told the hub of its SIGTERM, and then left, is away
TERMINATED = "ended by a SIGTERM with no peer failed (a user's stop)"


def fault_known(left: Mapping[int, str], terminated: Collection[int], checking: bool,
                verdict: bool) -> bool:
    """Whether the hub knows of a failure a SIGTERM'd rank should wait to hear named: a rank
    gone (not one that itself was SIGTERM'd), a closed channel being checked, a verdict."""
    return verdict or checking or any(r not in terminated for r in left)


def answer(asked_at: float, now: float, fault: bool) -> str | None:
    """``"wait"`` (the verdict comes), ``"no-fault"``, or None (not yet: a failure may still
    show)."""
    if fault:
        return "wait"
    return "no-fault" if now - asked_at >= HOLD_S else None

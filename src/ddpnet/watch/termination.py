"""What the hub answers a rank that got SIGTERM (pure; the rank's side: ``watch.dying``): a
launcher's SIGTERM after a peer died waits for the verdict naming it; a user's stop (every rank
at once, no peer failed) ends the rank at once. The dead peer's connection closes before its
launcher even sees it, so a failure the hub knows of means wait; none within :data:`HOLD_S`
of the rank's word means ``no-fault``.
"""

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
    """What to answer a SIGTERM'd rank that asked at ``asked_at``: ``"wait"`` (no answer: the
    verdict comes), ``"no-fault"``, or None (not yet: a failure may still show)."""
    if fault:
        return "wait"
    return "no-fault" if now - asked_at >= HOLD_S else None

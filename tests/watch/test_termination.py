"""watch.termination (pure): a SIGTERM'd rank waits for a verdict only when the hub knows
of a failure; else it is told no fault after HOLD_S."""

from __future__ import annotations

from ddpnet.watch.termination import HOLD_S, answer, fault_known


def test_a_failure_known_means_wait_for_the_verdict() -> None:
    assert fault_known({2: "its process exited or was killed"}, set(), False, False)
    assert fault_known({}, set(), True, False)  # a closed channel being checked
    assert fault_known({}, set(), False, True)  # a verdict given
    assert answer(10.0, 10.0, fault=True) == "wait"


def test_ranks_that_were_sigtermed_themselves_are_no_failure() -> None:
    assert not fault_known({1: "gone"}, {1}, False, False)  # a user's stop: one left first
    assert not fault_known({}, {0, 1}, False, False)


def test_no_failure_is_answered_after_the_hold_only() -> None:
    assert answer(10.0, 10.0 + HOLD_S / 2, fault=False) is None  # a death may still show
    assert answer(10.0, 10.0 + HOLD_S, fault=False) == "no-fault"

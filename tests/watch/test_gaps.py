"""Each rank's own gaps between progress and the summary it publishes (pure)."""

from __future__ import annotations

import math

import pytest

from ddpnet.watch import gaps
from ddpnet.watch import threshold as th
from ddpnet.watch.gaps import GapLog, Histogram, Summary
from ddpnet.watch.state import CollectiveRecord


def _loop(steps: int, *, every: float = 0.025, start: float = 100.0,
          calls: int = 1) -> list[gaps.Event]:
    """A loop's marks: a step mark, then ``calls`` phase marks, evenly over each step."""
    out: list[gaps.Event] = []
    for step in range(steps):
        at = start + step * every
        out.append((at, True))
        out += [(at + every * (n + 1) / (calls + 1), False) for n in range(calls)]
    return out


def test_buckets_are_log_spaced_and_bounded() -> None:
    assert gaps.bucket(0.0) == gaps.bucket(gaps.LOW_S) == 0
    assert gaps.bucket(gaps.LOW_S * gaps.RATIO * 1.01) == 1
    assert gaps.bucket(1e9) == gaps.BUCKETS - 1
    assert gaps.bucket(0.025) < gaps.bucket(0.03) < gaps.bucket(0.04)


def test_the_p99_is_weighted_by_time_not_by_count() -> None:
    """A 25 ms loop with a 2 s pause every 400 steps: 0.25% of its gaps, 17% of its time."""
    hist = Histogram().add([0.025] * 399 + [2.0])
    assert 2.0 / gaps.RATIO <= hist.quantile() <= 2.0
    assert Histogram().add([0.025] * 1000).quantile() == pytest.approx(0.025, rel=0.3)
    assert Histogram().quantile() == 0.0
    assert Histogram().add([0.3]).quantile() == 0.3  # never above the longest gap


def test_forty_steps_of_a_25_ms_loop_learn_the_floor() -> None:
    """The issue's case: a data-loader stall at step 40 of a 25 ms loop must be named in
    15 s, not after the 60 s warm-up: 40 steps are enough."""
    log = gaps.fold(GapLog(), _loop(41), now=101.0)
    summary = log.summary()
    assert summary.count >= th.MIN_GAPS and summary.p99 <= 0.025
    assert th.learned({0: summary, 1: summary}).seconds == th.FLOOR_S


def test_the_first_steps_teach_nothing() -> None:
    """Start-up and a first compile: 30 s before the first step ends; the warm-up's."""
    events = [(100.0, True), (130.0, False), (131.0, True), (131.5, False)]
    log = gaps.fold(GapLog(), events, now=132.0)
    assert log.summary().count == 0 and log.warm_at is None
    log = gaps.fold(log, _loop(20, start=132.0), now=133.0)
    assert log.warm_at == 132.0 and log.summary().longest < 0.1
    assert log.summary().count == 2 * 20 - 1


def test_without_steps_finished_collectives_end_the_warm_up() -> None:
    events = [(100.0 + n, False) for n in range(5)]
    assert gaps.fold(GapLog(), events, now=105.0, finished=3).warm_at is None
    log = gaps.fold(GapLog(), events, now=105.0, finished=gaps.WARM_COLLECTIVES)
    assert log.warm_at == 104.0
    assert gaps.fold(log, [(104.5, False)], now=106.0).summary().count == 1


def test_folds_continue_across_heartbeats_and_skip_what_was_folded() -> None:
    events = _loop(40)
    once = gaps.fold(GapLog(), events, now=102.0)
    split = gaps.fold(gaps.fold(GapLog(), events[:30], now=101.0), events, now=102.0)
    assert split.summary() == once.summary() and split.last == once.last


def test_a_bridge_across_dropped_events_is_no_gap() -> None:
    log = gaps.fold(GapLog(), _loop(10), now=101.0)
    later = [(110.0, False), (110.01, False)]
    bridged = gaps.fold(log, later, now=111.0)
    assert bridged.summary().longest > 9  # nothing said they were dropped: a 9.8 s gap
    dropped = gaps.fold(log, later, now=111.0, complete_from=110.0)
    assert dropped.summary().longest < 0.1 and dropped.summary().count == log.summary().count + 1


def test_gaps_over_a_long_phase_teach_nothing() -> None:
    log = gaps.fold(GapLog(), _loop(10), now=101.0)
    after = [(125.0, True), (125.01, False)]
    skipped = gaps.fold(log, after, now=126.0, skip=((101.0, 124.0),))
    assert skipped.summary().longest < 0.1
    assert gaps.fold(log, after, now=126.0).summary().longest > 24


def test_the_window_is_the_last_one_or_two_epochs() -> None:
    log = gaps.fold(GapLog(), [*_loop(10), (103.0, False)], now=101.0)  # one 2.8 s gap
    assert log.summary().longest > 2.7
    log = gaps.fold(log, [(103.1, False)], now=101.0 + gaps.EPOCH_S)
    assert log.summary().longest > 2.7  # the previous epoch still counts
    log = gaps.fold(log, [(103.2, False)], now=101.0 + 2 * gaps.EPOCH_S)
    assert log.summary().longest < 0.2 and log.summary().count == 2  # one gap per epoch


def _records(first: int, last: int, every: float = 0.01) -> list[CollectiveRecord]:
    return [CollectiveRecord(seq=n, op="all_reduce", started=100.0 + n * every,
                             ended=100.0 + n * every + every / 2) for n in range(first, last + 1)]


def test_observe_reads_the_rings_and_notices_what_they_dropped() -> None:
    ring = 8
    log = gaps.observe(GapLog(), _records(1, 8), [], marks_complete=True, ring=ring, now=101.0,
                       finished=gaps.WARM_COLLECTIVES)
    assert log.seen == ("default", 8) and log.warm_at is not None
    # the next beat's full ring still holds seq 8: nothing dropped
    assert gaps.complete_from(_records(5, 12), log.seen, ring, [], True) == -math.inf
    # seqs 9-19 went by between beats: the ring of 20-27 misses some
    since = gaps.complete_from(_records(20, 27), log.seen, ring, [], True)
    assert since == pytest.approx(100.2)
    assert gaps.complete_from(_records(1, 3), None, ring, [(99.0, True)], False) == 99.0
    # gloo's bucket all-reduces end when they start (no end time): only their start counts
    fake = CollectiveRecord(seq=1, op="all_reduce", started=5.0, ended=5.0)
    assert gaps.events([fake], [(6.0, True)]) == [(6.0, True), (5.0, False)]


def test_summaries_round_trip_and_ignore_what_is_not_one() -> None:
    summary = Summary(12, 0.031, 0.2)
    assert Summary.from_dict(summary.to_dict()) == summary
    assert Summary.from_dict(None) is None and Summary.from_dict({"n": "x"}) is None

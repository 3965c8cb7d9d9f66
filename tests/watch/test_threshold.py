"""The stall threshold learned from the job, long phases' allowances, the override (pure)."""

from __future__ import annotations

import pytest

from ddpnet.watch import threshold as th
from ddpnet.watch.gaps import KEY, Summary
from ddpnet.watch.state import CollectiveRecord, RankState, Snapshot
from ddpnet.watch.watchdog import Settings, Watchdog


def _learned(p99: float = 0.02, ranks: int = 2, count: int = 50) -> th.Threshold:
    return th.learned({r: Summary(count, p99, p99) for r in range(ranks)})


def test_too_few_gaps_on_any_rank_is_the_warm_up_allowance() -> None:
    found = th.learned({0: Summary(50, 0.02, 0.1), 1: Summary(th.MIN_GAPS - 1, 0.02, 0.1),
                        2: None})
    assert found.seconds == th.WARMUP_S and found.source == "warm-up"
    assert "rank(s) 1, 2 have fewer than 10 gaps" in found.reason
    assert th.learned({}).source == "warm-up"


def test_a_fast_job_gets_the_floor() -> None:
    found = _learned(0.02)
    assert found == th.Threshold(5.0, "learned", found.reason)
    assert "floor 5 s" in found.reason and "of its last 50 gaps; 2 rank(s)" in found.reason


def test_a_slow_job_gets_k_times_the_largest_p99_among_the_ranks() -> None:
    found = th.learned({0: Summary(50, 0.5, 0.6), 1: Summary(80, 4.0, 4.2),
                        2: Summary(50, 1.0, 1.0)})
    assert found.seconds == 12.0 and found.source == "learned"
    assert "max(5 s, 3 x p99)" in found.reason and "rank 1's, 4.00 s" in found.reason


def test_the_override_wins_over_everything() -> None:
    snap = _snapshot(long_phase="checkpoint")
    found = th.learn(_learned(), snap, override=7.0)
    assert found == th.Threshold(7.0, "override", found.reason)
    assert "DDPNET_WATCH_TIMEOUT = 7 s" in found.reason


def _snapshot(long_phase: str = "", gone: dict[int, str] | None = None) -> Snapshot:
    states = {0: RankState(0, 2, long_phase=long_phase, long_since=100.0),
              1: RankState(1, 2, recent=(CollectiveRecord(seq=5, op="all_reduce"),))}
    return Snapshot(2, 110.0, states, gone or {})


@pytest.mark.parametrize("phase", ["checkpoint", "eval", "warmup"])
def test_a_long_phase_raises_it_to_its_allowance(phase: str) -> None:
    found = th.learn(_learned(), _snapshot(phase))
    assert found.seconds == th.ALLOWANCE_S[phase] and found.source == "phase"
    assert f"rank(s) 0 in phase {phase!r}" in found.reason
    assert "learned alone: 5 s" in found.reason


def test_a_long_phase_may_take_three_times_the_longest_seen() -> None:
    found = th.learn(_learned(), _snapshot("checkpoint"), longest={"checkpoint": 90.0})
    assert found.seconds == 270.0


def test_a_gone_ranks_phase_gives_no_allowance() -> None:
    found = th.learn(_learned(), _snapshot("checkpoint", gone={0: "killed"}))
    assert found.source == "learned"


def test_threshold_round_trips() -> None:
    found = _learned(1.0)
    assert th.Threshold.from_dict(found.to_dict()) == found


# -- through the watchdog ---------------------------------------------------------------------

def _step(seq: int, *, flying: bool, long_phase: str = "", since: float = 0.0,
          published: float = 0.0, gaps: int = 50) -> Snapshot:
    """Two ranks, rank 1 inside collective ``seq``; each has ``gaps`` 20 ms gaps learned."""
    rec = CollectiveRecord(seq=seq, op="all_reduce", ended=None if flying else 1.0)
    extra = {KEY: Summary(gaps, 0.02, 0.03).to_dict()}
    states = {0: RankState(0, 2, last_seq=seq - 1, long_phase=long_phase, long_since=since,
                           published=published, extra=extra),
              1: RankState(1, 2, last_seq=seq - 1, recent=(rec,), published=published,
                           extra=extra)}
    return Snapshot(2, published, states)


def test_the_watchdog_learns_from_the_ranks_own_gaps_at_once() -> None:
    """No gap of its own needed: the first snapshot whose ranks learned sets the threshold
    (a 25 ms loop 40 steps in), and a rank that stops arriving is named after 5 s."""
    dog = Watchdog(Settings())
    dog.due(_step(1, flying=True, gaps=th.MIN_GAPS - 1), 0.0)
    assert dog.threshold.source == "warm-up" and dog.threshold.seconds == th.WARMUP_S
    assert dog.due(_step(2, flying=True), 1.0) is None
    assert dog.threshold.source == "learned" and dog.threshold.seconds == 5.0
    assert dog.base == dog.threshold and dog.stale_after == 4.0
    assert dog.due(_step(2, flying=True), 5.9) is None
    assert dog.due(_step(2, flying=True), 6.0) == "no progress for 5 s"


def test_an_unmarked_20_s_pause_fires_and_a_marked_checkpoint_does_not() -> None:
    dog = Watchdog(Settings())
    now = 1.0
    dog.due(_step(20, flying=True, published=now), now)
    marked = _step(21, flying=True, long_phase="checkpoint", since=now, published=now)
    dog.due(marked, now)
    assert dog.due(marked, now + 20.0) is None, dog.threshold
    assert dog.threshold.source == "phase" and dog.threshold.seconds == 120.0
    assert dog.base.source == "learned" and dog.base.seconds == 5.0  # what the ack carries
    # the checkpoint ends, training goes on; its length counts for the next one
    after = now + 20.5
    dog.due(_step(22, flying=True, published=after), after)
    assert dog.threshold.seconds == 5.0
    assert dog.longest["checkpoint"] == pytest.approx(20.5)
    unmarked = Watchdog(Settings())
    unmarked.due(_step(20, flying=True), now)
    assert unmarked.due(_step(20, flying=True), now + 20.0) == "no progress for 20 s"


def test_the_override_is_the_threshold() -> None:
    dog = Watchdog(Settings(timeout=30))
    dog.due(_step(1, flying=True), 0.0)
    assert dog.threshold.seconds == 30 and dog.threshold.source == "override"
    assert dog.due(_step(1, flying=True), 29) is None


def test_a_gone_rank_does_not_hold_the_warm_up() -> None:
    extra = {KEY: Summary(50, 0.02, 0.03).to_dict()}
    states = {0: RankState(0, 2, extra=extra), 1: None}
    assert th.learned(th.summaries(Snapshot(2, 0.0, states))).source == "warm-up"
    assert th.learned(th.summaries(Snapshot(2, 0.0, states, {1: "killed"}))).source == \
        "learned"


# -- what a rank that hears nothing judges itself by ------------------------------------------

def _rank(long_phase: str = "", *, inside: bool = False) -> RankState:
    recent = (CollectiveRecord(seq=9, op="all_reduce"),) if inside else ()
    return RankState(1, 3, long_phase=long_phase, long_since=10.0, recent=recent)


def test_a_cut_off_rank_judges_by_the_hubs_base_not_another_ranks_phase() -> None:
    """The lab: ranks in 'eval' raised the hub's threshold to 120 s in rank 1's last ack;
    rank 1, cut off inside an all_reduce, waited 123 s. The base is 5 s."""
    told = th.Threshold(120.0, "phase", "rank(s) 0, 2 in phase 'eval'")
    base, own = _learned(), th.learned({})
    assert th.self_judged(told, base, own, _rank(inside=True)) == base
    # inside a collective, its own long phase is no excuse either: it waits, it does not work
    assert th.self_judged(told, base, own, _rank("eval", inside=True)) == base
    # doing its own phase's work (not inside a collective), its allowance holds
    found = th.self_judged(told, base, own, _rank("checkpoint"))
    assert found.seconds == 120.0 and found.source == "phase"
    assert "this rank is in phase 'checkpoint'" in found.reason


def test_without_the_hubs_base_a_cut_off_rank_uses_its_own_gaps() -> None:
    warm = th.Threshold(th.WARMUP_S, "warm-up", "")
    own = th.learned({1: Summary(40, 0.025, 0.03)})
    assert th.self_judged(warm, warm, own, _rank(inside=True)) == own  # the hub not learned
    assert th.self_judged(warm, None, own, _rank(inside=True)) == own  # an older hub
    learned = _learned(0.5)
    assert th.self_judged(learned, None, own, _rank(inside=True)) == learned
    # neither learned: the start-up's allowance
    assert th.self_judged(warm, warm, th.learned({}), _rank()).source == "warm-up"
    override = th.Threshold(30.0, "override", "")
    assert th.self_judged(override, _learned(), own, _rank("eval")) == override


def test_heartbeats_slow_down_above_2048_ranks_and_silence_is_judged_in_periods() -> None:
    """The hub reads at most ~2,048 states a second; a rank is not answering only after
    2.5 of its periods (3 s at least, 10 s at most from the threshold)."""
    assert th.period_for(8) == th.period_for(2048) == 1.0
    assert th.period_for(4096) == 2.0
    assert th.stale_after(5.0) == 4.0 and th.stale_after(60.0) == 10.0
    assert th.stale_after(1.0) == 3.0
    assert th.stale_after(5.0, period=2.0) == 5.0  # 4,096 ranks: 2.5 periods
    assert th.stale_after(60.0, period=8.0) == 20.0


def test_a_silent_ranks_long_phase_gives_no_allowance() -> None:
    """Cut off (or stopped) while its last state said 'eval': it holds nobody for 120 s."""
    snap = _snapshot("eval")  # rank 0 published at 0, the snapshot is taken at 110
    assert th.learn(_learned(), snap).source == "phase"
    assert th.learn(_learned(), snap, silent_after=10.0).source == "learned"
    dog = Watchdog(Settings())
    dog.due(_step(5, flying=True, long_phase="eval", published=1.0), 1.0)
    assert dog.threshold.source == "phase"
    stale = _step(5, flying=True, long_phase="eval", published=1.0)
    silent = Snapshot(2, 1.0 + dog.stale_after + 1, stale.states)
    assert dog.due(silent, 12.0) == "no progress for 11 s", dog.threshold
    assert dog.threshold.source == "learned"


def test_a_long_phase_whose_ranks_all_wait_in_a_collective_gives_no_allowance() -> None:
    """``ddpnet train``'s eval on every rank, rank 1 cut off: ranks 0 and 2 sit in eval's
    all_reduce. Nobody does the eval's work, so nothing holds the verdict for 120 s."""
    inside = (CollectiveRecord(seq=7, op="all_reduce"),)
    states = {r: RankState(r, 3, long_phase="eval", recent=inside, published=100.0)
              for r in (0, 2)}
    snap = Snapshot(3, 101.0, {**states, 1: RankState(1, 3, long_phase="eval", published=90.0)})
    assert th.long_phases(snap, silent_after=10.0) == {}
    assert th.learn(_learned(), snap, silent_after=10.0).source == "learned"
    working = {**states, 0: RankState(0, 3, long_phase="eval", published=100.0)}
    assert th.long_phases(Snapshot(3, 101.0, working)) == {"eval": (0,)}

"""The stall threshold learned from the job, long phases' allowances, the override (pure)."""

from __future__ import annotations

import pytest

from ddpnet.watch import threshold as th
from ddpnet.watch.state import CollectiveRecord, RankState, Snapshot
from ddpnet.watch.watchdog import Settings, Watchdog


def test_percentile_is_nearest_rank() -> None:
    values = [float(n) for n in range(1, 101)]
    assert th.percentile(values, 99) == 99.0
    assert th.percentile(values, 100) == 100.0
    assert th.percentile([3.0], 99) == 3.0


def test_too_few_gaps_is_the_warm_up_allowance() -> None:
    found = th.learn([0.02] * (th.MIN_GAPS - 1))
    assert found.seconds == th.WARMUP_S and found.source == "warm-up"
    assert f"only {th.MIN_GAPS - 1} gap(s)" in found.reason


def test_a_fast_job_gets_the_floor() -> None:
    found = th.learn([0.02, 0.03, 0.3, 1.0] * 10)
    assert found == th.Threshold(5.0, "learned", found.reason)
    assert "floor 5 s" in found.reason and "p99 of the last 40 gaps" in found.reason


def test_a_slow_job_gets_k_times_its_p99() -> None:
    found = th.learn([4.0] * 50 + [0.5] * 50)
    assert found.seconds == 12.0 and found.source == "learned"
    assert "max(5 s, 3 x p99)" in found.reason and "4.00 s" in found.reason


def test_the_override_wins_over_everything() -> None:
    snap = _snapshot(long_phase="checkpoint")
    found = th.learn([0.02] * 50, snap, override=7.0)
    assert found == th.Threshold(7.0, "override", found.reason)
    assert "DDPNET_WATCH_TIMEOUT = 7 s" in found.reason


def _snapshot(long_phase: str = "", gone: dict[int, str] | None = None) -> Snapshot:
    states = {0: RankState(0, 2, long_phase=long_phase, long_since=100.0),
              1: RankState(1, 2, recent=(CollectiveRecord(seq=5, op="all_reduce"),))}
    return Snapshot(2, 110.0, states, gone or {})


@pytest.mark.parametrize("phase", ["checkpoint", "eval", "warmup"])
def test_a_long_phase_raises_it_to_its_allowance(phase: str) -> None:
    found = th.learn([0.02] * 50, _snapshot(phase))
    assert found.seconds == th.ALLOWANCE_S[phase] and found.source == "phase"
    assert f"rank(s) 0 in phase {phase!r}" in found.reason
    assert "learned alone: 5 s" in found.reason


def test_a_long_phase_may_take_three_times_the_longest_seen() -> None:
    found = th.learn([0.02] * 50, _snapshot("checkpoint"), longest={"checkpoint": 90.0})
    assert found.seconds == 270.0


def test_a_gone_ranks_phase_gives_no_allowance() -> None:
    found = th.learn([0.02] * 50, _snapshot("checkpoint", gone={0: "killed"}))
    assert found.source == "learned"


def test_gaps_keep_the_most_recent() -> None:
    gaps: tuple[float, ...] = ()
    for n in range(th.KEEP + 5):
        gaps = th.add_gap(gaps, float(n))
    assert len(gaps) == th.KEEP and gaps[-1] == th.KEEP + 4


def test_threshold_round_trips() -> None:
    found = th.learn([1.0] * 20)
    assert th.Threshold.from_dict(found.to_dict()) == found


# -- through the watchdog ---------------------------------------------------------------------

def _step(seq: int, *, flying: bool, long_phase: str = "", since: float = 0.0,
          published: float = 0.0) -> Snapshot:
    rec = CollectiveRecord(seq=seq, op="all_reduce", ended=None if flying else 1.0)
    states = {0: RankState(0, 2, last_seq=seq - 1, long_phase=long_phase, long_since=since,
                           published=published),
              1: RankState(1, 2, last_seq=seq - 1, recent=(rec,), published=published)}
    return Snapshot(2, published, states)


def _train(dog: Watchdog, steps: int, every: float = 0.3) -> float:
    now = 0.0
    for seq in range(1, steps + 1):
        now = seq * every
        assert dog.due(_step(seq, flying=True, published=now), now) is None
    return now


def test_the_watchdog_learns_from_the_gaps_between_progress() -> None:
    dog = Watchdog(Settings())
    assert dog.threshold.source == "warm-up"
    now = _train(dog, 20)
    assert dog.threshold.source == "learned" and dog.threshold.seconds == 5.0
    assert dog.stale_after == 4.0
    # a rank stops arriving: named after the learned 5 s, not a minute
    assert dog.due(_step(20, flying=True), now + 4.9) is None
    assert dog.due(_step(20, flying=True), now + 5.0) == "no progress for 5 s"


def test_an_unmarked_20_s_pause_fires_and_a_marked_checkpoint_does_not() -> None:
    dog = Watchdog(Settings())
    now = _train(dog, 20)
    marked = _step(21, flying=True, long_phase="checkpoint", since=now, published=now)
    dog.due(marked, now)
    assert dog.due(marked, now + 20.0) is None, dog.threshold
    assert dog.threshold.source == "phase" and dog.threshold.seconds == 120.0
    # the checkpoint ends, training goes on: its 20 s taught nothing, but its length counts
    after = now + 20.5
    dog.due(_step(22, flying=True, published=after), after)
    assert dog.threshold.seconds == 5.0 and max(dog.gaps) < 1.0
    assert dog.longest["checkpoint"] == pytest.approx(20.5)
    unmarked = Watchdog(Settings())
    now = _train(unmarked, 20)
    assert unmarked.due(_step(20, flying=True), now + 20.0) == "no progress for 20 s"


def test_the_override_is_the_threshold() -> None:
    dog = Watchdog(Settings(timeout=30))
    now = _train(dog, 20)
    assert dog.threshold.seconds == 30 and dog.threshold.source == "override"
    assert dog.due(_step(20, flying=True), now + 29) is None


def test_the_start_up_gap_teaches_nothing() -> None:
    """The lab's link-down run: 4 s from the first heartbeat to the first collective every
    rank finished (connections, DDP's broadcast), then 0.1 s gaps. Learned from, that one gap
    was p99 of 30 and set a 20 ms loop's threshold to 12 s; it is the warm-up's."""
    dog = Watchdog(Settings())
    dog.due(_step(1, flying=True), 0.0)    # both ranks inside their first collective
    now = 4.0
    for seq in range(2, 32):
        dog.due(_step(seq, flying=True, published=now), now)
        now += 0.1
    assert dog.threshold.source == "learned" and dog.threshold.seconds == 5.0, dog.threshold
    assert len(dog.gaps) == 29 and max(dog.gaps) < 0.2, dog.gaps
    # the same job had the 4 s gap come after the warm-up: it counts (a pause that resumed)
    late = Watchdog(Settings())
    now = _train(late, 20, every=0.1)
    late.due(_step(21, flying=True), now + 4.0)
    assert late.threshold.seconds == pytest.approx(12.0), late.threshold


@pytest.mark.parametrize(("states", "warm"), [
    ({0: RankState(0, 2, last_seq=3), 1: RankState(1, 2, last_seq=1)}, True),
    ({0: RankState(0, 2, last_seq=3), 1: RankState(1, 2, last_seq=0)}, False),
    ({0: RankState(0, 2, last_seq=3), 1: None}, False),          # not published yet
    ({0: RankState(0, 2, step=2), 1: RankState(1, 2, step=1)}, True),  # steps, no collective
    ({0: RankState(0, 2, step=0), 1: RankState(1, 2, step=-1)}, False),
    ({}, False),
])
def test_warmed_up_needs_every_rank_past_its_first_collective_or_step(
        states: dict[int, RankState | None], warm: bool) -> None:
    assert th.warmed_up(Snapshot(2, 0.0, states)) is warm


def test_a_gone_rank_does_not_hold_the_warm_up() -> None:
    states = {0: RankState(0, 2, last_seq=3), 1: None}
    assert th.warmed_up(Snapshot(2, 0.0, states, {1: "killed"}))


def test_heartbeats_slow_down_above_2048_ranks_and_silence_is_judged_in_periods() -> None:
    """The hub reads at most ~2,048 states a second; a rank is not answering only after
    2.5 of its periods (3 s at least, 10 s at most from the threshold)."""
    assert th.period_for(8) == th.period_for(2048) == 1.0
    assert th.period_for(4096) == 2.0
    assert th.stale_after(5.0) == 4.0 and th.stale_after(60.0) == 10.0
    assert th.stale_after(1.0) == 3.0
    assert th.stale_after(5.0, period=2.0) == 5.0  # 4,096 ranks: 2.5 periods
    assert th.stale_after(60.0, period=8.0) == 20.0

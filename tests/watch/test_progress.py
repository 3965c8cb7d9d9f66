"""One notion of progress (``watch.progress``), read by the watchdog, a rank judging itself
and the metrics."""

from __future__ import annotations

from dataclasses import replace

from ddpnet.watch.progress import FIRST, Progress, any_progressed, moved_at, progressed
from ddpnet.watch.state import CollectiveRecord, RankState, Snapshot

IN = CollectiveRecord(seq=8, op="all_reduce", started=100.0)
DONE = replace(IN, ended=101.0, state="completed")


def rank(**kw: object) -> RankState:
    base = RankState(rank=0, world_size=2, step=3, phase="backward", phase_since=99.0,
                     last_seq=7, recent=(IN,), published=100.5)
    return replace(base, **kw)  # type: ignore[arg-type]


def test_a_first_state_is_progress_of_every_kind() -> None:
    assert progressed(None, rank()) == FIRST and bool(FIRST)


def test_a_new_heartbeat_alone_is_no_progress() -> None:
    before = rank()
    assert progressed(before, before) == Progress() and not progressed(before, before)
    assert not progressed(before, rank(published=160.0, extra={"activity": {"cpu_at": 150}}))


def test_each_kind_of_progress_is_named() -> None:
    before = rank()
    assert progressed(before, rank(step=4)) == Progress(step=True)
    assert progressed(before, rank(last_seq=8, recent=(DONE,))) == Progress(collective=True)
    assert progressed(before, rank(recent=(DONE, replace(IN, seq=9)))) == \
        Progress(collective=True)  # in the next collective: the one it waited in ended
    assert progressed(before, rank(phase="step", phase_since=101.0)) == Progress(phase=True)
    assert progressed(before, rank(phase_since=105.0)) == Progress(phase=True)  # marked anew
    assert progressed(before, rank(long_phase="checkpoint")) == Progress(phase=True)
    both = progressed(before, rank(step=4, phase="data", phase_since=102.0))
    assert both == Progress(step=True, phase=True)


def test_the_job_progressed_when_any_rank_did() -> None:
    still = Snapshot(2, 0.0, {0: rank(), 1: rank(rank=1)})
    assert any_progressed(None, still)
    assert not any_progressed(still, replace(still, taken=60.0))
    assert any_progressed(still, replace(still, states={**still.states, 1: rank(rank=1, step=4)}))
    assert any_progressed(Snapshot(2, 0.0, {0: rank(), 1: None}), still)  # rank 1's first


def test_moved_at_is_the_latest_mark_or_collective_by_the_ranks_clock() -> None:
    assert moved_at(rank()) == 100.0  # the collective's start, after the phase mark
    assert moved_at(rank(recent=(DONE,))) == 101.0
    assert moved_at(rank(long_since=120.0)) == 120.0
    assert moved_at(RankState(rank=0, world_size=2)) == 0.0

"""Silent desync: the ranks' per-step collective digests compared (pure), the rank's StepLog,
and the hub naming a desync over real loopback sockets while nothing hangs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from ddpnet.watch import desync
from ddpnet.watch.analyze import analyze
from ddpnet.watch.desync import Call, StepLog, detect, ended_apart, first_parting, keys
from ddpnet.watch.state import FINISHED, CollectiveRecord, RankState, Snapshot

NOW = 1000.0
METRIC: Call = ("all_reduce", "float32", (68,), "train.py:55 in main")
LOSS: Call = ("all_reduce", "float64", (1,), "train.py:60 in main")


def log(steps: int, *, skip: int | None = None, extra: int | None = None,
        ddp: int = 1, calls: Sequence[Call] = (METRIC,), odd: dict[int, Call] | None = None
        ) -> StepLog:
    """A rank's StepLog over ``steps`` steps: ``ddp`` collectives torch makes itself (no
    Python call) then ``calls`` per step; ``skip`` leaves the step's first Python call out,
    ``extra`` adds one, ``odd`` replaces it in a step."""
    out, issued = StepLog(), 0
    for step in range(steps):
        out.begin(step, issued)
        issued += ddp
        made = list(calls)
        if step == skip:
            made = made[1:]
        if step == extra:
            made.append(made[0])
        if odd and step in odd:
            made[0] = odd[step]
        for call in made:
            out.call(call)
            issued += 1
    out.begin(steps, issued)
    return out


def state(rank: int, steplog: StepLog | None, *, records: tuple[CollectiveRecord, ...] = (),
          step: int = 39) -> RankState:
    extra = {desync.KEY: steplog.digest(steplog.seq)} if steplog is not None else {}
    return RankState(rank=rank, world_size=3, host=f"node{rank}", step=step, recent=records,
                     published=NOW - 0.5, extra=extra)


def snap(*states: RankState, gone: dict[int, str] | None = None) -> Snapshot:
    return Snapshot(world_size=len(states), taken=NOW, states={s.rank: s for s in states},
                    gone=gone or {})


def test_ranks_making_the_same_collectives_agree() -> None:
    s = snap(*(state(r, log(40)) for r in range(3)))
    assert first_parting(s) is None and detect(s) is None
    assert analyze(s).kind == "ok"


def test_a_skipped_collective_names_the_rank_the_step_and_the_call_site() -> None:
    s = snap(state(0, log(40)), state(1, log(40)), state(2, log(40, skip=10)))
    parting = first_parting(s)
    assert parting is not None and parting.step == 10 and parting.odd == (2,)
    assert parting.others == (0, 1)
    d = analyze(s)
    assert d.kind == "collective-mismatch" and d.ranks == (2,) and d.hosts == ("node2",)
    assert "rank 2 (node2) skipped 1 collective(s) in step 10" in d.summary
    assert "all_reduce float32[68] at train.py:55 in main" in d.summary
    assert any(e.startswith("rank(s) 0, 1: step 10 began after collective seq 20 and issued 2")
               for e in d.evidence), d.evidence


def test_an_extra_collective_in_a_step_is_named() -> None:
    s = snap(state(0, log(40, extra=7)), state(1, log(40)), state(2, log(40)))
    d = detect(s)
    assert d is not None and d.ranks == (0,)
    assert "made 1 extra collective(s) in step 7" in d.summary and "train.py:55" in d.summary


def test_another_dtype_at_the_same_size_is_named_with_both_calls() -> None:
    """float32[2] and float64[1] are 8 bytes each: gloo does not notice, the sums are wrong."""
    bad: Call = ("all_reduce", "float32", (2,), "train.py:60 in main")
    s = snap(state(0, log(40, calls=(LOSS,))), state(1, log(40, calls=(LOSS,), odd={12: bad})),
             state(2, log(40, calls=(LOSS,))))
    d = detect(s)
    assert d is not None and d.ranks == (1,)
    assert ("called all_reduce float32[2] at train.py:60 in main in step 12 where the others "
            "called all_reduce float64[1] at train.py:60 in main") in d.summary


def test_a_skip_before_the_window_is_named_as_counts_already_apart() -> None:
    # the window keeps the last 64 steps: rank 1 skipped in step 3 of 100
    s = snap(state(0, log(100)), state(1, log(100, skip=3)))
    d = detect(s)
    assert d is not None and d.ranks == (1,)
    assert "already -1 apart" in d.summary and "parted before the 64 steps kept" in d.summary


def test_a_skip_of_a_collective_torch_makes_itself_is_named_by_its_count() -> None:
    a, b = StepLog(), StepLog()
    for steplog, ddp in ((a, [1, 1, 1]), (b, [1, 0, 1])):
        issued = 0
        for step, n in enumerate(ddp):
            steplog.begin(step, issued)
            issued += n
        steplog.begin(3, issued)
    d = detect(snap(state(0, a), state(1, b)))
    assert d is not None and d.ranks == (1,) and "in step 1" in d.summary
    assert "DDP's gradient all-reduce" in d.summary


def test_two_ranks_tie_goes_against_the_one_with_fewer_collectives() -> None:
    d = detect(snap(state(0, log(20)), state(1, log(20, skip=4))))
    assert d is not None and d.ranks == (1,) and "skipped" in d.summary


def test_a_step_number_seen_twice_in_a_window_is_not_compared() -> None:
    """Epochs that restart the step count: only unique step numbers are compared."""
    steplog = StepLog()
    for step, issued in ((0, 0), (1, 1), (2, 2), (0, 3), (1, 4)):
        steplog.begin(step, issued)
    assert sorted(keys(state(0, steplog))) == [1, 2]  # 0 twice; the second 1 still runs


def test_ranks_without_step_marks_are_left_out() -> None:
    s = snap(state(0, log(30)), state(1, None), state(2, log(30)))
    assert detect(s) is None


def test_a_steplog_keeps_a_bounded_window_and_calls_per_step() -> None:
    steplog = StepLog()
    steplog.begin(0, 0)
    for n in range(desync.CALLS_PER_STEP + 5):
        steplog.call(("all_reduce", "float32", (n,), "x.py:1 in f"))
    steplog.begin(1, 21)
    for step in range(2, 200):
        steplog.begin(step, 21)
    raw = steplog.digest(21)
    assert len(raw["steps"]) == desync.WINDOW and raw["issued"] == 21
    assert len(raw["sigs"]) == desync.CALLS_PER_STEP + 5


def rec(seq: int, *, ended: float | None = 1.0, site: str = "train.py:70 in main"
        ) -> CollectiveRecord:
    return CollectiveRecord(seq=seq, op="all_reduce", group="default_pg", dtype="float32",
                            shape=(1,), started=NOW - 3, ended=ended, site=site)


def test_an_extra_collective_at_the_end_is_named_when_the_others_finished() -> None:
    s = snap(state(0, log(40), records=(rec(79), rec(80))),
             state(1, log(40), records=(rec(79), rec(80))),
             state(2, log(40), records=(rec(80), rec(81, ended=None))),
             gone={0: FINISHED, 1: f"{FINISHED} while others may still call collectives"})
    end = ended_apart(s)
    assert end is not None and end.done == (0, 1) and end.last == 80 and end.calling == (2,)
    d = analyze(s)
    assert d.kind == "collective-mismatch" and d.ranks == (2,) and d.hosts == ("node2",)
    assert ("an extra collective at the end: rank 2 (node2) called all_reduce float32[1] seq 81 "
            "at train.py:70 in main after rank(s) 0, 1 finished with seq 80"
            ) in d.summary


def test_one_rank_stopping_early_is_named_as_the_one_that_stopped() -> None:
    s = snap(state(0, log(40), records=(rec(80), rec(81, ended=None))),
             state(1, log(40), records=(rec(80), rec(81, ended=None))),
             state(2, log(40), records=(rec(79), rec(80))),
             gone={2: FINISHED})
    d = detect(s)
    assert d is not None and d.ranks == (2,)
    assert "rank 2 (node2) stopped calling collectives (finished after seq 80)" in d.summary


def test_ranks_finishing_together_are_no_desync() -> None:
    s = snap(state(0, log(40), records=(rec(80),)), state(1, log(40), records=(rec(80),)),
             state(2, log(40), records=(rec(80, ended=None),)), gone={0: FINISHED})
    assert ended_apart(s) is None and detect(s) is None


# -- the hub, over real sockets ----------------------------------------------------------------

def test_the_hub_names_a_desync_while_every_rank_keeps_stepping(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.watch.test_hub import beacon, start_hub, wait_for

    exits: list[tuple[int, int]] = []
    _hub, port, thread = start_hub(tmp_path, timeout=300)
    b0, b1 = beacon(0, tmp_path, exits), beacon(1, tmp_path, exits)
    for rank, b in enumerate((b0, b1)):
        b.recorder.steps = log(30, skip=12 if rank == 1 else None)
        b.recorder.set_step(30)
        b.connect("127.0.0.1", port, token="127.0.0.1:1:2")
    assert wait_for(lambda: len(exits) == 2, 15), capsys.readouterr().err
    assert sorted(exits) == [(0, 4), (1, 4)]
    err = capsys.readouterr().err
    assert "ddpnet watch: collective-mismatch (collectives parted" in err
    assert "rank 1 (h1) skipped 1 collective(s) in step 12" in err
    for b in (b0, b1):
        b.close()
    thread.join(10)
    assert not thread.is_alive()


def test_a_goodbye_is_held_and_becomes_the_verdict_when_a_peer_issued_more(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Rank 0 finishes after seq 80 while rank 1 issued seq 81: rank 0's goodbye waits for
    the hub, which names rank 1's extra collective; both exit 4 (rank 0 would have exited 0)."""
    import threading
    import time

    from tests.watch.test_hub import beacon, start_hub, wait_for

    exits: list[tuple[int, int]] = []
    hub, port, thread = start_hub(tmp_path, timeout=300)
    b0, b1 = beacon(0, tmp_path, exits), beacon(1, tmp_path, exits)
    b0.recorder.issued = lambda: 80
    b1.recorder.issued = lambda: 81
    for b in (b0, b1):
        b.connect("127.0.0.1", port, token="127.0.0.1:1:2")
    assert wait_for(lambda: desync.issued(hub.states.get(1)) == 81)
    started = time.monotonic()
    closing = threading.Thread(target=b0.close)
    closing.start()
    assert wait_for(lambda: len(exits) == 2, 10), capsys.readouterr().err
    closing.join(10)
    assert sorted(exits) == [(0, 4), (1, 4)] and time.monotonic() - started < 5
    err = capsys.readouterr().err
    assert "an extra collective at the end: rank 1 (h1) called collective seq 81 after " \
           "rank(s) 0 finished with seq 80" in err
    b1.close()
    thread.join(10)


def test_ranks_finishing_together_are_let_go_at_once(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    from ddpnet.watch import heartbeat

    # a goodbye the hub never answered would wait this long: far above any loaded machine's
    # few seconds (against the real 3.5 s, a 2 s bound left 1.5 s to luck)
    monkeypatch.setattr(heartbeat, "FAREWELL_WAIT_S", 30.0)

    from tests.watch.test_hub import beacon, start_hub, wait_for

    exits: list[tuple[int, int]] = []
    hub, port, thread = start_hub(tmp_path, timeout=300)
    b0, b1 = beacon(0, tmp_path, exits), beacon(1, tmp_path, exits)
    for b in (b0, b1):
        b.recorder.issued = lambda: 80
        b.connect("127.0.0.1", port, token="127.0.0.1:1:2")
    assert wait_for(lambda: len(hub.states) == 2)
    started = time.monotonic()
    closers = [threading.Thread(target=b.close) for b in (b0, b1)]
    for c in closers:
        c.start()
    for c in closers:
        c.join(10)
    assert time.monotonic() - started < 15 and exits == []
    thread.join(10)
    assert not thread.is_alive()

"""Flight Recorder entries as records, call sites, phases and steps (no process group)."""

from __future__ import annotations

import pytest

from ddpnet.errors import ConfigError
from ddpnet.watch.flight import call_site
from ddpnet.watch.recorder import STEP_WINDOW, Recorder, from_flight_recorder, merge
from ddpnet.watch.state import STEP_BUCKETS, CollectiveRecord

FRAMES = [{"name": "all_reduce", "filename": "/x/site-packages/torch/distributed/c10d.py",
           "line": 3245},
          {"name": "call", "filename": "/src/ddpnet/watch/recorder.py", "line": 9},
          {"name": "main", "filename": "/home/u/train.py", "line": 42}]


def entry(seq: int, retired: bool, **kw: object) -> dict[str, object]:
    return {"collective_seq_id": seq, "profiling_name": "gloo:all_reduce",
            "process_group": ("0", "default_pg"), "input_sizes": [[110]],
            "input_dtypes": ["Float"], "time_created_ns": 5_000_000_000, "retired": retired,
            "state": "scheduled", "frames": FRAMES, "is_p2p": False, **kw}


def test_flight_recorder_entries_become_records() -> None:
    records = from_flight_recorder({"entries": [entry(7, True), entry(8, False)]})
    assert [r.seq for r in records] == [7, 8]
    done, flying = records
    assert done.op == "all_reduce" and done.dtype == "float32" and done.shape == (110,)
    assert done.nbytes == 440 and done.group == "default_pg" and done.ended is not None
    assert flying.ended is None and flying.state == "started"
    assert flying.site == "train.py:42 in main"


def test_a_dump_without_entries_is_empty() -> None:
    assert from_flight_recorder({"version": "2.10"}) == ()


def test_call_site_skips_torch_and_the_watch() -> None:
    assert call_site(FRAMES[:2]) == ""
    assert call_site(FRAMES) == "train.py:42 in main"


def test_merge_keeps_announced_calls_the_recorder_does_not_hold_yet() -> None:
    fr = (CollectiveRecord(seq=7, op="all_reduce", started=1.0, ended=1.0),)
    called = [CollectiveRecord(seq=7, op="all_reduce", started=1.0, site="a"),
              CollectiveRecord(seq=8, op="all_reduce", shape=(3,), started=2.0, site="b")]
    merged = merge(fr, called)
    assert [(r.seq, r.site) for r in merged] == [(7, "a"), (8, "b")]


def test_phases_and_step_times() -> None:
    now = [100.0]
    rec = Recorder(clock=lambda: now[0])
    rec.set_phase("data")
    assert rec.phase == "data" and rec.phase_since == 100.0
    rec.set_step(1)
    now[0] = 100.5
    rec.set_step(2)
    assert rec.take_spans() == [(100.0, 100.5)]
    assert rec.take_spans() == []
    with pytest.raises(ConfigError):
        rec.set_phase("lunch")


def test_every_finished_step_is_counted_though_the_spans_drop_some() -> None:
    """A loop faster than the heartbeat takes spans (STEP_WINDOW of them) loses spans, never
    counts: each finished step lands in its STEP_BUCKETS bucket and the seconds add up."""
    now = [100.0]
    rec = Recorder(clock=lambda: now[0])
    for step in range(STEP_WINDOW + 101):
        rec.set_step(step)
        now[0] += 0.004 if step % 2 else 0.2
    counts, seconds = rec.step_totals()
    assert len(rec.take_spans()) == STEP_WINDOW
    assert sum(counts) == STEP_WINDOW + 100 and len(counts) == len(STEP_BUCKETS) + 1
    assert counts[0] == (STEP_WINDOW + 100) // 2  # 4 ms: the first bucket (5 ms)
    assert counts[STEP_BUCKETS.index(0.25)] == (STEP_WINDOW + 100) // 2
    assert seconds == pytest.approx((STEP_WINDOW + 100) // 2 * 0.204)


def test_phase_context_manager_restores_the_previous_phase() -> None:
    from ddpnet.watch.session import phase, recorder

    phase("data")
    with phase("forward"):
        assert recorder().phase == "forward"
    assert recorder().phase == "data"
    phase("")


def test_wrapped_collective_is_announced_before_it_runs() -> None:
    import types

    seen: list[tuple[str, CollectiveRecord | None]] = []
    rec = Recorder()
    fake = types.SimpleNamespace(all_reduce=lambda t, group=None: seen.append(("ran", None)))
    rec.announce = lambda r: seen.append(("announced", r))
    undo = rec.wrap_collectives(fake, lambda: 12)

    class T:
        shape = (3,)
        dtype = "torch.float32"

    fake.all_reduce(T())
    assert [s[0] for s in seen] == ["announced", "ran"]
    record = seen[0][1]
    assert record is not None and record.seq == 12 and record.shape == (3,)
    assert record.site.startswith("test_recorder.py:")
    assert rec.called[-1].ended is not None
    undo()
    assert not hasattr(fake.all_reduce, "__wrapped__")


def test_an_announced_call_gives_gloo_records_their_end() -> None:
    """gloo's Flight Recorder retires a record without a completion time (ended == started):
    the announced call's end is the one the straggler wait needs."""
    fr = (CollectiveRecord(seq=9, op="all_reduce", started=5.0, ended=5.0, state="completed"),
          CollectiveRecord(seq=10, op="all_reduce", started=6.0, ended=6.0, state="completed"))
    called = [CollectiveRecord(seq=9, op="all_reduce", started=4.9, ended=5.4, site="t.py:3")]
    merged = merge(fr, called)
    assert (merged[0].started, merged[0].ended, merged[0].site) == (4.9, 5.4, "t.py:3")
    assert merged[1] == fr[1]


def test_timed_waits_are_kept_until_their_steps_are_taken() -> None:
    rec = Recorder()
    for span in [(1.0, 1.5), (2.0, 2.4), (3.0, 3.2)]:
        rec.add_wait(*span)
    # the heartbeat took steps from 1.8 to 2.9: the spans ending after 1.8, and those that
    # ended by 2.9 are done with
    assert rec.take_waits(1.8, 2.9) == [(2.0, 2.4), (3.0, 3.2)]
    assert list(rec.waits) == [(3.0, 3.2)]


def test_a_collective_on_another_group_passed_by_position_is_not_recorded() -> None:
    """dist.all_reduce(t, op, subgroup): neither announced nor counted in the step digest
    (only the default group's collectives pair across every rank)."""
    import types

    class Group:
        pass

    ran: list[object] = []
    fake = types.SimpleNamespace(ProcessGroup=Group,
                                 all_reduce=lambda *a, **k: ran.append(a))
    rec = Recorder()
    announced: list[CollectiveRecord] = []
    rec.announce = announced.append
    rec.wrap_collectives(fake, lambda: 3)
    fake.all_reduce("t", "sum", Group())
    assert len(ran) == 1 and announced == [] and rec.steps.calls == []
    fake.all_reduce("t")
    assert len(announced) == 1 and len(rec.steps.calls) == 1

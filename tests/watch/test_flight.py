"""Flight Recorder dumps parsed (pure), NCCL's read where NCCL runs, and "inside a collective"
taken from them rather than from the Python call (fixtures: tests/watch/fixtures/README.md)."""

from __future__ import annotations

import itertools
import json
import pickle
import socket
from pathlib import Path
from typing import Any

import pytest

from ddpnet.watch import flight
from ddpnet.watch.analyze import Options, analyze
from ddpnet.watch.heartbeat import Beacon
from ddpnet.watch.recorder import Recorder, flight_recorder, merge
from ddpnet.watch.state import CollectiveRecord, RankState, Snapshot

FIXTURES = Path(__file__).with_name("fixtures")


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def test_an_nccl_dump_parses_into_frozen_entries_and_group_status() -> None:
    dump = flight.parse(load("nccl-fr-linkdown-rank1.json"))
    assert dump.version == "2.10" and dump.comm_lib_version == "2.28.9"
    assert [e.seq for e in dump.entries] == [608, 609, 610, 611, 612]
    last = dump.entries[-1]
    assert (last.backend, last.op, last.dtype, last.shape) == ("nccl", "all_reduce", "float32",
                                                               (1574912,))
    assert last.state == "scheduled" and not last.done and last.completed is None
    assert [e.seq for e in dump.in_flight()] == [612]
    assert dump.entries[3].dtype == "float64" and dump.entries[3].done
    assert dump.status == (flight.GroupStatus("0", 612, -1, 611),)
    with pytest.raises(AttributeError):
        last.state = "completed"  # type: ignore[misc]


def test_with_timing_an_nccl_entry_is_started_and_has_its_gpu_time() -> None:
    dump = flight.parse(load("nccl-fr-linkdown-rank0-timing.json"))
    done, flying = dump.entries[0], dump.entries[-1]
    assert done.duration_ms == 9.1 and done.started is not None and done.completed is not None
    assert flying.state == "started" and flying.started is not None and not flying.done
    assert dump.status[0].started == 612


def test_records_are_in_flight_until_the_flight_recorder_finishes_them() -> None:
    records = flight.records(flight.parse(load("nccl-fr-linkdown-rank1.json")), keep=32)
    assert [r.ended is None for r in records] == [False, False, False, False, True]
    assert records[0].ended == pytest.approx(records[0].started + 0.0093)
    assert records[-1].nbytes == 1574912 * 4


def test_a_returned_nccl_call_stays_in_flight_while_its_entry_is_not_done() -> None:
    """NCCL's all_reduce returns once queued: the announced call has an end, the Flight
    Recorder says it is still running. The Flight Recorder wins (the old merge marked it
    completed, so a rank stuck in cuda.synchronize() looked idle)."""
    fr = flight.records(flight.parse(load("nccl-fr-linkdown-rank1.json")), keep=32)
    called = [CollectiveRecord(seq=612, op="all_reduce", group="default_pg", started=fr[-1].started,
                               ended=fr[-1].started + 0.0001, state="completed",
                               site="loop.py:270 in backward")]
    merged = merge(fr, called)
    assert merged[-1].ended is None and merged[-1].site == "loop.py:270 in backward"
    state = RankState(rank=1, world_size=2, recent=merged)
    flying = state.in_flight()
    assert flying is not None and flying.seq == 612


def fake_c10d(monkeypatch: pytest.MonkeyPatch, dump: dict[str, Any]) -> list[str]:
    import torch._C._distributed_c10d as c10d

    calls: list[str] = []

    def nccl(*_args: object) -> bytes:
        calls.append("nccl")
        return pickle.dumps(dump)

    def cpu(*_args: object) -> bytes:
        calls.append("cpu")
        return pickle.dumps({"version": "2.10", "entries": []})

    monkeypatch.setattr(c10d, "_dump_nccl_trace", nccl, raising=False)
    monkeypatch.setattr(c10d, "_dump_fr_trace", cpu, raising=False)
    return calls


def test_nccl_reads_ncclS_own_flight_recorder(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_c10d(monkeypatch, load("nccl-fr-linkdown-rank1.json"))
    dump = flight_recorder("nccl")
    assert calls == ["nccl"] and dump is not None and len(dump["entries"]) == 5
    assert flight_recorder("gloo") == {"version": "2.10", "entries": []}
    assert calls == ["nccl", "cpu"]


def test_a_cut_off_nccl_rank_in_synchronize_exits_by_itself(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The H100 run's rank 1: its host thread returned from every collective call and sits in
    torch.cuda.synchronize(); NCCL's Flight Recorder holds seq 612 unfinished. Cut off from the
    hub, it names that collective and exits 4 (it never exited in the recorded run)."""
    fake_c10d(monkeypatch, load("nccl-fr-linkdown-rank1.json"))
    rec = Recorder()
    rec.backend = "nccl"
    exits: list[int] = []
    beacon = Beacon(rec, RankState(rank=1, world_size=2, host="g-n1"), tmp_path,
                    lost_after=10, override=1.0, exit_now=exits.append)
    with socket.socket() as closed:  # the hub's port, refused: its host answers, no hub
        closed.bind(("127.0.0.1", 0))
        beacon.hub = ("127.0.0.1", closed.getsockname()[1])
    state = beacon.state()
    beacon.judge_self(state)  # the first look: progress as of now
    assert exits == []
    beacon.heard -= 60
    beacon.progressed -= 60  # a minute without the hub's word and without progress
    beacon.judge_self(state)
    assert exits == [4]
    err = capsys.readouterr().err
    assert "rank 1 exits (4)" in err and "inside all_reduce seq 612" in err, err
    saved = json.loads((tmp_path / "rank-1.json").read_text())
    assert saved["state"]["recent"][-1]["ended"] is None


def test_the_h100_reports_states_analyse_to_the_same_link_down() -> None:
    report = load("h100-linkdown-report.json")
    snapshot = Snapshot.from_dict(report["snapshot"])
    d = analyze(snapshot, Options(stale_after=8.0))
    assert d.kind == "network" and d.ranks == (1,) and "link down: rank 1 (g-n1" in d.summary
    # what the recorder saw there: only the announced calls, none of DDP's bucket all-reduces
    seqs = [r.seq for r in snapshot.states[1].recent]  # type: ignore[union-attr]
    assert seqs == sorted(seqs) and any(b - a > 100 for a, b in itertools.pairwise(seqs))


def test_the_rank1_stack_is_in_synchronize_with_no_heartbeat_thread() -> None:
    stacks = (FIXTURES / "h100-linkdown-rank1-stacks.txt").read_text()
    assert "in synchronize" in stacks and "ddpnet-watch-heartbeat" not in stacks
    assert "heartbeat.py" not in stacks


def test_a_real_gloo_dump_parses_and_retires_an_async_collective_only_when_done(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A one-rank gloo group in this process: an async_op all_reduce is in flight in the dump
    until wait() returns (pg_status agrees)."""
    import os

    import torch
    import torch.distributed as dist

    from ddpnet.net.ports import free_port

    # set for this test only: the suite's later jobs inherit this process's environment
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", os.environ.get("TORCH_FR_BUFFER_SIZE") or "64")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1)
    try:
        work = dist.all_reduce(torch.ones(5), async_op=True)
        raw = flight_recorder("gloo")
        work.wait()
        after = flight_recorder("gloo")
    finally:
        dist.destroy_process_group()
    if raw is None or not raw.get("entries"):
        pytest.skip("this torch records no gloo collectives")
    assert after is not None
    done = flight.parse(after)
    assert done.entries[-1].backend == "gloo" and done.entries[-1].done
    assert done.status[-1].completed == done.entries[-1].seq

from __future__ import annotations

import json

from ddpnet.watch.state import CollectiveRecord, Diagnosis, RankState


def test_rank_state_round_trips_through_json() -> None:
    state = RankState(
        rank=1, world_size=2, host="n1", pid=7, step=3, phase="backward",
        recent=(CollectiveRecord(seq=4, op="all_reduce", dtype="float32", shape=(2, 3),
                                 nbytes=24, started=1.0, ended=1.5, state="completed"),
                CollectiveRecord(seq=5, op="all_reduce", started=2.0)),
        step_times=(0.5, 0.6), extra={"note": "x"},
    )
    back = RankState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert back == state
    assert back.in_flight() == state.recent[1]


def test_diagnosis_to_dict_is_json() -> None:
    d = Diagnosis(kind="rank-gone", summary="rank 1 (n1) died", ranks=(1,), hosts=("n1",))
    assert json.loads(json.dumps(d.to_dict()))["ranks"] == [1]


def test_snapshot_round_trips_through_json() -> None:
    from ddpnet.watch.state import LinkProbe, Snapshot

    snap = Snapshot(world_size=3, taken=9.5,
                    states={0: RankState(rank=0, world_size=3, host="n0"), 1: None,
                            2: RankState(rank=2, world_size=3, recent=(
                                CollectiveRecord(seq=1, op="barrier"),))},
                    gone={1: "side channel closed"},
                    probes=(LinkProbe(0, 1, False, "timed out"),))
    assert Snapshot.from_dict(json.loads(json.dumps(snap.to_dict()))) == snap


def test_diagnosis_round_trips() -> None:
    d = Diagnosis(kind="rank-gone", summary="s", ranks=(1,), hosts=("n1",), evidence=("e",))
    assert Diagnosis.from_dict(json.loads(json.dumps(d.to_dict()))) == d

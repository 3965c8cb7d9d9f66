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
                    probes=(LinkProbe(0, 1, False, "timed out"),), ages={0: 1.5, 2: 0.25})
    assert Snapshot.from_dict(json.loads(json.dumps(snap.to_dict()))) == snap


def test_diagnosis_round_trips() -> None:
    d = Diagnosis(kind="rank-gone", summary="s", ranks=(1,), hosts=("n1",), evidence=("e",))
    assert Diagnosis.from_dict(json.loads(json.dumps(d.to_dict()))) == d


def test_ages_and_waits_are_on_the_hubs_clock_whatever_the_ranks_clock_says() -> None:
    """``ages``: seconds since the hub received each state (its own clock). A rank's own
    timestamps only measure intervals against its own ``published``; a snapshot no hub
    took (a dump) has nothing else and compares them with ``taken``."""
    from ddpnet.watch.state import Snapshot

    def state(rank: int, clock: float) -> RankState:  # in an all_reduce begun 4 s ago
        return RankState(rank=rank, world_size=3, published=clock, phase_since=clock - 9,
                         recent=(CollectiveRecord(seq=1, op="all_reduce", started=clock - 4),))

    hub_wall = 1_000_000.0
    snap = Snapshot(3, hub_wall, {0: state(0, hub_wall + 300), 1: state(1, hub_wall - 300),
                                  2: None}, ages={0: 2.0, 1: 0.5})
    assert (snap.age(0), snap.age(1), snap.age(2)) == (2.0, 0.5, float("inf"))
    assert snap.since(0, hub_wall + 300 - 4) == 6.0 and snap.since(1, hub_wall - 304) == 4.5
    assert snap.since(1, hub_wall - 309) == 9.5
    dump = Snapshot(3, 50.0, {0: state(0, 48.0), 1: RankState(rank=1, world_size=3)})
    assert (dump.age(0), dump.age(1), dump.since(0, 44.0)) == (2.0, float("inf"), 6.0)
    around = snap.around(Diagnosis(kind="rank-gone", summary="s", ranks=(1,)))
    assert 1 in around.states and around.ages == {r: snap.ages[r] for r in around.states}

"""A rank's dump keeps the verdict it obeyed (the hub's, with the states it names) or the one
it reached itself, and a node's launcher reads its own ranks' verdicts of this attempt."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ddpnet.watch.dump import heard_verdicts, verdict_of, write_state
from ddpnet.watch.state import Diagnosis, RankState, Snapshot

GONE = Diagnosis("rank-gone", "rank 2 (n2) is gone", (2,), ("n2",))
CUT = Diagnosis("network", "cut off: rank 1 (n1) reaches neither hub nor peers", (1,), ("n1",))


def rank(r: int) -> RankState:
    return RankState(rank=r, world_size=3, host=f"n{r}", step=40)


def test_an_obeyed_verdict_is_kept_report_shaped(tmp_path: Path) -> None:
    context = Snapshot(3, 1.0, {2: rank(2)}, {2: "process stopped"}).to_dict()
    path = write_state(tmp_path, rank(0), "watchdog: x",
                       heard={"diagnosis": GONE.to_dict(), "snapshot": context})
    assert path is not None
    report = verdict_of(json.loads(path.read_text()))
    assert report is not None and report["diagnosis"] == GONE.to_dict()
    assert Snapshot.from_dict(report["snapshot"]).gone == {2: "process stopped"}


def test_a_rank_that_judged_itself_gives_its_own_verdict_and_state(tmp_path: Path) -> None:
    path = write_state(tmp_path, rank(1), "network: cut off", verdict=CUT)
    assert path is not None
    report = verdict_of(json.loads(path.read_text()))
    assert report is not None and Diagnosis.from_dict(report["diagnosis"]) == CUT
    assert Snapshot.from_dict(report["snapshot"]).states[1] == rank(1)
    assert verdict_of({"reason": "x", "state": rank(0).to_dict()}) is None


def test_a_launcher_reads_its_own_ranks_of_this_attempt_the_hubs_first(tmp_path: Path) -> None:
    write_state(tmp_path, rank(1), "own", verdict=CUT)
    write_state(tmp_path, rank(0), "obeyed",
                heard={"diagnosis": GONE.to_dict(), "snapshot": {"world_size": 3}})
    write_state(tmp_path, rank(2), "obeyed", heard={"diagnosis": CUT.to_dict()})
    (tmp_path / "rank-5.json").write_text("{not json")
    found = heard_verdicts(tmp_path, [1, 0, 5], since=0.0)
    assert [f["diagnosis"]["kind"] for f in found] == ["rank-gone", "network"]
    old = time.time() - 3600
    os.utime(tmp_path / "rank-0.json", (old, old))  # another attempt's
    assert [f["diagnosis"]["kind"] for f in heard_verdicts(tmp_path, [0, 1],
                                                           since=time.time() - 60)] == ["network"]

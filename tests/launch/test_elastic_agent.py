"""The gate in torchrun's agent (``launch.elastic_agent.Watching``) on torchrun's own result
and worker-state types, with the rendezvous store and handler stood in: a node whose ranks
obeyed a verdict blaming another node tells the store and lets torchrun restart; the blamed
node, told through the store, kills its workers and leaves as a signal (the rendezvous stays
open); a verdict that blames no node takes the restarts away. The real thing runs in
``test_elastic_lab.py``."""

from __future__ import annotations

import json
import signal
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from torch.distributed.elastic.agent.server.api import RunResult, WorkerState
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import RendezvousTimeout

from ddpnet.launch import elastic_agent
from ddpnet.launch.elastic_agent import LEFT_KEY, Watching
from ddpnet.watch.dump import write_state
from ddpnet.watch.state import Diagnosis, RankState, Snapshot

STOPPED = Diagnosis("rank-gone", "rank 2 (n2) is gone: process stopped", (2,), ("n2",))
MISMATCH = Diagnosis("collective-mismatch", "rank 1 called all_gather", (1,), ("n1",))


class Store:
    """c10d's store calls the gate makes: set, check, get."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def set(self, key: str, value: str) -> None:
        self.data[key] = value.encode()

    def check(self, keys: list[str]) -> bool:
        return all(k in self.data for k in keys)

    def get(self, key: str) -> bytes:
        return self.data[key]


def group(store: Store, ranks: list[int], nodes: int = 3, min_nodes: int = 2,
          last_call_s: float = 30.0) -> Any:
    timeout = RendezvousTimeout(last_call=timedelta(seconds=last_call_s))  # torch's own type
    handler = SimpleNamespace(_store=store, settings=SimpleNamespace(min_nodes=min_nodes,
                                                                     timeout=timeout))
    return SimpleNamespace(workers=[SimpleNamespace(id=1000 + r, global_rank=r) for r in ranks],
                           group_world_size=nodes, spec=SimpleNamespace(rdzv_handler=handler))


def agent() -> Any:
    killed: list[signal.Signals] = []
    return SimpleNamespace(_remaining_restarts=2, killed=killed,
                           _shutdown=lambda sig, timeout: killed.append(sig))


def obeyed(directory: Path, r: int, diagnosis: Diagnosis) -> None:
    context = Snapshot(3, 1.0, {2: RankState(rank=2, world_size=3, host="n2", step=40)},
                       {2: "process stopped (SIGSTOP)"})
    write_state(directory, RankState(rank=r, world_size=3, host=f"n{r}", step=40), "x",
                heard={"diagnosis": diagnosis.to_dict(), "snapshot": context.to_dict()})


def test_a_node_that_heard_another_blamed_tells_the_store_and_restarts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store, watching, a = Store(), Watching(tmp_path, me="n0"), agent()
    g = group(store, [0])
    watching.after(a, g, RunResult(state=WorkerState.HEALTHY))  # the attempt begins
    obeyed(tmp_path, 0, STOPPED)
    result = RunResult(state=WorkerState.FAILED)
    assert watching.after(a, g, result) is result and a._remaining_restarts == 2
    assert json.loads(store.data[LEFT_KEY + "n2"])["host"] == "n2"
    assert "n2 is blamed: the job restarts without it on 2 nodes" in capsys.readouterr().err
    record = json.loads((tmp_path / "recovery-n0.json").read_text())
    assert [e["what"] for e in record["events"]] == ["verdict", "exclude"]
    # the next round waits seconds, not torchrun's 30 s, for nodes above MIN
    last_call = g.spec.rdzv_handler.settings.timeout.last_call
    assert last_call == timedelta(seconds=elastic_agent.LAST_CALL_AFTER_LEAVE_S) < \
        timedelta(seconds=30)


def test_a_users_shorter_last_call_is_kept(tmp_path: Path) -> None:
    store, watching, a = Store(), Watching(tmp_path, me="n0"), agent()
    g = group(store, [0], last_call_s=3)
    watching.after(a, g, RunResult(state=WorkerState.HEALTHY))
    obeyed(tmp_path, 0, STOPPED)
    watching.after(a, g, RunResult(state=WorkerState.FAILED))
    assert g.spec.rdzv_handler.settings.timeout.last_call == timedelta(seconds=3)


def test_the_blamed_node_told_by_the_store_kills_its_workers_and_leaves(tmp_path: Path) -> None:
    store, watching, a = Store(), Watching(tmp_path, me="n2"), agent()
    g = group(store, [2])
    store.set(LEFT_KEY + "n2", json.dumps({"kind": "rank-gone", "summary": "rank 2 (n2) is "
                                           "gone: process stopped", "host": "n2", "step": 40}))
    with pytest.raises(SignalException) as left:
        watching.after(a, g, RunResult(state=WorkerState.HEALTHY))  # its rank is frozen
    assert a.killed == [signal.SIGKILL]
    assert "the other nodes blame this one: it leaves the job" in left.value.gate.line


def test_a_verdict_that_blames_no_node_takes_the_restarts_away(tmp_path: Path) -> None:
    store, watching, a = Store(), Watching(tmp_path, me="n0"), agent()
    g = group(store, [0])
    watching.after(a, g, RunResult(state=WorkerState.HEALTHY))
    obeyed(tmp_path, 0, MISMATCH)
    watching.after(a, g, RunResult(state=WorkerState.FAILED))
    assert a._remaining_restarts == 0 and not store.data


def test_no_verdict_anywhere_is_torchruns_own_restart(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(elastic_agent, "GRACE_S", 0.3)
    store, watching, a = Store(), Watching(tmp_path, me="n0"), agent()
    g = group(store, [0])
    watching.after(a, g, RunResult(state=WorkerState.FAILED))
    assert a._remaining_restarts == 2 and not store.data
    assert not (tmp_path / "recovery-n0.json").exists()

"""Which node a watch verdict blames: report.json as the hub writes it (``report_dict`` of the
watch's own analysis, and the H100 run's report), and the drain reason SLURM gets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ddpnet.launch.blame import REASON_MAX, Blame, blame, ddpnet_reason, drain_reason
from ddpnet.watch.analyze import analyze
from ddpnet.watch.report import report_dict
from ddpnet.watch.state import (
    CUT_OFF,
    FIREWALL,
    LINK_DOWN,
    MTU,
    PEER_FAILED,
    SLOW_LINK,
    UNPROBED,
    CollectiveRecord,
    Diagnosis,
    LinkProbe,
    RankState,
    Snapshot,
)

FIXTURES = Path(__file__).parents[1] / "watch" / "fixtures"
NOW = 1000.0


def rec(seq: int, *, shape: tuple[int, ...] = (110,), ended: float | None = 1.0,
        site: str = "") -> CollectiveRecord:
    return CollectiveRecord(seq=seq, op="all_reduce", dtype="float32", shape=shape,
                            started=NOW - 30, ended=ended,
                            state="completed" if ended else "started", site=site)


def state(rank: int, *records: CollectiveRecord, host: str = "", phase: str = "backward",
          published: float = NOW - 0.5, step: int = 7) -> RankState:
    done = [r.seq for r in records if r.ended is not None]
    return RankState(rank=rank, world_size=4, host=host or f"node{rank}", step=step,
                     phase=phase, phase_since=NOW - 42, last_seq=max(done, default=0),
                     recent=records, published=published, interface="eth0",
                     address=f"198.18.0.{rank + 2}")


def report(*states: RankState, gone: dict[int, str] | None = None,
           probes: tuple[LinkProbe, ...] = ()) -> dict[str, Any]:
    """What the hub writes: its analysis of the snapshot, through JSON."""
    snap = Snapshot(len(states), NOW, {s.rank: s for s in states}, gone or {}, probes)
    text = json.dumps(report_dict(analyze(snap), snap, "no progress for 30 s"))
    return dict(json.loads(text))


def test_the_h100_link_down_report_blames_its_node() -> None:
    found = blame(json.loads((FIXTURES / "h100-linkdown-report.json").read_text()))
    assert found.blames and found.host == "g-n1" and found.kind == "network"
    assert found.reason.startswith("ddpnet: network: link down: rank 1 (g-n1, eth0 "
                                   "198.18.9.2)")
    assert found.step >= 0 and found.unreachable


def test_a_link_cut_in_a_live_job_blames_the_cut_node() -> None:
    flight = rec(9, ended=None)
    states = [state(r, flight, published=NOW - (20 if r == 1 else 0.5)) for r in range(3)]
    down = tuple(LinkProbe(src, 1, False, "timeout after 2.0 s", port=port, purpose="side",
                           outcome="timeout") for src in (0, 2) for port in (5, 6))
    found = blame(report(*states, probes=down))
    assert (found.kind, found.host) == ("network", "node1"), found
    assert "198.18.0.3" in found.reason and "\n" not in found.reason


def test_a_killed_rank_blames_its_node_not_the_ranks_it_took_down() -> None:
    closed = PEER_FAILED + "DistBackendError: Connection closed by peer [198.18.0.3]:4242"
    found = blame(report(state(0, rec(5)), state(1, rec(5)), state(2, rec(5)),
                         state(3, rec(5), rec(6, ended=None)),
                         gone={0: closed, 2: "its process exited or was killed (side channel "
                                             "closed without a goodbye)"}))
    assert found.kind == "rank-gone" and found.host == "node2", found
    assert not found.unreachable  # its node still answers: SLURM ends the run by itself


def test_a_frozen_rank_blames_its_node() -> None:
    found = blame(report(state(0, rec(6, ended=None)), state(1, rec(5), published=NOW - 40),
                         state(2, rec(6, ended=None))))
    assert found.kind == "rank-gone" and found.host == "node1"


@pytest.mark.parametrize("states, gone, why", [
    # a shape mismatch: the program's bug, on every node
    ((state(0, rec(9, shape=(3,), ended=None)), state(1, rec(9, shape=(4,), ended=None)),
      state(2, rec(9, shape=(3,), ended=None))), {}, "program's bug"),
    # a rank that raised: its error, not its node
    ((state(0, rec(5), rec(6, ended=None)), state(1, rec(5)), state(2, rec(6, ended=None))),
     {1: "exited with an error: ValueError: bad batch"}, "the program raised"),
    # a data loader stall: storage, not the node
    ((state(0, rec(5), rec(6, ended=None)), state(1, rec(5), phase="data"),
      state(2, rec(5), rec(6, ended=None))), {}, "data loader"),
    # two ranks killed on two hosts at once: which node is unknown
    ((state(0, rec(5), rec(6, ended=None)), state(1, rec(5)), state(2, rec(5))),
     {1: "its process exited or was killed", 2: "its process exited or was killed"},
     "2 hosts"),
    # everyone inside one collective, the links not probed yet: no node named
    ((state(0, rec(6, ended=None)), state(1, rec(6, ended=None))), {}, "names no node"),
], ids=["mismatch", "raised", "data", "two-hosts", "unprobed"])
def test_verdicts_that_name_no_single_node_stop(states: tuple[RankState, ...],
                                                gone: dict[int, str], why: str) -> None:
    found = blame(report(*states, gone=gone))
    assert not found.blames and found.host == "" and found.reason == ""
    assert why in found.why, found


@pytest.mark.parametrize("kind", ["straggler", "working", "ok", "stalled"])
def test_warnings_and_non_verdicts_blame_nothing(kind: str) -> None:
    d = Diagnosis(kind, "rank 2 (node2) is 40% slower", (2,), ("node2",))
    found = blame({"diagnosis": d.to_dict(), "snapshot": Snapshot(0, 0.0, {}).to_dict()})
    assert not found.blames and "names no failed node" in found.why


def test_a_link_between_two_nodes_blames_neither() -> None:
    d = Diagnosis("network", "link down: rank 0 (n0) <-> rank 1 (n1) answers on no port",
                  (0, 1), ("n0", "n1"), sub_kind=LINK_DOWN)
    found = blame({"diagnosis": d.to_dict()})
    assert not found.blames and "2 hosts (n0, n1)" in found.why


def test_a_report_that_is_not_one_blames_nothing() -> None:
    assert not blame({}).blames
    assert not blame({"diagnosis": "x"}).blames
    assert blame({"diagnosis": {"summary": "no kind"}}).why


def test_the_reason_is_one_line_within_slurms_limit_and_cuts_no_word() -> None:
    host = "gpu-node-0042.cluster.example.org"
    d = Diagnosis("network", f"link down: rank 17 ({host}, eth0 198.18.0.42) sent no heartbeat "
                  + "and answers on no port " * 20, (17,), (host,),
                  ("rank 0 -> rank 17: side port 4242: timeout\nafter 2.0 s",))
    reason = drain_reason(d)
    assert len(reason.encode()) <= REASON_MAX and "\n" not in reason
    assert f"({host}, eth0 198.18.0.42)" in reason and ddpnet_reason(reason)
    words = set(d.summary.split())
    assert all(w in words or w in ("ddpnet:", "network:") for w in reason.split())
    assert "rank 0 ->" not in reason  # evidence that does not fit whole is left out
    fits = Diagnosis("network", "link down: rank 1 (n1)", evidence=("rank 0 -> rank 1: side "
                                                                    "port 4242: timeout",))
    assert drain_reason(fits) == ("ddpnet: network: link down: rank 1 (n1); rank 0 -> rank 1: "
                                  "side port 4242: timeout")
    short = drain_reason(d, limit=40)
    assert short == "ddpnet: network: link down: rank 17", short  # whole words only


@pytest.mark.parametrize(("sub_kind", "unreachable"), [
    (LINK_DOWN, True), (CUT_OFF, True), (FIREWALL, False), (MTU, False), (SLOW_LINK, False)])
def test_a_network_verdict_blames_its_node_by_its_sub_kind_whatever_its_wording(
        sub_kind: str, unreachable: bool) -> None:
    """The fields decide, not how the summary starts (it once read the first words)."""
    d = Diagnosis("network", "rank 1 (n1) is the one", (1,), ("n1",), sub_kind=sub_kind,
                  witnesses=(0, 2))
    found = blame({"diagnosis": d.to_dict()})
    assert found.host == "n1" and found.unreachable is unreachable


def test_a_network_verdict_whose_sub_kind_is_no_nodes_fault_blames_none_whatever_its_wording(
        ) -> None:
    for sub_kind in (UNPROBED, ""):
        d = Diagnosis("network", "link down: rank 1 (n1) reads as one node's", (1,), ("n1",),
                      sub_kind=sub_kind)
        assert not blame({"diagnosis": d.to_dict()}).blames


def test_a_report_written_before_sub_kinds_blames_as_its_summary_said() -> None:
    old = {k: v for k, v in Diagnosis("network", "cut off: rank 1 (n1) reaches nothing", (1,),
                                      ("n1",)).to_dict().items()
           if k not in ("sub_kind", "witnesses")}
    assert Diagnosis.from_dict(old).sub_kind == CUT_OFF
    assert blame({"diagnosis": old}).host == "n1"


def test_the_analysis_names_the_sub_kind_the_culprits_and_the_witnesses_as_fields() -> None:
    flight = rec(9, ended=None)
    states = [state(r, flight, published=NOW - (20 if r == 1 else 0.5)) for r in range(3)]
    down = tuple(LinkProbe(src, 1, False, "timeout after 2.0 s", port=port, purpose="side",
                           outcome="timeout") for src in (0, 2) for port in (5, 6))
    d = Diagnosis.from_dict(report(*states, probes=down)["diagnosis"])
    assert (d.kind, d.sub_kind, d.ranks, d.hosts, d.witnesses) == \
        ("network", LINK_DOWN, (1,), ("node1",), (0, 2))
    assert d.summary.startswith("link down: ")  # the text, rendered from them as before


def test_blame_round_trips() -> None:
    b = Blame("network", "link down", "n1", "ddpnet: network: link down", step=40)
    assert Blame.from_dict(json.loads(json.dumps(b.to_dict()))) == b


def heard(full: dict[str, Any]) -> dict[str, Any]:
    """What every rank hears with the verdict (the hub's ``Snapshot.around``), through JSON."""
    snap = Snapshot.from_dict(full["snapshot"])
    small = snap.around(Diagnosis.from_dict(full["diagnosis"]))
    return dict(json.loads(json.dumps({"diagnosis": full["diagnosis"],
                                       "snapshot": small.to_dict()})))


@pytest.mark.parametrize("full", [
    report(state(0, rec(6, ended=None)), state(1, rec(5), published=NOW - 40),
           state(2, rec(6, ended=None))),
    report(state(0, rec(5)), state(1, rec(5)), state(2, rec(5)),
           state(3, rec(5), rec(6, ended=None), step=9),
           gone={0: PEER_FAILED + "Connection closed by peer", 2: "its process exited or "
                 "was killed (side channel closed without a goodbye)"}),
    report(state(0, rec(5), rec(6, ended=None)), state(1, rec(5)), state(2, rec(6, ended=None)),
           gone={1: "exited with an error: ValueError: bad batch"}),
    report(state(0, rec(5), rec(6, ended=None)), state(1, rec(5), phase="data"),
           state(2, rec(5), rec(6, ended=None))),
    report(state(0, rec(9, shape=(3,), ended=None)), state(1, rec(9, shape=(4,), ended=None))),
], ids=["frozen", "killed", "raised", "data", "mismatch"])
def test_what_the_ranks_hear_with_the_verdict_blames_as_the_whole_report(
        full: dict[str, Any]) -> None:
    assert blame(heard(full)) == blame(full)


def test_what_the_ranks_hear_stays_small_in_a_large_world() -> None:
    states = [state(r, rec(5), step=r % 7) for r in range(4096)]
    gone = {r: "its process exited or was killed" for r in range(0, 4096, 2)}
    snap = Snapshot(4096, NOW, {s.rank: s for s in states}, gone)
    d = Diagnosis("rank-gone", "many ranks gone", tuple(range(0, 4096, 2)), ())
    small = snap.around(d)
    assert len(small.states) <= 2 * 64 + 1 and len(small.gone) <= 2 * 64
    assert max(s.step for s in small.states.values() if s is not None) == 6

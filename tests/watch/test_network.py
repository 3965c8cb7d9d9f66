"""watch.network on constructed snapshots: each sub-kind names the right pair, port or node,
and the negative cases (not all in one collective, a rank missing or gone, healthy probes)
return None."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ddpnet.watch import network
from ddpnet.watch.state import CollectiveRecord, LinkProbe, RankState, Snapshot

NOW = 1000.0


def rank_state(rank: int, world: int, *, seq: int = 7, op: str = "all_reduce",
               done: bool = False) -> RankState:
    recent = (CollectiveRecord(seq=seq - 1, op="all_reduce", started=NOW - 60, ended=NOW - 59,
                               state="completed"),
              CollectiveRecord(seq=seq, op=op, started=NOW - 40 + rank,
                               ended=NOW - 1 if done else None,
                               state="completed" if done else "started"))
    return RankState(rank=rank, world_size=world, host=f"node{rank}", interface="eth0",
                     address=f"198.18.0.{rank + 1}", step=12, phase="backward",
                     last_seq=seq - 1, recent=recent, published=NOW - 1)


def snapshot(world: int = 3, probes: tuple[LinkProbe, ...] = (), **kw: object) -> Snapshot:
    states = {r: rank_state(r, world) for r in range(world)}
    return Snapshot(world_size=world, taken=NOW, states=states, probes=probes, **kw)  # type: ignore[arg-type]


def connect(src: int, dst: int, purpose: str, outcome: str, port: int = 0) -> LinkProbe:
    port = port or {"side": 29601, "backend": 29602, "sink": 29603}[purpose]
    return LinkProbe(src, dst, outcome in ("connected", "reset"),
                     f"{purpose} port {port}: {outcome}", what="connect", port=port,
                     purpose=purpose, outcome=outcome)


def stream(src: int, dst: int, rate: float | None, outcome: str = "streamed") -> LinkProbe:
    return LinkProbe(src, dst, outcome == "streamed", f"stream: {rate} Gb/s", rate_gbps=rate,
                     what="stream", port=29603, purpose="sink", outcome=outcome)


def healthy(world: int = 3) -> list[LinkProbe]:
    out = []
    for a in range(world):
        for b in range(world):
            if a != b:
                out += [connect(a, b, "side", "connected"), connect(a, b, "backend", "connected"),
                        stream(a, b, 9.0 + a * 0.1)]
    return out


# ---- when the kind applies ------------------------------------------------------------------


def test_stuck_collective_found_when_every_rank_is_inside_the_same_one() -> None:
    stuck = network.stuck_collective(snapshot())
    assert stuck is not None
    assert (stuck.group, stuck.seq, stuck.op, stuck.waited) == ("default", 7, "all_reduce", 40.0)
    # a rank whose clock runs 300 s ahead, in it for 50 s by its own clock, heard 1 s ago:
    # the longest wait, on the hub's clock (the earliest start across clocks said 40 s)
    skewed = replace(rank_state(1, 3), published=NOW + 300, recent=(
        CollectiveRecord(seq=7, op="all_reduce", started=NOW + 250),))
    found = network.stuck_collective(replace(snapshot(), states={
        **snapshot().states, 1: skewed}, ages={0: 1.0, 1: 1.0, 2: 1.0}))
    assert found is not None and found.waited == 51.0


def test_not_all_ranks_in_the_same_collective_is_not_network() -> None:
    snap = snapshot()
    behind = {**snap.states, 2: rank_state(2, 3, seq=5)}
    snap = Snapshot(3, NOW, behind)
    assert network.stuck_collective(snap) is None
    assert network.detect(snap) is None and not network.wants_probes(snap)


def test_a_rank_one_collective_behind_and_still_inside_it_is_the_same_stall() -> None:
    """The others finished seq 6 and wait in 7; rank 2 never got its last chunk of 6 (the
    lab's firewall on one rank's gloo port does this): probe, and name seq 6."""
    snap = snapshot()
    behind = Snapshot(3, NOW, {**snap.states, 2: rank_state(2, 3, seq=6)})
    stuck = network.stuck_collective(behind)
    assert stuck is not None and stuck.seq == 6
    assert network.wants_probes(behind)


def test_a_rank_that_finished_it_or_calls_another_op_is_not_network() -> None:
    snap = snapshot()
    assert network.detect(Snapshot(3, NOW, {**snap.states, 1: rank_state(1, 3, done=True)})) \
        is None
    assert network.detect(Snapshot(3, NOW, {**snap.states, 1: rank_state(1, 3, op="broadcast")})) \
        is None


def test_missing_or_gone_ranks_are_not_network() -> None:
    snap = snapshot()
    assert network.detect(Snapshot(3, NOW, {**snap.states, 2: None})) is None
    assert network.detect(Snapshot(3, NOW, {0: snap.states[0], 1: snap.states[1]})) is None
    assert network.detect(Snapshot(3, NOW, snap.states, gone={2: "host stopped answering"})) \
        is None


def test_stuck_without_probes_says_so_and_wants_probes() -> None:
    snap = snapshot()
    assert network.wants_probes(snap)
    found = network.detect(snap)
    assert found is not None and found.kind == "network"
    assert "all 3 ranks are inside all_reduce #7" in found.summary
    assert "not probed yet" in found.summary
    assert "198.18.0.2 198.18.0.3" in found.hint
    assert json.loads(json.dumps(found.to_dict()))["ranks"] == [0, 1, 2]


def test_healthy_probes_name_nothing() -> None:
    snap = snapshot(probes=tuple(healthy()))
    assert not network.wants_probes(snap)
    assert network.detect(snap) is None


# ---- the sub-kinds --------------------------------------------------------------------------


def _replace(probes: list[LinkProbe], new: list[LinkProbe]) -> tuple[LinkProbe, ...]:
    keys = {(p.src_rank, p.dst_rank, p.what, p.purpose) for p in new}
    return tuple([p for p in probes if (p.src_rank, p.dst_rank, p.what, p.purpose) not in keys]
                 + new)


def _silent(snap: Snapshot, rank: int, since: float = 30.0) -> Snapshot:
    """``rank`` last published ``since`` seconds before the snapshot."""
    old = snap.states[rank]
    assert old is not None
    states = {**snap.states, rank: RankState.from_dict({**old.to_dict(),
                                                        "published": NOW - since})}
    return Snapshot(snap.world_size, snap.taken, states, snap.gone, snap.probes)


def _down_to_2() -> tuple[LinkProbe, ...]:
    down = [connect(s, 2, purpose, "timeout") for s in (0, 1) for purpose in ("side", "backend")]
    return _replace(healthy(), down + [stream(s, 2, None, "timeout") for s in (0, 1)])


def test_node_with_its_link_down_is_named() -> None:
    found = network.detect(_silent(snapshot(probes=_down_to_2()), 2))
    assert found is not None and found.kind == "network"
    assert found.summary.startswith("link down: rank 2 (node2, eth0 198.18.0.3)")
    assert found.ranks == (2,) and found.hosts == ("node2",)
    assert "on node2: `ip -br link show eth0`" in found.hint
    assert any("rank 0 -> rank 2" in e and "timeout" in e for e in found.evidence)


def test_every_port_dropped_while_its_heartbeat_is_fresh_is_a_firewall() -> None:
    """block-ephemeral in the lab: established connections (the heartbeat) pass, new ones
    are dropped on every port."""
    found = network.detect(snapshot(probes=_down_to_2()))  # rank 2 published 1 s ago
    assert found is not None and found.ranks == (2,)
    assert found.summary.startswith("firewall: every new connection to rank 2 (node2, eth0 "
                                    "198.18.0.3) is dropped")
    assert "published its state 1 s ago" in found.summary
    assert "nft list ruleset" in found.hint
    assert network.fresh(snapshot(), 2) and not network.fresh(_silent(snapshot(), 2, 6.0), 2)
    never = Snapshot(3, NOW, {**snapshot().states, 2: RankState(2, 3)})
    assert not network.fresh(never, 2)


def test_one_link_down_names_the_pair() -> None:
    down = [connect(0, 1, p, "unreachable") for p in ("side", "backend")]
    found = network.detect(_silent(snapshot(probes=_replace(healthy(), down)), 1))
    assert found is not None
    assert "rank 0 (node0, eth0 198.18.0.1) <-> rank 1 (node1, eth0 198.18.0.2)" in found.summary
    assert found.ranks == (0, 1) and found.hosts == ("node0", "node1")


def test_firewall_on_the_backend_port_is_named_with_the_port() -> None:
    blocked = [connect(s, 1, "backend", "timeout") for s in (0, 2)]
    found = network.detect(snapshot(probes=_replace(healthy(), blocked)))
    assert found is not None
    assert found.summary.startswith("firewall: rank 1 (node1, eth0 198.18.0.2)")
    assert "29602" in found.summary and "dropped" in found.summary
    assert found.hosts == ("node1",)
    assert "tcp dport 29602 accept" in found.hint


def test_refused_backend_port_is_a_rejecting_firewall() -> None:
    found = network.detect(snapshot(probes=_replace(healthy(),
                                                    [connect(0, 1, "backend", "refused")])))
    assert found is not None and "refused" in found.summary
    assert found.ranks == (0, 1)  # one pair only: the link is named, not a node


def test_refused_on_every_port_is_not_a_firewall() -> None:
    """Nothing listens at all there (a dead process: rank-gone's business), not a rule."""
    gone = [connect(0, 1, p, "refused") for p in ("side", "backend")]
    assert network.detect(snapshot(probes=_replace(healthy(), gone))) is None


def test_mtu_blackhole_is_named() -> None:
    stalled = [stream(s, 2, None, "stalled") for s in (0, 1)]
    found = network.detect(snapshot(probes=_replace(healthy(), stalled)))
    assert found is not None and found.summary.startswith("MTU: rank 2 (node2")
    assert "ping -c2 -M do -s 1472 198.18.0.3" in found.hint


def test_slow_node_is_named_against_the_fastest_pair() -> None:
    slow = [stream(0, 2, 0.09), stream(1, 2, 0.1), stream(2, 0, 0.08), stream(2, 1, 0.1)]
    found = network.detect(snapshot(probes=_replace(healthy(), slow)))
    assert found is not None
    assert found.summary.startswith("slow link: rank 2 (node2, eth0 198.18.0.3) carries 0.08 Gb/s")
    assert "ethtool eth0" in found.hint


def test_one_slow_stream_alone_names_nothing() -> None:
    """A short stream on a busy host can read low once (recorded in the lab: 1.6 Gb/s among
    5 - 10); the same link low both ways, or every stream of a node, cannot by chance."""
    assert network.detect(snapshot(probes=_replace(healthy(), [stream(0, 2, 0.5)]))) is None
    half = [stream(0, 2, 0.09), stream(2, 0, 0.1), stream(1, 2, 0.09)]  # 2 -> 1 still fast
    found = network.detect(snapshot(probes=_replace(healthy(), half)))
    assert found is not None and found.ranks == (0, 2)  # the link slow both ways, not node 2
    assert "rank 0 (node0, eth0 198.18.0.1) <-> rank 2 (node2" in found.summary


def test_rates_within_noise_name_nothing() -> None:
    close = [stream(0, 2, 5.0), stream(1, 2, 4.0)]
    assert network.detect(snapshot(probes=_replace(healthy(), close))) is None


def test_link_down_wins_over_a_slow_stream_elsewhere() -> None:
    probes = _replace(healthy(), [connect(0, 2, p, "timeout") for p in ("side", "backend")]
                      + [stream(0, 1, 0.01)])
    found = network.detect(_silent(snapshot(probes=probes), 2))
    assert found is not None and found.summary.startswith("link down")


def test_culprit_needs_two_pairs_sharing_one_rank() -> None:
    assert network.culprit([(0, 2)]) is None
    assert network.culprit([(0, 2), (1, 2)]) == 2
    assert network.culprit([(0, 1), (2, 3)]) is None


def test_evidence_is_capped() -> None:
    world = 12
    probes = tuple(connect(s, 11, p, "timeout") for s in range(11) for p in ("side", "backend"))
    found = network.detect(snapshot(world, probes=probes))
    assert found is not None and found.ranks == (11,)
    assert len(found.evidence) == 1 + network.MAX_EVIDENCE + 1
    assert found.evidence[-1] == "(+14 more probe results)"


# ---- recorded in a 3-node lab (tests/watch/test_probe_lab.py's set-up; nodes 0, 1 probe) ----

RECORDED = Path(__file__).parent / "data" / "network_lab.json"


def recorded(case: str) -> Snapshot:
    data = json.loads(RECORDED.read_text())[case]
    states = {int(r): RankState.from_dict(s) for r, s in data["states"].items()}
    return Snapshot(data["world_size"], data["taken"], states,
                    probes=tuple(LinkProbe(**p) for p in data["probes"]))


@pytest.mark.parametrize(("case", "start", "ranks"), [
    ("link-down", "link down: rank 2 (", (2,)),
    ("firewall-reject", "firewall: rank 0 (", (0, 1)),  # only node 0 probed node 1's port
    ("rate", "slow link: rank 2 (", (2,)),
    ("mtu", "MTU: rank 0 (", (0, 1)),
])
def test_recorded_lab_probes_are_named(case: str, start: str, ranks: tuple[int, ...]) -> None:
    found = network.detect(recorded(case))
    assert found is not None and found.summary.startswith(start), found
    assert found.ranks == ranks


def test_recorded_healthy_lab_names_nothing() -> None:
    assert network.detect(recorded("healthy")) is None

"""A rank that hears the job no more judges itself: when (pure), what it says (pure), and
what it reads (edge, on loopback)."""

from __future__ import annotations

import socket
import time

from ddpnet.net.probe import CONNECTED, REFUSED, TIMEOUT
from ddpnet.watch import cutoff
from ddpnet.watch.probe import CONNECT, PORTS_KEY, SIDE, ProbeSink
from ddpnet.watch.state import CollectiveRecord, LinkProbe, RankState


def test_due_needs_both_silence_and_no_progress() -> None:
    assert not cutoff.due(100.0, heard=94.0, progressed=0.0, threshold_s=5.0)
    assert not cutoff.due(100.0, heard=0.0, progressed=94.0, threshold_s=5.0)
    assert cutoff.due(100.0, heard=93.0, progressed=93.0, threshold_s=5.0)
    # a long phase's allowance, sent by the hub in its last ack, holds it off
    assert not cutoff.due(100.0, heard=93.0, progressed=93.0, threshold_s=120.0)


def _probe(dst: int, outcome: str) -> LinkProbe:
    return LinkProbe(1, dst, outcome == CONNECTED, f"side port 4000: {outcome} after 2.0 s",
                     what=CONNECT, port=4000, purpose=SIDE, outcome=outcome)


def _facts(peers: tuple[LinkProbe, ...], link: str = "DOWN", route: str = "none",
           hub: str = TIMEOUT) -> cutoff.Facts:
    return cutoff.Facts(rank=1, host="n1", interface="eth0", address="198.18.0.2", link=link,
                        hub="198.18.0.1:25313",
                        hub_probe=LinkProbe(1, -1, hub == CONNECTED, f"hub port 25313: {hub}",
                                            outcome=hub),
                        route=route, peers=peers, heard_ago=8.0, heard_at=1_700_000_000.0,
                        stalled_for=9.0, doing="inside all_reduce seq 611",
                        judged_by="5 s (learned: floor 5 s)")


def test_reaching_nobody_is_cut_off_with_its_interface_route_and_last_word() -> None:
    found = cutoff.verdict(_facts((_probe(0, TIMEOUT), _probe(2, TIMEOUT))))
    assert found.kind == "network" and found.ranks == (1,) and found.hosts == ("n1",)
    assert found.summary.startswith("cut off: rank 1 (n1, eth0 198.18.0.2) reaches neither "
                                    "the watch hub at 198.18.0.1:25313 (timeout) nor any peer")
    assert "made no progress for 9 s (inside all_reduce seq 611); eth0 is DOWN" in found.summary
    assert "last heard from the job 8 s ago" in found.summary
    assert "interface eth0: DOWN" in found.evidence
    assert "judged by its threshold 5 s (learned: floor 5 s)" in found.evidence
    assert "route to the hub's address 198.18.0.1: none" in found.evidence
    assert any(line.startswith("peer rank 2 side port 4000: timeout") for line in found.evidence)
    assert "ip -br link show eth0" in found.hint and "ip route get 198.18.0.1" in found.hint


def test_an_up_link_without_a_route_names_the_route() -> None:
    found = cutoff.verdict(_facts((_probe(0, TIMEOUT),), link="UP", route="none"))
    assert "; route: none;" in found.summary


def test_peers_answering_name_the_hubs_node() -> None:
    found = cutoff.verdict(_facts((_probe(0, TIMEOUT), _probe(2, REFUSED)), link="UP",
                                  route="dev eth0 src 198.18.0.2"))
    assert "cannot reach the watch hub at 198.18.0.1:25313 (timeout) for 8 s while peer " \
           "rank(s) 2 answer" in found.summary
    assert "the hub's node (rank 0's, MASTER_ADDR) or its link is down" in found.summary
    assert "ping -c3 198.18.0.1" in found.hint


def test_doing_says_the_collective_or_the_phase() -> None:
    flying = RankState(1, 2, recent=(CollectiveRecord(seq=7, op="all_reduce"),))
    assert cutoff.doing(flying) == "inside all_reduce seq 7"
    assert cutoff.doing(RankState(1, 2, phase="data", step=3)) == "in phase 'data' at step 3"


def test_gather_reads_the_route_and_connects_to_the_hub_and_peers() -> None:
    """On loopback: the hub's port refuses (nothing listens), one peer's side port answers."""
    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        closed = spare.getsockname()[1]
    with ProbeSink("127.0.0.1") as side:
        peers = {0: RankState(0, 2, address="127.0.0.1", extra={PORTS_KEY: {SIDE: side.port}})}
        me = RankState(1, 2, host="h1", interface="lo", address="127.0.0.1", step=4)
        t0 = time.monotonic()
        facts = cutoff.gather(me, ("127.0.0.1", closed), peers, heard_ago=9.0,
                              heard_at=time.time() - 9, stalled_for=9.0)
    assert time.monotonic() - t0 < 2 * cutoff.CONNECT_S + 1
    assert facts.link == "UP" and facts.route.startswith("dev lo")
    assert facts.hub_probe is not None and facts.hub_probe.outcome == REFUSED
    assert [p.dst_rank for p in facts.peers if cutoff.answered(p)] == [0]
    assert "refuses connections: the hub process is gone" in cutoff.verdict(facts).summary


def test_a_hub_that_accepts_but_acknowledges_nothing_is_named_stuck() -> None:
    found = cutoff.verdict(_facts((_probe(0, CONNECTED),), link="UP", hub=CONNECTED))
    assert "accepts connections but acknowledged nothing for 8 s" in found.summary
    assert "ddpnet diagnose --dumps" in found.hint


def test_a_hub_that_still_accepts_gets_more_patience_first() -> None:
    busy = _facts((), link="UP", hub=CONNECTED)  # heard 8 s ago
    assert cutoff.patient(busy, threshold_s=5.0)  # 8 s < 3 x 7 s: only busy, perhaps
    assert not cutoff.patient(busy, threshold_s=0.5)  # 8 s >= 3 x 2.5 s: stuck
    assert not cutoff.patient(_facts(()), threshold_s=5.0)  # unreachable: no waiting


def test_the_hub_names_its_own_node_when_its_interface_is_down() -> None:
    from ddpnet.watch.state import LINK_DOWN, Diagnosis, Snapshot

    states = {0: RankState(0, 3, host="n0", address="198.18.0.1"),
              1: RankState(1, 3, host="n1", address="198.18.0.2"),
              2: RankState(2, 3, host="n2", address="198.18.0.3")}
    snap = Snapshot(3, 0.0, states)
    seen = Diagnosis("network", "link down: rank 1 (n1, ...); rank 2 (n2, ...) sent no heartbeat",
                     (1, 2), ("n1", "n2"), ("rank 0 -> rank 1 (n1): side port: timeout",),
                     sub_kind=LINK_DOWN)
    found = cutoff.hub_node_down(seen, snap, "eth0", "DOWN", "198.18.0.1")
    assert found.summary.startswith("link down: the hub's node n0 (rank(s) 0, eth0 198.18.0.1) "
                                    "lost its link: eth0 is DOWN there, so rank(s) 1, 2")
    assert found.ranks == (0,) and found.hosts == ("n0",) and found.sub_kind == LINK_DOWN
    assert found.evidence[0] == "interface eth0 on n0: DOWN" and "ip -br link show eth0" \
        in found.hint
    # its link up: the ranks it cannot reach are the ones cut off, as analysed
    assert cutoff.hub_node_down(seen, snap, "eth0", "UP", "198.18.0.1") == seen


def test_a_long_threshold_is_looked_past_at_early_s_only() -> None:
    """The warm-up's 60 s (or a phase's allowance): look after EARLY_S; a short one: never
    early (its own due comes first)."""
    now = 1000.0
    quiet = now - cutoff.EARLY_S - cutoff.MARGIN_S
    assert cutoff.early(now, heard=quiet, progressed=quiet, threshold_s=60.0)
    assert not cutoff.early(now, heard=quiet + 1, progressed=quiet, threshold_s=60.0)
    assert not cutoff.early(now, heard=quiet, progressed=quiet + 1, threshold_s=60.0)
    assert not cutoff.early(now, heard=0.0, progressed=0.0, threshold_s=5.0)


def test_only_reaching_nothing_is_conclusive_before_the_threshold() -> None:
    gone = (_probe(0, TIMEOUT), _probe(2, TIMEOUT))
    assert cutoff.conclusive(_facts(gone, link="UP", route="dev eth0"))
    assert not cutoff.conclusive(_facts((_probe(0, TIMEOUT), _probe(2, CONNECTED)), link="UP",
                                        route="dev eth0"))
    assert not cutoff.conclusive(_facts((_probe(0, REFUSED),), link="UP", route="dev eth0"))
    assert not cutoff.conclusive(_facts(gone, hub=CONNECTED))
    # no peer known yet (the hub sends them once every rank published): only its own link
    # or route can say so
    assert not cutoff.conclusive(_facts((), link="UP", route="dev eth0"))
    assert cutoff.conclusive(_facts((), link="DOWN", route="dev eth0"))
    assert cutoff.conclusive(_facts((), link="UP", route="none"))

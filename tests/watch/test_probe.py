"""watch.probe: whom a rank probes (pure), and real probes on 127.0.0.1: a listening peer,
a closed port, a stream into a ProbeSink, the fan-out bound. The dropped, down, MTU and
rate-limited cases need real links: tests/watch/test_probe_lab.py."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator

import pytest

from ddpnet.net.ports import free_port, listen_socket
from ddpnet.net.probe import Attempt
from ddpnet.net.sockopt import TcpInfo
from ddpnet.watch import probe
from ddpnet.watch.state import RankState

LO = "127.0.0.1"


def peer(rank: int, ports: dict[str, int], world: int = 2, address: str = LO) -> RankState:
    return RankState(rank=rank, world_size=world, host=f"n{rank}", address=address,
                     extra={probe.PORTS_KEY: ports})


@pytest.fixture
def side() -> Iterator[socket.socket]:
    sock = listen_socket(LO, 0)
    yield sock
    sock.close()


# ---- pure -----------------------------------------------------------------------------------


def test_small_groups_probe_every_peer() -> None:
    assert probe.peers_to_probe(1, range(4)) == (0, 2, 3)
    assert probe.peers_to_probe(0, [0]) == ()
    assert probe.peers_to_probe(5, range(4)) == ()  # not in the stuck group


def test_large_groups_probe_ring_neighbours_only() -> None:
    world = range(1000)
    assert probe.peers_to_probe(0, world) == (1, 999)
    assert probe.peers_to_probe(500, world) == (499, 501)
    assert probe.peers_to_probe(10, [3, 10, 40, 7], limit=2) == (7, 40)
    assert probe.peers_to_probe(0, range(3), limit=2) == (1, 2)


def test_an_ordered_group_gives_the_same_peers_without_a_sort_per_rank() -> None:
    """The hub passes one sorted roster for every rank (a sort per rank was O(N^2 log N) at
    the moment 4,096 ranks were introduced)."""
    group = [3, 7, 10, 40, 41, 99]
    for me in (*group, 5, 100):
        assert probe.peers_to_probe(me, group, limit=2, ordered=True) == \
            probe.peers_to_probe(me, list(reversed(group)), limit=2)
    assert probe.peers_to_probe(4095, range(4096), ordered=True) == (0, 4094)
    assert probe.peers_to_probe(4096, range(4096), ordered=True) == ()


def test_ports_come_from_the_state_and_the_override_wins() -> None:
    state = peer(1, {"side": 100, "backend": "200", "sink": 0, "odd": "x"})
    assert probe.ports_of(state) == {"side": 100, "backend": 200}
    assert probe.ports_of(state, {"backend": 300}) == {"side": 100, "backend": 300}
    assert probe.ports_of(RankState(1, 2, extra={"ports": "junk"})) == {}


def test_plan_skips_peers_without_state_address_or_port() -> None:
    states = {0: None, 1: peer(1, {"side": 1}), 2: peer(2, {}), 3: peer(3, {"side": 1}, address="")}
    assert [t.rank for t in probe.plan_targets(states, [0, 1, 2, 3])] == [1]
    assert [t.rank for t in probe.plan_targets(states, [1, 2], {2: {"side": 5}})] == [1, 2]


def test_connect_result_classifies_the_last_attempt() -> None:
    t = probe.Target(1, "198.18.0.2", {"backend": 29602})
    got = probe.connect_result(0, t, "backend", [Attempt("refused", "Connection refused"),
                                                 Attempt("timeout", "timed out")], 2.0)
    assert (got.reachable, got.outcome, got.port, got.purpose) == (False, "timeout", 29602,
                                                                    "backend")
    assert got.detail == "backend port 29602: timeout after 2.0 s, 2 attempt(s)"
    assert probe.connect_result(0, t, "backend", [Attempt("reset", "x")], 0.1).reachable
    assert probe.connect_result(0, t, "backend", [], 0.0).outcome == "timeout"


def test_stream_result_tells_a_blackhole_from_a_slow_link() -> None:
    t = probe.Target(2, "198.18.0.3", {"sink": 9})
    info = TcpInfo(snd_mss=8948, pmtu=9000, rtt_us=100)
    stalled = probe.stream_result(0, t, 1 << 20, (1 << 20) - 1000, 2.0, info)
    assert (stalled.reachable, stalled.outcome, stalled.rate_gbps) == (False, "stalled", None)
    assert stalled.detail.startswith("mtu: connected to sink port 9, but only 1000 of 1048576")
    assert "path MTU 9000, MSS 8948" in stalled.detail
    slow = probe.stream_result(0, t, 10_000_000, 7_500_000, 2.0, None)
    assert slow.outcome == "streamed" and slow.rate_gbps == pytest.approx(0.01)
    assert slow.rtt_s is None  # no TCP_INFO: no round trip
    fast = probe.stream_result(0, t, 10_000_000, 0, 2.0, info)
    assert fast.rtt_s == pytest.approx(100e-6)  # the kernel's smoothed RTT, for the metrics
    assert "7500000 still unacked" in slow.detail


# ---- real sockets on loopback ---------------------------------------------------------------


def test_listening_closed_and_sink_ports_on_loopback(side: socket.socket) -> None:
    closed = free_port(LO)
    with probe.ProbeSink(LO) as sink:
        states = {0: peer(0, {}), 1: peer(1, {"side": side.getsockname()[1], "backend": closed,
                                               "sink": sink.port})}
        found = probe.probe_pairs(states, 0, timeout=0.5)
    by = {(p.what, p.purpose): p for p in found}
    assert {p.dst_rank for p in found} == {1} and len(found) == 4
    assert by["connect", "side"].reachable and by["connect", "side"].outcome == "connected"
    assert by["connect", "backend"].outcome == "refused" and not by["connect", "backend"].reachable
    assert by["connect", "sink"].reachable
    stream = by["stream", "sink"]
    assert stream.reachable and stream.outcome == "streamed"
    assert stream.rate_gbps is not None and stream.rate_gbps > 0.05
    assert re.match(r"stream: \d+ bytes acked in 0\.[2-9]\d* s = ", stream.detail), stream.detail
    assert "path MTU" in stream.detail


def test_stream_to_a_closed_sink_is_refused() -> None:
    states = {0: peer(0, {}), 1: peer(1, {"sink": free_port(LO)})}
    found = probe.probe_pairs(states, 0, timeout=0.3)
    stream = next(p for p in found if p.what == "stream")
    assert (stream.reachable, stream.outcome) == (False, "refused")


def test_no_stream_when_asked_and_nothing_without_ports(side: socket.socket) -> None:
    states = {0: peer(0, {}), 1: peer(1, {"side": side.getsockname()[1]}), 2: peer(2, {})}
    found = probe.probe_pairs(states, 0, timeout=0.5, stream_bytes=0)
    assert [(p.dst_rank, p.what) for p in found] == [(1, "connect")]
    assert probe.probe_pairs({0: peer(0, {})}, 0, timeout=0.5) == ()
    # the prober's own state may be missing: it still probes the peers
    assert len(probe.probe_pairs({1: states[1]}, 0, timeout=0.5, stream_bytes=0)) == 1
    assert probe.probe_pairs(states, 0, timeout=0.5, group=[1, 2]) == ()  # 0 not in it


def test_fanout_bounds_the_probes_in_flight() -> None:
    """Four refused ports, each retried for the whole 0.4 s timeout, two at a time: >= 0.8 s."""
    states = {r: peer(r, {"backend": free_port(LO)}, world=5) for r in range(5)}
    start = time.monotonic()
    found = probe.probe_pairs(states, 0, timeout=0.4, fanout=2)
    assert len(found) == 4 and all(p.outcome == "refused" for p in found)
    assert time.monotonic() - start >= 0.75


def test_sink_closes_connections_beyond_its_bound() -> None:
    with probe.ProbeSink(LO, max_conns=1, idle=5) as sink:
        first = socket.create_connection((LO, sink.port), timeout=2)
        time.sleep(0.3)  # accepted and read by the one slot
        second = socket.create_connection((LO, sink.port), timeout=2)
        second.settimeout(2)
        assert second.recv(1) == b""  # closed at once: no slot
        first.sendall(b"x" * 1000)
        first.close()
        second.close()


def test_listening_ports_are_this_process_own(side: socket.socket) -> None:
    port = side.getsockname()[1]
    with probe.ProbeSink(LO) as sink:
        assert {port, sink.port} <= set(probe.listening_ports())
        assert port not in probe.listening_ports(exclude=[port])
    assert sink.port not in probe.listening_ports()

"""Reachability and bandwidth analysis (pure), the schedule, and real sockets on loopback."""

from __future__ import annotations

import errno
import itertools
import socket
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ddpnet.check import mesh, tournament

LABELS = [f"n{i} (10.0.0.{i + 1})" for i in range(4)]


@given(st.integers(min_value=1, max_value=40))
def test_schedule_plays_every_pair_once_and_nobody_twice_a_round(n: int) -> None:
    rounds = tournament.schedule(n)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n) if n > 1 else len(rounds) <= 1
    seen = [p for r in rounds for p in r]
    assert sorted(seen) == sorted(itertools.combinations(range(n), 2))
    for r in rounds:
        players = [x for p in r for x in p]
        assert len(players) == len(set(players))


def test_classify_errors() -> None:
    assert mesh.classify_error(TimeoutError()) == mesh.FILTERED
    assert mesh.classify_error(OSError(errno.ECONNREFUSED, "x")) == mesh.REFUSED
    assert mesh.classify_error(OSError(errno.EHOSTUNREACH, "x")) == mesh.NO_ROUTE
    assert mesh.classify_error(OSError(errno.ENETUNREACH, "x")) == mesh.NO_ROUTE


def _matrix(bad: dict[tuple[int, int], str]) -> list[list[str]]:
    return [[mesh.SELF if i == j else bad.get((i, j), mesh.OK) for j in range(4)]
            for i in range(4)]


def test_mesh_healthy_has_no_cause() -> None:
    assert mesh.analyze(_matrix({}), LABELS, [1, 2, 3, 4], 29500) == []


def test_mesh_node_nobody_reaches_is_peer_port_blocked() -> None:
    m = _matrix({(i, 2): mesh.FILTERED for i in (0, 1, 3)})
    (cause,) = mesh.analyze(m, LABELS, [40001, 40002, 40003, 40004], 29500)
    assert cause.id == "peer-port-blocked" and cause.ranks == (2,)
    assert cause.hosts == (LABELS[2],) and "40003" in cause.detail and "29500" in cause.detail


def test_mesh_single_pair_is_named() -> None:
    (cause,) = mesh.analyze(_matrix({(0, 3): mesh.REFUSED}), LABELS, [1, 2, 3, 4], 29500)
    assert cause.ranks == (0, 3) and "0->3 refused" in cause.detail


def _bw(slow: dict[tuple[int, int], float]) -> list[list[float | None]]:
    return [[None if i == j else slow.get((i, j), 0.94) for j in range(4)] for i in range(4)]


def test_bandwidth_uniform_has_no_cause() -> None:
    assert tournament.analyze(_bw({}), LABELS) == []


def test_bandwidth_slow_sender_is_slow_node() -> None:
    (cause,) = tournament.analyze(_bw({(3, j): 0.095 for j in range(3)}), LABELS)
    assert cause.id == "slow-node" and cause.ranks == (3,) and "sending" in cause.detail


def test_bandwidth_slow_both_ways_is_slow_node() -> None:
    slow = {(3, j): 0.09 for j in range(3)} | {(j, 3): 0.09 for j in range(3)}
    (cause,) = tournament.analyze(_bw(slow), LABELS)
    assert cause.id == "slow-node" and "sending and receiving" in cause.detail


def test_bandwidth_one_slow_link_is_slow_link() -> None:
    (cause,) = tournament.analyze(_bw({(1, 2): 0.3}), LABELS)
    assert cause.id == "slow-link" and cause.ranks == (1, 2) and "1->2 0.30" in cause.detail


def test_header_round_trip_and_rejects_garbage() -> None:
    assert tournament.parse_header(tournament.make_header(7, 3)) == (7, 3)
    with pytest.raises(ValueError):
        tournament.parse_header(b"x" * tournament.HEADER)


def test_listener_answers_probes_and_measures_a_stream() -> None:
    lst = mesh.Listener("127.0.0.1")
    try:
        assert mesh.probe("127.0.0.1", lst.port, 2.0).status == mesh.OK
        sent, _ = tournament.send_stream("127.0.0.1", lst.port, 0, 5, seconds=0.2, timeout=5)
        deadline = time.monotonic() + 5
        while (0, 5) not in lst.received and time.monotonic() < deadline:
            time.sleep(0.01)
        nbytes, secs = lst.received[(0, 5)]
        assert nbytes == sent and secs > 0
        # drained: the sender's seconds end when the listener has read every byte
        sent, took = tournament.send_stream("127.0.0.1", lst.port, 1, 5, seconds=0.1,
                                            timeout=5, drain=True)
        assert lst.received[(1, 5)][0] == sent and took >= lst.received[(1, 5)][1]
        # a screening stream stops at its byte budget long before its time is up
        sent, took = tournament.send_stream("127.0.0.1", lst.port, 2, 5, seconds=30,
                                            timeout=5, drain=True, chunk=1 << 16,
                                            most=1 << 20)
        assert sent == 1 << 20 and took < 5 and lst.received[(2, 5)][0] == sent
    finally:
        lst.close()
    # nothing listens there any more
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert mesh.probe("127.0.0.1", port, 2.0) == (mesh.REFUSED, None, None)  # nothing timed


def test_a_listener_tells_each_probe_where_it_arrived_from() -> None:
    assert mesh.parse_hello(mesh.hello(12)) == 12
    assert mesh.parse_hello(mesh.PROBE_MAGIC) is None and mesh.hello(None) == mesh.PROBE_MAGIC
    assert mesh.parse_hello(b"DDPNETPROBE x\n") is None
    assert mesh.unmapped("::ffff:198.18.0.254") == "198.18.0.254"
    assert mesh.parse_seen(mesh.seen_reply("198.18.0.254")) == "198.18.0.254"
    assert mesh.parse_seen(b"DDPNETSEEN not-an-address\n") is None
    assert mesh.parse_seen(b"HTTP/1.1 400\r\n") is None
    lst = mesh.Listener("127.0.0.1")
    try:
        assert mesh.probe("127.0.0.1", lst.port, 2.0)[:2] == (mesh.OK, None)  # no rank: none
        assert mesh.probe("127.0.0.1", lst.port, 2.0, rank=5)[:2] == (mesh.OK, "127.0.0.1")
        # a row leaves out peers that saw the prober at the address it advertises
        row = mesh.probe_row(2, [("127.0.0.1", lst.port), None, ("127.0.0.1", 1)], timeout=2.0)
        assert row[:2] == ([mesh.OK, mesh.UNKNOWN, mesh.SELF], {})
        # the round trip to the peer it reached, timed by the kernel: loopback, well under 50 ms
        assert list(row.rtt) == [0] and 0 < row.rtt[0] < 50, row.rtt
        row = mesh.probe_row(2, [("127.0.0.1", lst.port), None, ("127.0.0.9", 1)], timeout=2.0)
        assert row.seen == {0: "127.0.0.1"}
        assert mesh.read_published(mesh.published(row), 3) == row
    finally:
        lst.close()


def test_a_listener_that_accepts_but_never_answers_leaves_the_address_unknown() -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        start = time.monotonic()
        assert mesh.probe("127.0.0.1", srv.getsockname()[1], 0.5, rank=1)[:2] == (mesh.OK, None)
        assert time.monotonic() - start < 10  # bounded by its 0.5 s timeout, not a hang


@pytest.mark.parametrize("value", [None, [], {"row": "ok"}, {"row": ["ok"]},
                                   {"row": ["self", 3]}, {"row": ["self", "ok"], "seen": [1]},
                                   {"row": ["self", "ok"], "seen": {"x": "1.2.3.4", "9": "a",
                                                                    "1": 5}},
                                   {"row": ["self", "ok"], "rtt": {"1": "x", "9": 1.0,
                                                                   "x": 1.0}},
                                   {"row": ["self", "ok"], "rtt": {"1": float("nan")}},
                                   {"row": ["self", "ok"], "rtt": {"1": -1, "0": True}},
                                   {"row": ["self", "ok"], "rtt": [1.0]}])
def test_a_malformed_published_row_reads_as_unknown(value: object) -> None:
    row = mesh.read_published(value, 2)
    assert row.seen == {} and row.rtt == {} and len(row.statuses) == 2
    assert row.statuses in (["?", "?"], ["self", "ok"])


def test_a_slow_node_among_three_is_named_though_its_links_are_the_median() -> None:
    # 3 nodes, node 2 at 100 Mbit/s: 4 of the 6 links touch it, so the median is its speed
    gbps: list[list[float | None]] = [[None, 0.94, 0.095], [0.93, None, 0.094],
                                      [0.096, 0.095, None]]
    (cause,) = tournament.analyze(gbps, LABELS[:3])
    assert cause.id == "slow-node" and cause.ranks == (2,), cause
    assert "sending and receiving" in cause.detail and "run at 0.94 Gb/s" in cause.detail
    # and a uniform (or mildly uneven) 3-node matrix stays quiet
    even: list[list[float | None]] = [[None, 0.94, 0.7], [0.9, None, 0.65], [0.8, 0.7, None]]
    assert tournament.analyze(even, LABELS[:3]) == []


# ----------------------------------------------------------------------------- sampled mesh

@given(st.integers(min_value=2, max_value=5000), st.integers(min_value=0, max_value=2**32))
def test_a_sampled_mesh_probes_log_n_peers_and_is_probed_by_as_many(world: int,
                                                                    seed: int) -> None:
    offsets = mesh.sample_offsets(world, seed)
    assert offsets == mesh.sample_offsets(world, seed)  # rank 0 and the ranks agree
    assert 1 in offsets and all(0 < d < world for d in offsets)
    assert len(offsets) <= world.bit_length() + mesh.RANDOM_OFFSETS
    for me in (0, world // 2, world - 1):
        targets = mesh.sample_targets(me, world, offsets)
        assert me not in targets and (me + 1) % world in targets
    # each rank is probed from as many ranks as it probes (d and -d are one offset set)
    into = [0] * world
    for i in range(min(world, 300)):
        for j in mesh.sample_targets(i, world, offsets):
            into[j] += 1
    if world <= 300:
        assert set(into) == {len(offsets)}


def test_the_sampled_matrix_reads_as_the_dense_one_it_holds() -> None:
    dense = [["self", "ok", "filtered", "?"], ["ok", "self", "filtered", "ok"],
             ["ok", "ok", "self", "ok"], ["?", "ok", "filtered", "self"]]
    rows = {i: {j: s for j, s in enumerate(row) if s not in ("self", "?")}
            for i, row in enumerate(dense)}
    sampled = mesh.Sampled(4, rows)
    assert [list(r) for r in sampled] == dense
    assert sampled[1][-1] == "ok" and sampled[-1][0] == "?"
    assert mesh.known_cells(sampled) == mesh.known_cells(dense)
    assert mesh.analyze(sampled, LABELS, [1, 2, 3, 4], 29500) == \
        mesh.analyze(dense, LABELS, [1, 2, 3, 4], 29500)


def test_a_filtered_node_among_1024_is_named_from_its_sampled_probes_alone() -> None:
    world, bad = 1024, 700
    offsets = mesh.sample_offsets(world, 7)
    rows = {i: {j: "filtered" if j == bad else "ok"
                for j in mesh.sample_targets(i, world, offsets)} for i in range(world)}
    labels = [f"n{i}" for i in range(world)]
    causes = mesh.analyze(mesh.Sampled(world, rows), labels, list(range(world)), 29500)
    assert [(c.id, c.hosts) for c in causes] == [("peer-port-blocked", ("n700",))]


def test_a_sampled_row_is_published_as_its_probed_cells_only() -> None:
    row = mesh.Row(["ok"] * 4096, {}, {1: 0.05, 2: 0.06, 4: 40.1})
    row.statuses[0] = "self"
    value = mesh.published(row, [1, 2, 4])
    assert value == {"cells": {"1": "ok", "2": "ok", "4": "ok"}, "seen": {},
                     "rtt": {"1": 0.05, "2": 0.06, "4": 40.1}}
    assert mesh.read_rtt(value, 4096) == {1: 0.05, 2: 0.06, 4: 40.1}
    assert mesh.read_cells(value, 4096) == {1: "ok", 2: "ok", 4: "ok"}
    assert mesh.read_cells({"cells": {"9999": "ok", "x": "ok", "3": 1}}, 4096) == {}


def test_a_node_slow_both_ways_on_the_ring_is_named_and_one_slow_link_is_not() -> None:
    labels = [f"h{i}" for i in range(300)]
    links = {(i, (i + 1) % 300): 9.0 + (i % 7) * 0.1 for i in range(300)}
    links[(199, 200)] = links[(200, 201)] = 0.01  # host 200: 10 Mbit/s each way
    links[(50, 51)] = 0.5  # one slow link: a busy peer looks the same
    [cause] = tournament.ring_slow_nodes(links, labels)
    assert cause.id == "slow-node" and cause.ranks == (200,) and cause.hosts == ("h200",)
    assert "0.010 Gb/s to rank 201" in cause.detail and "from rank 199" in cause.detail
    assert tournament.ring_slow_nodes({(0, 1): 1.0, (1, 0): 0.1}, labels[:2]) == []


def test_a_host_sample_probes_other_hosts_only_and_every_rank_both_ways() -> None:
    """8 ranks a host: no rank probes its own host (loopback says nothing of the network),
    every rank probes and is probed from another host, every host offset is probed once,
    and the connects are a fraction of the rank sample's."""
    from collections import Counter

    world, per = 4096, 8
    hosts = [f"198.18.{(r // per) // 256}.{(r // per) % 256}" for r in range(world)]
    targets = mesh.host_sample(hosts, 7)
    assert targets is not None and set(targets) == set(range(world))
    assert all(hosts[t] != hosts[r] for r, ts in targets.items() for t in ts)
    probed = Counter(t for ts in targets.values() for t in ts)
    assert all(targets[r] for r in range(world)) and set(probed) == set(range(world))
    offsets = mesh.sample_offsets(world // per, 7)
    for h in (0, 300, 511):  # the host's ranks together probe every host offset
        reached = {t // per for r in range(h * per, h * per + per) for t in targets[r]}
        assert reached == {(h + d) % (world // per) for d in offsets}
    connects = sum(map(len, targets.values()))
    ranks_sample = world * len(mesh.sample_offsets(world, 7))
    assert connects < ranks_sample / 5, (connects, ranks_sample)
    assert max(probed.values()) <= 1 + -(-len(offsets) // per) + 1


def test_a_host_sample_needs_hosts_of_several_ranks_and_more_than_one_host() -> None:
    assert mesh.host_sample([f"10.0.0.{r}" for r in range(100)], 1) is None
    assert mesh.host_sample(["10.0.0.1"] * 100, 1) is None
    # two hosts of unequal sizes: each rank probes the other host, wrapping its local index
    hosts = ["10.0.0.1"] * 70 + ["10.0.0.2"] * 30
    targets = mesh.host_sample(hosts, 1)
    assert targets is not None and targets[0] == [70] and targets[69] == [70 + 69 % 30]
    assert targets[99] == [29] and all(len(t) == 1 for t in targets.values())
    # a rank that published no address is neither probed nor probes
    gaps = mesh.host_sample(["10.0.0.1", None, "10.0.0.1", "10.0.0.2", "10.0.0.2"], 1)
    assert gaps is not None and 1 not in gaps and all(1 not in t for t in gaps.values())


def test_the_ranks_of_one_host_nobody_reaches_are_one_cause_naming_them_all() -> None:
    """A host of several ranks behind one firewall: one cause with its ranks and ports (one
    per rank made hundreds of causes at scale); a lone rank keeps the singular text."""
    labels = ["h0 (10.0.0.0)", "h1 (10.0.0.1)", "h2 (10.0.0.2)", "h2 (10.0.0.2)"]
    m = [["self", "ok", "filtered", "filtered"], ["ok", "self", "filtered", "filtered"],
         ["ok", "ok", "self", "?"], ["ok", "ok", "?", "self"]]
    ports = [None, None, 40002, 40003]
    (cause,) = mesh.analyze(m, labels, ports, 29500, "10.0.0.0/24")
    assert cause.id == "peer-port-blocked" and cause.ranks == (2, 3)
    assert cause.hosts == ("h2 (10.0.0.2)",)
    assert "to ranks 2-3 on h2 (10.0.0.2) at their ephemeral ports 40002, 40003" in cause.detail
    assert cause.evidence[0] == "every connect into ranks 2-3's ephemeral ports 40002, 40003: " \
                                "filtered"
    m[0][3] = m[1][3] = "ok"
    (alone,) = mesh.analyze(m, labels, ports, 29500, "10.0.0.0/24")
    assert alone.ranks == (2,) and "to rank 2 on h2 (10.0.0.2) at its ephemeral port 40002 " \
                                   "(filtered)" in alone.detail


def test_the_rounds_line_counts_in_the_singular_for_two_ranks() -> None:
    assert tournament.rounds_line(2, 2.0) == "bandwidth: 1 round x 2 s"
    assert tournament.rounds_line(3, 0.5) == "bandwidth: 3 rounds x 0.5 s"  # padded to 4
    assert tournament.rounds_line(4, 1.0) == "bandwidth: 3 rounds x 1 s"

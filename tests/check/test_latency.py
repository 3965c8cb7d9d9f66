"""high-latency (``check.latency``, pure): which round trips are high, and what they mean for
bandwidth against the hosts' TCP windows. Numbers as the 4-node 1 Gbit/s lab measured them:
0.02-0.1 ms between healthy nodes, 40.1-40.5 ms through a node with ``delay 40ms``, whose
links then carried 0.44 Gb/s against 0.93 elsewhere (tcp_wmem max 4 MiB)."""

from __future__ import annotations

import pytest

from ddpnet.check import latency
from ddpnet.check.latency import Window

ADDRESSES = [f"198.18.0.{i + 1}" for i in range(4)]
LABELS = [f"ck-n{i} (198.18.0.{i + 1})" for i in range(4)]
#: a Linux default: tcp_rmem max 6 MiB (this VM's kernel: 32 MiB), tcp_wmem max 4 MiB
DEFAULT = {"sysctl": {"net.ipv4.tcp_rmem": "4096 131072 33554432",
                      "net.ipv4.tcp_wmem": "4096 16384 4194304",
                      "net.core.rmem_max": "4194304", "net.core.wmem_max": "4194304"}}
#: after `ddpnet tune --profile 10g`
TUNED = {"sysctl": {"net.ipv4.tcp_rmem": "4096 131072 67108864",
                    "net.ipv4.tcp_wmem": "4096 65536 67108864",
                    "net.core.rmem_max": "67108864", "net.core.wmem_max": "67108864"}}
WHERE = latency.Where(LABELS, ADDRESSES, ["eth0"] * 4, "198.18.0.0/24")

HEALTHY = {(0, 1): 0.05, (1, 0): 0.04, (0, 2): 0.06, (2, 0): 0.1, (0, 3): 0.03, (3, 0): 0.05,
           (1, 2): 0.07, (2, 1): 0.02, (1, 3): 0.06, (3, 1): 0.09, (2, 3): 0.05, (3, 2): 0.08}


def _delayed(*nodes: int, ms: float = 40.3) -> dict[tuple[int, int], float]:
    """The healthy round trips with ``ms`` more on every pair through each of ``nodes``."""
    return {(i, j): v + ms * ((i in nodes) + (j in nodes)) for (i, j), v in HEALTHY.items()}


def _rates(slow: dict[int, float], fast: float = 0.93) -> dict[tuple[int, int], float]:
    """Every link at ``fast`` Gb/s but those through a node of ``slow`` (at its rate)."""
    return {(i, j): min([fast, *(v for r, v in slow.items() if r in (i, j))])
            for i in range(4) for j in range(4) if i != j}


def test_a_delayed_node_is_named_against_the_others_nearest_peer() -> None:
    found = latency.find(_delayed(2), ADDRESSES)
    assert found is not None and [n.rank for n in found.nodes] == [2] and found.links == ()
    assert found.baseline_ms == pytest.approx(0.04, abs=0.02)
    assert sorted(j for j, _ in found.nodes[0].pairs) == [0, 1, 3]
    # the faster direction of each pair
    assert all(40.3 < ms < 40.5 for _, ms in found.nodes[0].pairs)
    assert found.explained() == {(2, j) for j in (0, 1, 3)} | {(j, 2) for j in (0, 1, 3)}


def test_two_delayed_nodes_of_four_do_not_hide_each_other() -> None:
    found = latency.find(_delayed(2, 3), ADDRESSES)
    assert found is not None and [n.rank for n in found.nodes] == [2, 3]


@pytest.mark.parametrize("rtt", [
    HEALTHY,
    # a loaded host: one probe queued behind a stream, the other direction not
    {**HEALTHY, (0, 2): 12.0},
    # three racks, 0.3 ms apart: below the 2 ms floor
    {p: v + 0.3 * (p[0] // 2 != p[1] // 2) for p, v in HEALTHY.items()},
])
def test_healthy_round_trips_name_nothing(rtt: dict[tuple[int, int], float]) -> None:
    assert latency.find(rtt, ADDRESSES) is None


def test_two_sites_name_the_links_between_them_not_a_node() -> None:
    rtt = {p: v + 10.0 * (p[0] // 2 != p[1] // 2) for p, v in HEALTHY.items()}
    found = latency.find(rtt, ADDRESSES)
    assert found is not None and found.nodes == ()
    assert [(i, j) for i, j, _ in found.links] == [(0, 2), (0, 3), (1, 2), (1, 3)]


def test_a_pair_timed_one_way_only_is_not_judged() -> None:
    # a sampled mesh probes most pairs one way: one probe queued behind a stream would do
    one_way = {p: v for p, v in _delayed(2).items() if p[0] < p[1]}
    assert latency.find(one_way, ADDRESSES) is None


def test_a_rate_limited_node_whose_queue_slowed_the_probes_stays_slow_node() -> None:
    # node 3 at 100 Mbit/s, its probes met a ring stream in its 50 ms tbf queue both ways:
    # 0.09 Gb/s is far below the 0.42 Gb/s a 2 MiB window allows at 40 ms, so the round
    # trip does not explain its links
    found = latency.find(_delayed(3), ADDRESSES)
    assert found is not None and [n.rank for n in found.nodes] == [3]
    windows = {r: Window.of(DEFAULT) for r in range(4)}
    assert latency.consistent(found, _rates({3: 0.09}), windows) is None
    # the delayed node's 0.44 Gb/s is what the window allows: kept
    delayed = latency.find(_delayed(2), ADDRESSES)
    assert latency.consistent(delayed, _rates({2: 0.44}), windows) == delayed
    # the window unread, or the links unmeasured: nothing to tell them apart, kept
    assert latency.consistent(found, _rates({3: 0.09}), {}) == found
    assert latency.consistent(found, {}, windows) == found
    assert latency.consistent(None, {}, windows) is None


def test_two_hosts_or_one_host_are_not_judged() -> None:
    assert latency.find({(0, 1): 40.0, (1, 0): 40.0}, ADDRESSES[:2]) is None
    # ranks of one host talk over loopback: no round trip of a network to judge
    assert latency.find(_delayed(2), ["127.0.0.1"] * 4) is None
    assert latency.find(_delayed(2), ["10.0.0.5"] * 4) is None


def test_windows_are_read_from_the_doctors_sysctls() -> None:
    w = Window.of(DEFAULT)
    assert (w.tcp_rmem, w.tcp_wmem, w.rmem_max, w.wmem_max) == (
        33554432, 4194304, 4194304, 4194304)
    # a host-wide key unreadable in a namespace; a garbled value
    w = Window.of({"sysctl": {"net.ipv4.tcp_rmem": "4096 131072 6291456",
                              "net.core.rmem_max": None, "net.ipv4.tcp_wmem": "x"}})
    assert (w.tcp_rmem, w.tcp_wmem, w.rmem_max) == (6291456, None, None)
    assert Window.of({}) == Window() and "unread" in Window().text()
    # what a flow keeps in flight: half the smaller of sender wmem and receiver rmem
    assert latency.in_flight(Window.of(DEFAULT), Window.of(DEFAULT)) == 2097152
    assert latency.in_flight(Window(), Window()) is None


def test_the_labs_delayed_node_is_window_limited_and_fails_with_tunes_fix() -> None:
    found = latency.find(_delayed(2), ADDRESSES)
    assert found is not None
    windows = {r: Window.of(DEFAULT) for r in range(4)}
    (cause,) = latency.causes(found, _rates({2: 0.44}), windows, WHERE, "bandwidth")
    assert cause.id == "high-latency" and cause.ranks == (2,) and cause.severity == "fail"
    assert cause.hosts == (LABELS[2],) and cause.stage == "bandwidth"
    assert "40.3" in cause.detail and "0.44" in cause.detail and "0.93" in cause.detail
    # 0.93 Gb/s x 40.4 ms = 4.7 MB, against 2 MiB in flight: the window caps the flow
    t = latency.throughput([(2, j, m) for j, m in found.nodes[0].pairs], _rates({2: 0.44}),
                           found.explained(), windows)
    assert t.bdp_bytes is not None and 4.6e6 < t.bdp_bytes < 4.8e6
    assert t.window_bytes == 2097152 and t.window_limited and t.short and t.explained
    # 2 MiB per 40.4 ms: 0.42 Gb/s, what the delayed node's links carry
    assert t.allowed_gbps is not None and 0.40 < t.allowed_gbps < 0.43
    assert t.tight == (0, 1, 2, 3)
    assert "ddpnet tune --cluster-subnet 198.18.0.0/24 --profile guide --apply" in cause.fix
    assert "net.ipv4.tcp_wmem='4096 65536 16777216'" in cause.fix
    assert "tc qdisc show dev eth0" in cause.fix  # and where the milliseconds come from
    assert any("40.3" in e and "round trip" in e for e in cause.evidence)
    assert any("bandwidth-delay product 4.7 MB" in e for e in cause.evidence)
    assert any("net.ipv4.tcp_wmem max 4194304, net.core.rmem_max 4194304" in e
               for e in cause.evidence)
    assert cause.confidence == "high" and cause.data["rtt_ms"]["0"] > 40


def test_a_latency_the_window_holds_says_where_the_latency_comes_from() -> None:
    found = latency.find(_delayed(2, ms=5.0), ADDRESSES)
    assert found is not None
    windows = {r: Window.of(TUNED) for r in range(4)}
    # 0.93 Gb/s x 5 ms = 0.6 MB, within 32 MiB: the links carry the full rate
    (cause,) = latency.causes(found, _rates({}), windows, WHERE, "bandwidth")
    assert cause.severity == "warn" and "tune" not in cause.fix
    assert cause.fix.startswith("on ck-n2 (198.18.0.3): find where the 5 ms to 198.18.0.")
    assert "tc qdisc show dev eth0" in cause.fix and "tracepath" in cause.fix
    assert any("the window holds it" in e for e in cause.evidence)


def test_without_a_measured_rate_the_window_is_not_judged() -> None:
    found = latency.find(_delayed(2), ADDRESSES)
    assert found is not None
    (cause,) = latency.causes(found, {}, {}, WHERE, "reachability")
    assert cause.severity == "warn" and cause.stage == "reachability"
    assert "bandwidth not measured" in cause.detail and "tune" not in cause.fix


def test_links_between_two_sites_are_one_cause_naming_their_hosts() -> None:
    rtt = {p: v + 10.0 * (p[0] // 2 != p[1] // 2) for p, v in HEALTHY.items()}
    found = latency.find(rtt, ADDRESSES)
    assert found is not None
    rates = {p: (0.3 if p[0] // 2 != p[1] // 2 else 0.93) for p in _rates({})}
    (cause,) = latency.causes(found, rates, {r: Window.of(DEFAULT) for r in range(4)},
                              WHERE, "bandwidth")
    assert cause.ranks == (0, 1, 2, 3) and cause.severity == "fail"
    assert "0<->2 10.1 ms" in cause.detail


@pytest.mark.parametrize(("bdp", "tier"), [(4_700_000, "guide"), (20_000_000, "10g"),
                                           (60_000_000, "40g"), (10**10, "100g")])
def test_tune_profile_is_the_smallest_that_keeps_the_product_in_flight(bdp: int,
                                                                       tier: str) -> None:
    assert latency.tier_for_bdp(bdp).name == tier


def test_the_mesh_rows_make_the_round_trip_matrix() -> None:
    rows = {0: {"row": ["self", "ok", "ok"], "rtt": {"1": 0.05, "2": 40.2}},
            1: {"row": ["ok", "self", "ok"], "rtt": {"0": 0.04}},
            2: {"cells": {"0": "ok"}, "rtt": {"0": 40.4, "2": 1.0, "7": 1.0}}}
    rtt = latency.rtt_pairs(rows, 3)
    assert rtt == {(0, 1): 0.05, (0, 2): 40.2, (1, 0): 0.04, (2, 0): 40.4}
    assert latency.rtt_matrix(rtt, 3) == ((None, 0.05, 40.2), (0.04, None, None),
                                          (40.4, None, None))

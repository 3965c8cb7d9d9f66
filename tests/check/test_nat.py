"""Advertised is not reachable: ranks that reached the store through a translation, ranks
behind a NAT, and routed subnets that are not a fault (pure)."""

from __future__ import annotations

from typing import Any

from ddpnet.check.causes import Cause
from ddpnet.check.nat import analyze, masked, natted, settle_subnets, translated


def _got(via: str) -> dict[int, dict[str, Any]]:
    def node(r: int, master: str) -> dict[str, Any]:
        return {"address": f"10.0.0.{r + 1}", "mesh_port": 4000 + r,
                "names": {"master": {"name": master, "addresses": [master]}}}
    return {0: {**node(0, "10.0.0.1"), "own_addresses": ["10.0.0.1", "172.17.0.1"]},
            1: node(1, "10.0.0.1"), 2: node(2, via)}


LABELS = ["n0 (10.0.0.1)", "n1 (10.0.0.2)", "n2 (10.0.0.3)"]
OK3 = [["self", "ok", "ok"], ["ok", "self", "ok"], ["ok", "ok", "self"]]


def test_a_rank_behind_a_vip_that_peers_cannot_reach_is_named() -> None:
    got = _got("10.96.0.10")
    assert translated(got) == {2: "10.96.0.10"}
    matrix = [["self", "ok", "filtered"], ["ok", "self", "filtered"], ["ok", "ok", "self"]]
    [cause], explained = analyze(matrix, got, LABELS, {})
    assert cause.id == "advertised-unreachable" and cause.ranks == (2,)
    assert "rank 2 on n2 (10.0.0.3) reached the store at 10.96.0.10 (not an address of rank " \
        "0, which is 10.0.0.1) and advertises 10.0.0.3:4002, which rank(s) 0 (filtered), " \
        "1 (filtered) cannot reach" in cause.detail
    assert "hostNetwork" in cause.fix and explained == {(0, 2), (1, 2)}
    assert masked(matrix, explained)[0] == ["self", "ok", "?"]


def test_a_translated_rank_that_everyone_reaches_names_nothing() -> None:
    assert analyze(OK3, _got("10.96.0.10"), LABELS, {}) == ([], set())


def test_direct_ranks_are_not_translated() -> None:
    assert translated(_got("10.0.0.1")) == {} and translated({}) == {}
    # rank 0's other address (its docker0) is still rank 0
    assert translated(_got("172.17.0.1")) == {}


def test_rank_0_behind_a_port_forward_is_named_with_the_forwarded_address() -> None:
    # every worker reached the store at the router's 10.0.0.254; rank 0 advertises its inner
    # 192.168.1.2, which no worker reaches (rank 0 reaches them: its NAT lets it out)
    got = {r: {**f, "names": {"master": {"addresses": ["10.0.0.254"]}}}
           for r, f in _got("10.0.0.254").items()}
    got[0] = {**got[0], "address": "192.168.1.2", "own_addresses": ["192.168.1.2"]}
    matrix = [["self", "ok", "ok"], ["no-route", "self", "ok"], ["no-route", "ok", "self"]]
    [cause], explained = analyze(matrix, got, LABELS, {0: {1: "10.0.0.254", 2: "10.0.0.254"},
                                                       1: {0: "10.0.0.2"}})
    assert cause.id == "advertised-unreachable" and cause.ranks == (0,), cause
    assert "rank 0 on n0 (10.0.0.1) advertises 192.168.1.2:4000, but rank(s) 1, 2 reached " \
        "the store at 10.0.0.254 (not an address of rank 0: a port forward or NAT in front " \
        "of it) and cannot reach 192.168.1.2 (1 no-route, 2 no-route)" in cause.detail
    assert explained == {(1, 0), (2, 0)}
    assert "run rank 0 where the other ranks reach its own address 192.168.1.2, not only " \
        "through the forward at 10.0.0.254" in cause.fix


def _natted() -> dict[int, dict[str, Any]]:
    got = _got("10.0.0.1")
    for r, address in ((0, "10.0.0.1"), (1, "192.168.1.3"), (2, "192.168.1.4")):
        got[r] = {**got[r], "address": address, "subnet": "10.0.0.0/24" if r == 0 else
                  "192.168.1.0/24", "ifaddrs": {"eth0": [f"{address}/24"]}}
    return got


def test_workers_behind_a_nat_are_named_with_what_rank_0_sees() -> None:
    got = _natted()
    sources = {1: {0: "10.0.0.254"}, 2: {0: "10.0.0.254"}}
    assert natted(got, sources) == {1: ("10.0.0.254", (0,)), 2: ("10.0.0.254", (0,))}
    # the two workers share the inner subnet, rank 0 reaches neither
    matrix = [["self", "no-route", "no-route"], ["ok", "self", "ok"], ["ok", "ok", "self"]]
    [cause], explained = analyze(matrix, got, LABELS, sources)
    assert cause.id == "behind-nat" and cause.ranks == (1, 2) and cause.severity == "fail"
    assert "rank 1 on n1 (10.0.0.2) advertises 192.168.1.3:4001, but its connections arrive " \
        "at rank 0 from 10.0.0.254, an address it does not have (a NAT rewrites them), and " \
        "rank(s) 0 (no-route) cannot reach 192.168.1.3" in cause.detail
    assert "onto 10.0.0.0/24" in cause.fix and "GLOO_SOCKET_IFNAME" not in cause.fix
    assert explained == {(0, 1), (0, 2)}
    # a NATed node that also has an interface on rank 0's network: pin that one
    got[1]["ifaddrs"]["eth1"] = ["10.0.0.2/24"]
    [cause], _ = analyze(matrix, got, LABELS, sources)
    assert "on rank 1: export GLOO_SOCKET_IFNAME=eth1 NCCL_SOCKET_IFNAME=eth1" in cause.fix


def test_sources_that_are_the_ranks_own_addresses_are_no_nat() -> None:
    got = _natted()
    # routed, or a multi-homed rank leaving by another of its own NICs
    got[2]["ifaddrs"]["eth1"] = ["10.0.0.3/24"]
    assert natted(got, {1: {0: "192.168.1.3"}, 2: {0: "10.0.0.3"}, 9: {0: "1.2.3.4"}}) == {}
    assert natted(got, {1: {0: "127.0.0.1"}}) == {}  # same host: no evidence
    assert natted(got, {1: {1: "10.0.0.254"}}) == {}  # itself: no evidence
    del got[1]["ifaddrs"]
    assert natted(got, {1: {0: "10.0.0.254"}}) == {}  # an older rank: no evidence
    # a translated source everyone still reaches breaks nothing
    assert analyze(OK3, _natted(), LABELS, {1: {0: "10.0.0.254"}}) == ([], set())


def test_a_worker_natted_toward_another_worker_is_named_from_that_workers_view() -> None:
    # ranks 0 and 1 behind one NAT (192.168.1.0/24), rank 2 outside (10.0.0.3): rank 1's
    # probes reach rank 0 from its own address, so only rank 2's view shows the NAT
    got = _natted()
    for r, address in ((0, "192.168.1.2"), (1, "192.168.1.3"), (2, "10.0.0.3")):
        got[r] = {**got[r], "address": address, "ifaddrs": {"eth0": [f"{address}/24"]},
                  "subnet": "10.0.0.0/24" if r == 2 else "192.168.1.0/24"}
    matrix = [["self", "ok", "ok"], ["ok", "self", "ok"], ["ok", "no-route", "self"]]
    seen = {0: {2: "10.0.0.254"}, 1: {2: "10.0.0.254"}, 2: {}}
    assert natted(got, seen) == {0: ("10.0.0.254", (2,)), 1: ("10.0.0.254", (2,))}
    [cause], explained = analyze(matrix, got, LABELS, seen)
    assert cause.id == "behind-nat" and cause.ranks == (1,), cause  # rank 2 reaches rank 0
    assert "rank 1 on n1 (10.0.0.2) advertises 192.168.1.3:4001, but its connections arrive " \
        "at rank 2 from 10.0.0.254" in cause.detail
    assert "rank(s) 2 (no-route) cannot reach 192.168.1.3" in cause.detail
    assert explained == {(2, 1)}
    # several peers saw it so: all named, by the address most of them saw
    seen[1] = {0: "10.0.0.254", 2: "10.0.0.254", 3: "10.9.9.9"}
    assert natted(got, seen)[1] == ("10.0.0.254", (0, 2))


def _subnets(ranks: tuple[int, ...]) -> Cause:
    return Cause("interface-mismatch", "selected interfaces are not in one network", "f",
                 ranks=ranks, stage="facts", data={"subnets": True})


def test_other_subnets_that_are_routed_warn_and_natted_ones_are_the_nats() -> None:
    other = Cause("interface-mismatch", "GLOO_SOCKET_IFNAME=eth9: missing", "f", ranks=(2,))
    [routed, kept] = settle_subnets([_subnets((2,)), other], OK3, ())
    assert routed.severity == "warn" and "routed to each other" in routed.detail
    assert kept is other  # a selection problem is not a subnet finding
    broken = [["self", "ok", "no-route"], ["ok", "self", "ok"], ["ok", "ok", "self"]]
    assert settle_subnets([_subnets((2,))], broken, ())[0].severity == "fail"
    assert settle_subnets([_subnets((1, 2))], broken, (1, 2)) == []
    # the rank on the far side of a NAT that names another: the NAT's story too
    assert settle_subnets([_subnets((2,))], broken, (0,), {(2, 0)}) == []
    assert settle_subnets([_subnets((2,))], broken, (0,), {(1, 0)})[0].severity == "fail"

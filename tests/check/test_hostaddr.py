"""What a node's own hostname makes gloo advertise, judged on rank 0 (pure)."""

from __future__ import annotations

from typing import Any

from ddpnet.check.compare import NodeFacts
from ddpnet.check.hostaddr import compare_hostname_addresses, gloo_default


def _node(rank: int, answers: list[str], ifaddrs: dict[str, list[str]], *,
          pinned: bool = False, netns: str | None = None) -> NodeFacts:
    address = ifaddrs["eth0"][0].split("/")[0]
    facts: dict[str, Any] = {"hostname": f"n{rank}", "address": address, "interface": "eth0",
                             "hostname_addresses": answers, "ifaddrs": ifaddrs,
                             "interface_pinned": pinned, "netns": netns or f"ns{rank}"}
    return NodeFacts(rank, facts)


def _plain(rank: int, answers: list[str] | None = None, **extra: list[str]) -> NodeFacts:
    own = f"10.0.0.{rank + 1}"
    return _node(rank, answers or [own], {"eth0": [f"{own}/24"], **extra})


def test_gloo_binds_the_first_own_answer_else_falls_back_to_loopback() -> None:
    facts = {"hostname_addresses": ["10.9.9.9", "10.0.0.2"], "ifaddrs": {"eth0": ["10.0.0.2/24"]}}
    assert gloo_default(facts) == "10.0.0.2"
    assert gloo_default({**facts, "hostname_addresses": ["10.9.9.9"]}) == "127.0.0.1"
    assert gloo_default({**facts, "hostname_addresses": ["127.0.1.1", "10.0.0.2"]}) == \
        "127.0.1.1"
    assert gloo_default({"ifaddrs": {}}) is None  # an older rank: unknown, not judged


def test_a_healthy_cluster_and_one_host_are_quiet() -> None:
    assert compare_hostname_addresses([_plain(0), _plain(1), _plain(2)]) == []
    same = [_node(r, ["10.0.0.1"], {"eth0": ["10.0.0.1/24"]}, netns="one") for r in range(3)]
    assert compare_hostname_addresses(same) == []


def test_hostname_on_a_bridge_every_node_has_is_duplicate_address() -> None:
    bridge = {"docker0": ["172.17.0.1/16"]}
    nodes = [_plain(0, **bridge), _plain(1, ["172.17.0.1"], **bridge), _plain(2, **bridge)]
    (cause,) = compare_hostname_addresses(nodes)
    assert cause.id == "duplicate-address" and cause.ranks == (1,)
    assert "resolves there to 172.17.0.1 (docker0), an address rank(s) 0, 2 have too" \
        in cause.detail
    assert "map n1 to 10.0.0.2 in /etc/hosts" in cause.fix
    # a warning, as a hostname on 127.0.1.1: ddpnet.init() and a pinned interface avoid it
    assert "GLOO_SOCKET_IFNAME=eth0" in cause.fix and cause.severity == "warn"
    assert "breaks gloo in a plain init_process_group job" in cause.detail


def test_hostname_ipv6_only_while_a_peer_has_no_ipv6_is_family_mismatch() -> None:
    nodes = [_plain(0, eth1=["2001:db8::1/64"]),
             _node(1, ["2001:db8::2"], {"eth0": ["10.0.0.2/24", "2001:db8::2/64"]}),
             _plain(2)]
    (cause,) = compare_hostname_addresses(nodes)
    assert cause.id == "family-mismatch" and cause.ranks == (1,)
    assert "IPv6 2001:db8::2, which rank(s) 2 (no IPv6 address) cannot reach" in cause.detail


def test_dual_stack_everywhere_is_fine_and_pinning_silences_it() -> None:
    dual = [_node(r, [f"2001:db8::{r + 1}"], {"eth0": [f"10.0.0.{r + 1}/24",
                                                      f"2001:db8::{r + 1}/64"]})
            for r in range(3)]
    assert compare_hostname_addresses(dual) == []
    pinned = [_plain(0), _node(1, ["2001:db8::2"], {"eth0": ["10.0.0.2/24", "2001:db8::2/64"]},
                               pinned=True), _plain(2)]
    assert compare_hostname_addresses(pinned) == []


def test_dual_stack_one_hostname_on_ipv6_only_is_family_mismatch_for_that_node() -> None:
    # every node has both families; node 1's hostname resolves to its IPv6 address only: a
    # plain gloo job binds IPv6 there, IPv4 elsewhere, and gloo refuses to pair them
    def dual(rank: int, answers: list[str]) -> NodeFacts:
        return _node(rank, answers, {"eth0": [f"10.0.0.{rank + 1}/24",
                                              f"2001:db8::{rank + 1}/64"]})

    nodes = [dual(0, ["10.0.0.1"]), dual(1, ["2001:db8::2"]), dual(2, ["10.0.0.3"])]
    (cause,) = compare_hostname_addresses(nodes)
    assert cause.id == "family-mismatch" and cause.ranks == (1,) and cause.severity == "warn"
    assert "so gloo binds IPv6 while rank(s) 0, 2 bind IPv4" in cause.detail
    assert "map n1 to 10.0.0.2 in /etc/hosts" in cause.fix and "GLOO_SOCKET_IFNAME=eth0" \
        in cause.fix
    assert "on n1 (10.0.0.2): n1 resolves to 2001:db8::2; plain gloo binds 2001:db8::2; " \
        "this check bound eth0 10.0.0.2" in cause.evidence
    # a node whose GLOO_SOCKET_IFNAME is set counts with what it binds (IPv4 first), not
    # with its hostname (IPv6 here): IPv4 stays the majority, rank 1 the odd one
    pinned = _node(2, ["2001:db8::3"], {"eth0": ["10.0.0.3/24", "2001:db8::3/64"]},
                   pinned=True)
    pinned = NodeFacts(2, {**pinned.facts, "library_picks": [
        {"var": "GLOO_SOCKET_IFNAME", "value": "eth0", "slot": 0, "iface": "eth0",
         "address": "10.0.0.3"}]})
    (cause,) = compare_hostname_addresses([dual(0, ["10.0.0.1"]), dual(1, ["2001:db8::2"]),
                                           pinned])
    assert cause.ranks == (1,) and "rank(s) 0, 2 bind IPv4" in cause.detail


def test_a_stale_own_name_falls_back_to_loopback() -> None:
    nodes = [_plain(0), _plain(1, ["10.0.0.250"]), _plain(2)]
    (cause,) = compare_hostname_addresses(nodes)
    assert cause.id == "hostname-loopback" and cause.ranks == (1,)
    assert "none of them an address of this host, so gloo falls back to 127.0.0.1" \
        in cause.detail


def test_a_loopback_answer_is_left_to_the_doctor() -> None:
    assert compare_hostname_addresses([_plain(0), _plain(1, ["127.0.1.1"])]) == []



def test_plain_job_shows_what_plain_gloo_and_nccl_bind_beside_the_pinned_run() -> None:
    from ddpnet.check.hostaddr import plain_job

    facts = {**_plain(1, ["2001:db8::2"], eth0=["10.0.0.2/24", "2001:db8::2/64"]).facts,
             "library_picks": [{"var": "NCCL_SOCKET_IFNAME", "value": None, "slot": 0,
                                "iface": "eth0", "address": "10.0.0.2"}]}
    assert plain_job(facts) == "gloo 2001:db8::2, nccl 10.0.0.2"
    assert plain_job({}) == "gloo ?, nccl ?"

"""Container networking: one advertised address in several network namespaces (pure)."""

from __future__ import annotations

from pathlib import Path

from ddpnet.check.compare import NodeFacts
from ddpnet.check.containers import compare_addresses, netns_id


def _node(rank: int, netns: str, address: str = "172.17.0.1") -> NodeFacts:
    return NodeFacts(rank, {
        "hostname": "worker", "address": address, "interface": "docker0", "netns": netns,
        "ifaddrs": {"docker0": ["172.17.0.1/16"], "eth0": [f"10.0.0.{rank + 1}/24"]}})


def test_the_same_bridge_address_on_several_hosts_is_named() -> None:
    [cause] = compare_addresses([_node(0, "a:1"), _node(1, "b:1"), _node(2, "c:1")])
    assert cause.id == "duplicate-address" and cause.severity == "fail"
    assert cause.ranks == (0, 1, 2) and "3 different hosts" in cause.detail
    assert "the same address 172.17.0.1" in cause.detail
    assert "(10.0.0.0/24)" in cause.fix and "export GLOO_SOCKET_IFNAME=eth0" in cause.fix


def test_ranks_of_one_host_share_their_address() -> None:
    assert compare_addresses([_node(0, "a:1"), _node(1, "a:1")]) == []
    assert compare_addresses([_node(0, ""), _node(1, "")]) == []  # an older rank: unknown
    assert compare_addresses([_node(0, "a:1", "10.0.0.1"), _node(1, "b:1", "10.0.0.2")]) == []


def test_netns_id_is_boot_id_and_namespace_inode(tmp_path: Path) -> None:
    here = netns_id()
    assert here.count(":") == 1 and here.split(":")[1].isdigit()
    assert netns_id(tmp_path) == ""


def test_malformed_addresses_in_facts_do_not_break_rank_0() -> None:
    nodes = [_node(0, "a:1"), _node(1, "b:1")]
    odd = NodeFacts(1, {**nodes[1].facts, "ifaddrs": {"x": ["not-an-address"]}})
    [cause] = compare_addresses([nodes[0], odd])
    assert cause.id == "duplicate-address" and "each node its own address" in cause.fix

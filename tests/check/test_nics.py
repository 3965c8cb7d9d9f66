"""Several NICs per node: facts a node publishes and rank 0's judgement (pure)."""

from __future__ import annotations

from typing import Any

from ddpnet.check.compare import NodeFacts
from ddpnet.check.nics import compare_nics, nic_facts, node_why, twin_subnets
from ddpnet.check.stages.facts import binding_facts
from ddpnet.net.interfaces import Address, Interface


def _i(name: str, *cidrs: str, kind: str = "physical", up: bool = True) -> Interface:
    addrs = tuple(Address(c.split("/")[0], int(c.split("/")[1]), 4) for c in cidrs)
    return Interface(name, up, addrs, 1500, None, kind)


LO = _i("lo", "127.0.0.1/8", kind="loopback")
SYSCTL = {"net.ipv4.conf.all.rp_filter": "1", "net.ipv4.conf.eth1.rp_filter": "0",
          "net.ipv4.conf.all.arp_ignore": "0", "net.ipv4.conf.eth0.arp_ignore": "0"}


def test_twin_subnets_skip_loopback_down_and_single_interfaces() -> None:
    table = (LO, _i("eth0", "10.0.0.5/24"), _i("eth1", "10.0.0.6/24", "10.9.0.1/24"),
             _i("eth2", "10.0.0.7/24", up=False), _i("lo2", "127.0.0.2/8", kind="loopback"))
    assert twin_subnets(table) == {"10.0.0.0/24": ["eth0", "eth1"]}


def test_nic_facts_carry_why_and_the_effective_sysctls() -> None:
    table = (LO, _i("eth0", "10.0.0.5/24"), _i("eth1", "10.0.0.6/24"))
    facts = nic_facts(table, "auto", "routes to MASTER_ADDR", SYSCTL.get)
    assert facts["interface_why"] == {"source": "auto", "reason": "routes to MASTER_ADDR"}
    # rp_filter: the larger of all and the interface's
    assert facts["nic_sysctl"]["eth1"] == {"rp_filter": 1, "arp_ignore": 0,
                                           "arp_announce": None}
    assert node_why(facts) == "auto: routes to MASTER_ADDR" and node_why({}) == ""


def _node(rank: int, table: tuple[Interface, ...], order: tuple[str, ...],
          environ: dict[str, str] | None = None) -> NodeFacts:
    facts: dict[str, Any] = {
        "hostname": f"n{rank}", "address": f"10.0.0.{rank + 1}", "interface": "eth0",
        "subnet": "10.0.0.0/24", **binding_facts(environ or {}, table, order),
        **nic_facts(table, "auto", "routes to MASTER_ADDR", SYSCTL.get)}
    return NodeFacts(rank, facts)


def test_a_second_nic_in_the_cluster_subnet_is_named_with_its_sysctls() -> None:
    plain = (LO, _i("eth0", "10.0.0.1/24"))
    twin = (LO, _i("eth0", "10.0.0.3/24"), _i("eth1", "10.0.0.200/24"))
    nodes = [_node(0, plain, ("lo", "eth0")), _node(1, plain, ("lo", "eth0")),
             _node(2, twin, ("lo", "eth0", "eth1"))]
    [cause] = compare_nics(nodes)
    assert cause.id == "nic-same-subnet" and cause.severity == "warn" and cause.ranks == (2,)
    assert "10.0.0.0/24 on eth0, eth1 (uses eth0" in cause.detail
    assert "rp_filter=1 (strict" in cause.detail and "ARP flux" in cause.detail
    assert "ip addr del <its address> dev eth1" in cause.fix
    assert "NCCL_SOCKET_IFNAME==eth0" in cause.fix


def test_nccls_own_choice_on_another_network_is_named() -> None:
    plain = (LO, _i("eth0", "10.0.0.1/24"))
    ib = (LO, _i("eth0", "10.0.0.3/24"), _i("ib0", "192.168.50.3/24"))
    nodes = [_node(0, plain, ("lo", "eth0")), _node(1, ib, ("lo", "eth0", "ib0"))]
    [cause] = compare_nics(nodes)
    assert cause.id == "nccl-auto-interface" and cause.ranks == (1,)
    assert "ib0 192.168.50.3 (192.168.50.0/24, not the cluster subnet 10.0.0.0/24" \
        in cause.detail
    assert "export NCCL_SOCKET_IFNAME==eth0" in cause.fix
    # a user-pinned job interface (GLOO_SOCKET_IFNAME) leaves no reference to judge by
    pinned_gloo = [nodes[0], NodeFacts(1, {**nodes[1].facts, "interface_pinned": True})]
    assert compare_nics(pinned_gloo) == []
    # a user-set NCCL_SOCKET_IFNAME is ifname-mismatch's to judge, not this
    pinned = [_node(0, plain, ("lo", "eth0")),
              _node(1, ib, ("lo", "eth0", "ib0"), {"NCCL_SOCKET_IFNAME": "=eth0"})]
    assert compare_nics(pinned) == []

"""The pure plan of a lab: names, addresses, hosts file, batch lines, node selection."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from ddpnet.errors import ConfigError
from ddpnet.lab.topology import (
    LabSpec,
    Shaping,
    hosts_file,
    namespace_pattern,
    node_argv,
    node_batch,
    parse_nodes,
    plan,
    qdisc_lines,
    rate_bits,
    run_environ,
    switch_batch,
    switch_ports_batch,
)


def test_plan_names_and_addresses() -> None:
    p = plan(LabSpec(name="x1", nodes=3, subnet="198.18.4.0/24", ifname="ens5"))
    assert p.switch == "x1-sw"
    assert [(n.name, n.namespace, n.hostname, n.address, n.ifname, n.port) for n in p.nodes] == [
        ("x1-n0", "x1-n0", "x1-n0", "198.18.4.1", "ens5", "p0"),
        ("x1-n1", "x1-n1", "x1-n1", "198.18.4.2", "ens5", "p1"),
        ("x1-n2", "x1-n2", "x1-n2", "198.18.4.3", "ens5", "p2"),
    ]
    assert p.namespaces == ("x1-sw", "x1-n0", "x1-n1", "x1-n2")


@pytest.mark.parametrize(("spec", "needle"), [
    (LabSpec(subnet="10.0.0.0/24"), "outside 198.18.0.0/15"),
    (LabSpec(subnet="198.20.0.0/24"), "outside 198.18.0.0/15"),
    (LabSpec(subnet="nonsense"), "not an IPv4 network"),
    (LabSpec(nodes=7, subnet="198.18.0.0/29"), "room for 6 nodes"),
    (LabSpec(nodes=0), "at least 1"),
    (LabSpec(name="Bad_Name"), "bad lab name"),
    (LabSpec(name="a" * 30), "bad lab name"),
    (LabSpec(ifname="lo"), "bad interface name"),
    (LabSpec(ifname="a-very-long-name0"), "bad interface name"),
    (LabSpec(mtu=20), "bad MTU"),
    (LabSpec(rate="fast"), "bad rate"),
    (LabSpec(delay="1 hour"), "bad delay"),
    (LabSpec(loss="120"), "between 0 and 100"),
])
def test_bad_specs_are_config_errors_with_hints(spec: LabSpec, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle) as info:
        plan(spec)
    assert info.value.hint


def test_hosts_file_maps_every_node_and_loopback_fault_comes_first() -> None:
    p = plan(LabSpec(name="x1", nodes=2))
    text = hosts_file(p, p.nodes[1])
    assert "198.18.0.1\tx1-n0\n" in text and "198.18.0.2\tx1-n1\n" in text
    assert "127.0.1.1" not in text
    bad = hosts_file(p, p.nodes[1], hostname_loopback=True)
    assert bad.index("127.0.1.1\tx1-n1") < bad.index("198.18.0.2\tx1-n1")


def test_batches_create_veths_straight_into_namespaces() -> None:
    p = plan(LabSpec(name="x1", nodes=2, mtu=9000))
    lines = node_batch(p, p.nodes[1])
    assert "link add eth0 mtu 9000 type veth peer name p1 mtu 9000 netns x1-sw" in lines
    assert "addr add 198.18.0.2/24 dev eth0" in lines
    assert switch_ports_batch(p) == ["link set p0 master br0", "link set p0 up",
                                     "link set p1 master br0", "link set p1 up"]


def test_qdisc_lines() -> None:
    assert qdisc_lines("eth0", Shaping()) == ["qdisc del dev eth0 root"]
    full = qdisc_lines("eth0", Shaping(rate="200mbit", delay_ms=0.1, loss_pct=1))
    assert full[1].startswith("qdisc add dev eth0 root handle 1: tbf rate 200mbit burst 100000")
    assert full[2] == "qdisc add dev eth0 parent 1:1 handle 10: netem delay 0.1ms limit 100000"
    port = qdisc_lines("p0", Shaping(rate="1gbit", delay_ms=5), egress_netem=False)
    assert len(port) == 2 and "netem" not in port[1]
    assert qdisc_lines("eth0", Shaping(delay_ms=5))[1] == (
        "qdisc add dev eth0 root handle 1: netem delay 5ms limit 100000")
    assert qdisc_lines("eth0", Shaping(delay_ms=5, jitter_ms=2))[1] == (
        "qdisc add dev eth0 root handle 1: netem delay 5ms 2ms limit 100000")
    assert Shaping(delay_ms=5, jitter_ms=2).describe() == "delay 5ms jitter 2ms"
    assert rate_bits("200mbit") == 2e8 and rate_bits("1gbit") == 1e9


@pytest.mark.parametrize(("rate", "shaped", "meant"), [
    ("1gbps", "8 Gbit/s", "1gbit"), ("100mbps", "0.8 Gbit/s", "100mbit")])
def test_a_bytes_rate_is_refused_with_what_tc_would_shape(rate: str, shaped: str,
                                                          meant: str) -> None:
    """tc's ``bps`` is bytes: ``--rate 1gbps`` silently shaped 8 Gbit/s."""
    with pytest.raises(ConfigError) as err:
        rate_bits(rate)
    assert f"would shape {shaped}" in err.value.message
    assert err.value.hint.startswith(f"give bits per second: {meant} ")


def test_parse_nodes() -> None:
    assert parse_nodes(None, 4) == (0, 1, 2, 3)
    assert parse_nodes("all", 4) == (0, 1, 2, 3)
    assert parse_nodes("0,2-3", 4) == (0, 2, 3)
    assert parse_nodes([3, 1], 4) == (1, 3)
    for bad, needle in (("5", "does not exist"), ("1-x", "bad node list"),
                        ("3-1", "bad node range")):
        with pytest.raises(ConfigError, match=needle):
            parse_nodes(bad, 4)


def test_run_environ_master_is_first_chosen_node() -> None:
    p = plan(LabSpec(name="x1", nodes=4))
    assert run_environ(p, (0, 1, 2, 3), 2) == {
        "NNODES": "4", "NODE_RANK": "2", "MASTER_ADDR": "198.18.0.1", "MASTER_PORT": "29500",
        "WORLD_SIZE": "4", "RANK": "2"}
    assert run_environ(p, (2, 3), 1, 1234)["MASTER_ADDR"] == "198.18.0.3"


def test_namespace_pattern_matches_only_this_lab() -> None:
    pat = namespace_pattern("x1")
    assert pat.match("x1-sw") and pat.match("x1-n12")
    assert not pat.match("x1-n0-sw") and not pat.match("x10-n0") and not pat.match("x1-nx")


def test_node_argv_execs_in_netns_with_hostname() -> None:
    argv = node_argv("x1-n0", "x1-n0", ["python", "-c", "pass"])
    assert argv[:5] == ["ip", "netns", "exec", "x1-n0", "unshare"]
    assert argv[-4:] == ["x1-n0", "python", "-c", "pass"]
    with pytest.raises(ConfigError):
        node_argv("x1-n0", "x1-n0", [])


# ---- a router with nodes behind it -------------------------------------------------------

def test_nodes_behind_a_router_get_the_inner_subnet_and_a_way_out() -> None:
    from ddpnet.lab.topology import router_batch, switch_batch

    p = plan(LabSpec(name="x1", nodes=4, behind=(1, 2), forwards=((29510, 1),)))
    assert [n.address for n in p.nodes] == ["198.18.0.1", "198.19.1.3", "198.19.1.4",
                                            "198.18.0.4"]
    rt = p.router
    assert rt is not None and (rt.namespace, rt.outer, rt.inner, rt.subnet) == (
        "x1-rt", "198.18.0.254", "198.19.1.1", "198.19.1.0/24")
    assert rt.forwards == ((29510, "198.19.1.3"),)
    assert p.namespaces == ("x1-sw", "x1-rt", "x1-n0", "x1-n1", "x1-n2", "x1-n3")
    assert namespace_pattern("x1").match("x1-rt")
    assert node_batch(p, p.nodes[1])[-1] == "route add default via 198.19.1.1 dev eth0 onlink"
    assert not any("route" in line for line in node_batch(p, p.nodes[0]))  # NAT: no way in
    assert "link add br1 mtu 1500 type bridge stp_state 0 forward_delay 0" in switch_batch(p)
    ports = switch_ports_batch(p)
    assert "link set p1 master br1" in ports and "link set p0 master br0" in ports
    assert "link set r0 master br0" in ports and "link set r1 master br1" in ports
    assert "addr add 198.18.0.254/24 dev eth0" in router_batch(p)
    assert "addr add 198.19.1.1/24 dev eth1" in router_batch(p)


def test_router_ruleset_masquerades_out_and_forwards_only_replies_and_forwards_in() -> None:
    from ddpnet.lab.topology import router_nft

    p = plan(LabSpec(name="x1", nodes=4, behind=(0,), forwards=((29510, 0),)))
    text = router_nft(p) or ""
    assert 'ip saddr 198.19.1.0/24 oifname "eth0" masquerade' in text
    assert 'iifname "eth0" ip daddr 198.18.0.254 tcp dport 29510 dnat to 198.19.1.2' in text
    assert 'iifname "eth0" oifname "eth1" ct state established,related accept' in text
    assert text.index("ct status dnat accept") < text.index('oifname "eth1" drop')


def test_routed_mode_forwards_untouched_and_routes_the_outer_nodes() -> None:
    from ddpnet.lab.topology import router_nft

    p = plan(LabSpec(name="x1", nodes=3, behind=(2,), router="routed"))
    assert router_nft(p) is None  # nothing translated, nothing dropped
    assert node_batch(p, p.nodes[0])[-1] == "route add 198.19.1.0/24 via 198.18.0.254 dev " \
        "eth0 onlink"
    assert plan(LabSpec(name="x1", nodes=2)).router is None


def test_inner_subnet_avoids_the_lab_subnet_and_spec_round_trips() -> None:
    p = plan(LabSpec(name="x1", nodes=2, subnet="198.19.0.0/16", behind=(1,)))
    assert p.router is not None and p.router.subnet == "198.18.1.0/24"
    spec = LabSpec(name="x1", nodes=3, behind=(1, 2), forwards=((1, 2),))
    import json
    assert LabSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


@pytest.mark.parametrize(("spec", "needle"), [
    (LabSpec(nodes=2, behind=(2,)), "bad node list behind the router"),
    (LabSpec(nodes=2, behind=(1, 1)), "bad node list behind the router"),
    (LabSpec(nodes=2, behind=(1,), router="bridge"), "bad router mode"),
    (LabSpec(nodes=2, forwards=((80, 1),)), "needs nodes behind the router"),
    (LabSpec(nodes=2, behind=(1,), forwards=((80, 0),)), "bad port forward 80:0"),
    (LabSpec(nodes=2, behind=(1,), forwards=((0, 1),)), "bad port forward 0:1"),
    (LabSpec(nodes=3, behind=(1, 2), forwards=((80, 1), (80, 2))), "one port forwarded twice"),
    (LabSpec(nodes=6, subnet="198.18.0.0/29", behind=(1,)), "room for 5 nodes"),
    (LabSpec(nodes=2, subnet="198.18.0.0/15", behind=(1,)), "no free /24"),
])
def test_bad_router_specs_are_config_errors(spec: LabSpec, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle) as info:
        plan(spec)
    assert info.value.hint


# ---- a second network (--second-net) -----------------------------------------------------

def _two(**kw: Any) -> LabSpec:
    return replace(LabSpec(name="x1", nodes=3, second_net="198.18.2.0/24"), **kw)


def test_second_network_gives_every_node_a_second_nic_on_its_own_bridge() -> None:
    p = plan(_two(second_first=(1,)))
    assert [(n.second_ifname, n.second_cidr, n.second_port, n.second_first)
            for n in p.nodes] == [("eth1", "198.18.2.1/24", "s0", False),
                                  ("eth1", "198.18.2.2/24", "s1", True),
                                  ("eth1", "198.18.2.3/24", "s2", False)]
    assert [n.address for n in p.nodes] == ["198.18.0.1", "198.18.0.2", "198.18.0.3"]
    assert "link add br2 mtu 1500 type bridge stp_state 0 forward_delay 0" in switch_batch(p)
    ports = switch_ports_batch(p)
    assert ports[:4] == ["link set p0 master br0", "link set p0 up",
                         "link set s0 master br2", "link set s0 up"]
    # /etc/hosts stays on the first network
    assert "198.18.2." not in hosts_file(p, p.nodes[0])


def _veths(lines: list[str]) -> list[str]:
    return [line.split()[2] for line in lines if line.startswith("link add")]


def test_second_first_creates_the_second_nic_first_so_it_has_the_lower_ifindex() -> None:
    p = plan(_two(second_first=(1,), mtu=9000))
    assert _veths(node_batch(p, p.nodes[0])) == ["eth0", "eth1"]
    lines = node_batch(p, p.nodes[1])
    assert _veths(lines) == ["eth1", "eth0"]
    assert "link add eth1 mtu 9000 type veth peer name s1 mtu 9000 netns x1-sw" in lines
    assert "addr add 198.18.2.2/24 dev eth1" in lines and "link set eth1 up" in lines


def test_without_a_second_network_nothing_changes() -> None:
    p = plan(LabSpec(name="x1", nodes=2))
    assert all(not n.second_address and not n.second_cidr for n in p.nodes)
    assert _veths(node_batch(p, p.nodes[0])) == ["eth0"]
    assert not any("br2" in line for line in switch_batch(p) + switch_ports_batch(p))


def test_second_network_spec_round_trips_and_old_state_loads() -> None:
    import json

    spec = _two(second_first=(0, 2), second_rate="10gbit", second_ifname="ib0")
    assert LabSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    old = {k: v for k, v in LabSpec(name="x1").to_dict().items() if not k.startswith("second")}
    assert LabSpec.from_dict(old) == LabSpec(name="x1")
    assert spec.second_shaping == Shaping(rate="10gbit") and spec.shaping == Shaping()


def test_second_network_beside_a_router_keeps_clear_of_its_inner_subnet() -> None:
    p = plan(_two(behind=(2,), second_net="198.18.3.0/24"))
    assert p.router is not None and p.router.subnet == "198.19.1.0/24"
    assert p.nodes[2].second_cidr == "198.18.3.3/24"


@pytest.mark.parametrize(("spec", "needle"), [
    (_two(second_net="10.1.0.0/24"), "outside 198.18.0.0/15"),
    (_two(second_net="nonsense"), "not an IPv4 network"),
    (_two(second_net="198.18.0.128/25"), r"overlaps 198.18.0.0/24 \(the lab subnet\)"),
    (_two(second_net="198.19.0.0/16"), r"overlaps 198.19.254.0/24 \(the extra-iface decoys\)"),
    (_two(second_net="198.19.1.0/24", behind=(1,)), "the router's inner subnet"),
    (_two(second_net="198.18.2.0/30"), "room for 2 nodes, 3 asked"),
    (_two(second_ifname="eth0"), "also the first NIC's name"),
    (_two(second_ifname="lo"), "bad interface name"),
    (_two(second_rate="fast"), "bad rate"),
    (_two(second_first=(3,)), "node 3 does not exist"),
    (_two(second_first=("1",)), "node .1. does not exist"),
    (LabSpec(nodes=2, second_first=(1,)), "need a second network"),
    (LabSpec(nodes=2, second_rate="1gbit"), "need a second network"),
])
def test_bad_second_networks_are_config_errors(spec: LabSpec, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle) as info:
        plan(spec)
    assert info.value.hint

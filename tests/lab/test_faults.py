"""Fault records and what they add up to, without root."""

from __future__ import annotations

import pytest

from ddpnet.errors import ConfigError
from ddpnet.lab import faults
from ddpnet.lab.topology import LabSpec, plan


def test_normalize_validates_each_kind() -> None:
    assert faults.normalize("block-port", {"port": "29500"}) == {
        "kind": "block-port", "port": 29500, "reject": False}
    assert faults.normalize("block-ephemeral", {}) == {"kind": "block-ephemeral", "port": 29500}
    rec = faults.normalize("link-down", {"for_s": 2}, now=100.0)
    assert rec == {"kind": "link-down", "for_s": 2.0, "until": 102.0}
    assert faults.normalize("delay", {"ms": "20ms"}) == {"kind": "delay", "ms": 20.0}
    assert faults.normalize("delay", {"ms": 20, "jitter_ms": 5}) == {
        "kind": "delay", "ms": 20.0, "jitter_ms": 5.0}
    assert faults.normalize("loss", {"percent": "5%"})["percent"] == 5.0
    assert faults.normalize("extra-iface", {})["iface"] == "docker0"
    for kind, opts, needle in (
        ("meteor", {}, "unknown fault kind"),
        ("block-port", {}, "needs a port"),
        ("block-port", {"port": 70000}, "bad port"),
        ("rate", {"rate": "quick"}, "bad rate"),
        ("mtu", {"mtu": 10}, "bad MTU"),
        ("loss", {"percent": 150}, "between 0 and 100"),
        ("hostname-loopback", {"port": 1}, "takes no option"),
        ("link-down", {"for_s": -1}, "must be positive"),
        ("link-down", {"for_s": float("nan")}, "must be positive"),
        ("delay", {"ms": float("nan")}, "bad delay"),
        ("delay", {"ms": -5.0}, "bad delay"),
        ("delay", {"ms": 5.0, "jitter_ms": -1.0}, "bad delay"),
        ("extra-iface", {"iface": "bad name"}, "bad interface name"),
        ("extra-iface", {"iface": "br0"}, "bad interface name"),
    ):
        with pytest.raises(ConfigError, match=needle) as info:
            faults.normalize(kind, opts)
        assert info.value.hint


def test_add_replaces_single_valued_kinds_and_accumulates_ports() -> None:
    fs = faults.add([], {"kind": "rate", "rate": "1mbit"})
    fs = faults.add(fs, {"kind": "rate", "rate": "2mbit"})
    fs = faults.add(fs, {"kind": "block-port", "port": 1, "reject": False})
    fs = faults.add(fs, {"kind": "block-port", "port": 2, "reject": False})
    fs = faults.add(fs, {"kind": "block-port", "port": 1, "reject": True})
    assert fs == [{"kind": "rate", "rate": "2mbit"},
                  {"kind": "block-port", "port": 2, "reject": False},
                  {"kind": "block-port", "port": 1, "reject": True}]


def test_expired_link_down_is_not_active() -> None:
    fs = [{"kind": "link-down", "for_s": 1.0, "until": 10.0}, {"kind": "link-down"}]
    assert faults.active(fs, now=5.0) == fs
    assert faults.active(fs, now=11.0) == [{"kind": "link-down"}]


def test_nft_ruleset() -> None:
    assert faults.nft_ruleset([]) is None
    text = faults.nft_ruleset([{"kind": "block-port", "port": 29500, "reject": True},
                               {"kind": "block-ephemeral", "port": 29501}], loss_pct=0.5)
    assert text is not None
    assert 'iif "lo" accept' in text
    assert "tcp dport 29500 reject with tcp reset" in text
    assert "tcp dport { 29400, 29501 } accept" in text
    assert text.index("established,related accept") < text.index("    drop")
    assert 'oifname "eth0" numgen random mod 10000 < 50 drop' in text


def test_combine_applies_overrides_on_the_lab_shape() -> None:
    p = plan(LabSpec(name="x1", nodes=2, rate="1gbit", delay="1ms"))
    nf = faults.combine(p, 1, [{"kind": "rate", "rate": "10mbit"}, {"kind": "mtu", "mtu": 9000},
                               {"kind": "link-down"}, {"kind": "hostname-loopback"},
                               {"kind": "extra-iface", "iface": "docker0"}])
    assert nf.shaping.rate == "10mbit" and nf.shaping.delay_ms == 1.0
    assert nf.mtu == 9000 and not nf.link_up and nf.hostname_loopback
    assert nf.extra_iface == ("docker0", "198.19.254.2/24")
    base = faults.combine(p, 0, [])
    assert base.shaping.rate == "1gbit" and base.mtu == 1500 and base.link_up and base.nft is None


def test_port_mtu_sets_the_switch_port_and_leaves_the_node() -> None:
    p = plan(LabSpec(name="x1", nodes=2))
    rec = faults.normalize("port-mtu", {"mtu": 9000})
    nf = faults.combine(p, 0, [{"kind": "mtu", "mtu": 9000}, rec])
    assert nf.port_mtu == 9000 and nf.mtu == 9000
    assert faults.combine(p, 0, [{"kind": "mtu", "mtu": 9000}]).port_mtu is None
    with pytest.raises(ConfigError, match="bad MTU"):
        faults.normalize("port-mtu", {"mtu": 10})


def test_vip_dnats_the_address_to_node_0() -> None:
    p = plan(LabSpec(name="x1", nodes=3))
    rec = faults.normalize("vip", {"address": "198.18.0.250"})
    nf = faults.combine(p, 2, [rec])
    assert nf.nft is not None and "ip daddr 198.18.0.250 dnat ip to 198.18.0.1" in nf.nft
    assert "type nat hook output" in nf.nft
    for bad in ({"address": "10.0.0.1"}, {"address": "x"}, {}):
        with pytest.raises(ConfigError):
            faults.normalize("vip", bad)


def test_extra_iface_subnet_avoids_the_lab_subnet() -> None:
    p = plan(LabSpec(name="x1", nodes=2, subnet="198.19.0.0/16"))
    assert faults.extra_iface_cidr(p, 0) == "198.18.254.1/24"


def test_describe() -> None:
    assert faults.describe({"kind": "block-port", "port": 1, "reject": True}) == \
        "block-port 1 reject"
    assert faults.describe({"kind": "delay", "ms": 20.0}) == "delay ms=20"


def test_extra_iface_may_not_take_the_nodes_own_name() -> None:
    # it used to delete the node's lab NIC (eth0) and leave the node cut off; no root needed:
    # the name is checked before anything is touched
    from ddpnet.lab import Lab

    lab = Lab(name="qaunit", nodes=2)
    with pytest.raises(ConfigError, match="lab interface") as info:
        lab.fault("extra-iface", 0, iface="eth0")
    assert "docker0" in info.value.hint


def test_hosts_entry_validates_accumulates_per_name_and_comes_first() -> None:
    from ddpnet.lab.topology import hosts_file

    rec = faults.normalize("hosts-entry", {"host": "x1-n0", "address": "127.0.1.1"})
    assert rec == {"kind": "hosts-entry", "host": "x1-n0", "address": "127.0.1.1"}
    for opts, needle in (({"address": "127.0.1.1"}, "needs a host name"),
                         ({"host": "a b", "address": "127.0.1.1"}, "needs a host name"),
                         ({"host": "n0", "address": "nope"}, "bad address"),
                         ({"host": "n0", "address": "10.0.0.1"}, "neither loopback")):
        with pytest.raises(ConfigError, match=needle):
            faults.normalize("hosts-entry", opts)
    other = faults.normalize("hosts-entry", {"host": "x1-n1", "address": "198.18.0.99"})
    again = faults.normalize("hosts-entry", {"host": "x1-n0", "address": "198.18.0.98"})
    recs = faults.add(faults.add(faults.add([], rec), other), again)
    assert recs == [other, again]  # one entry per name, the latest wins
    p = plan(LabSpec(name="x1", nodes=2))
    nf = faults.combine(p, 1, recs)
    assert nf.hosts_entries == (("198.18.0.99", "x1-n1"), ("198.18.0.98", "x1-n0"))
    text = hosts_file(p, p.nodes[1], entries=nf.hosts_entries)
    assert "198.18.0.98\tx1-n0" in text and "198.18.0.1\tx1-n0" not in text  # replaced


def test_block_ephemeral_rejects_with_a_reset_when_asked() -> None:
    rec = faults.normalize("block-ephemeral", {"port": 29510, "reject": True})
    text = faults.nft_ruleset([rec])
    assert text is not None and text.rstrip().splitlines()[-3].strip() == \
        "reject with tcp reset"


def test_routing_faults_rebuild_the_nodes_addresses_and_routes() -> None:
    p = plan(LabSpec(name="x2", nodes=3, behind=(2,), router="routed"))
    n1, rt = p.nodes[1], p.router
    assert rt is not None
    base = faults.routing_lines(p, n1, faults.combine(p, 1, []))
    assert base.node == (f"addr add {n1.cidr} dev eth0", "link set eth0 up",
                         f"route add {rt.subnet} via {rt.outer} dev eth0 onlink")
    assert base.sysctl == ("net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.all.arp_ignore=0")
    recs = [faults.normalize("twin-nic", {"address": "198.18.0.202/24"}),
            faults.normalize("policy-route", {}), faults.normalize("no-route", {}),
            faults.normalize("address", {"address": "198.18.0.3/24"})]
    r = faults.routing_lines(p, n1, faults.combine(p, 1, recs))
    assert r.node[0] == "addr add 198.18.0.3/24 dev eth0"
    # no-route: the routed subnet's route is gone
    assert not any(line.startswith(f"route add {rt.subnet}") for line in r.node)
    assert "addr add 198.18.0.202/24 dev eth1" in r.node
    assert "route add 198.18.0.0/24 dev eth0 proto kernel scope link src 198.18.0.3 " \
        "metric 200" in r.node
    assert "rule add from 198.18.0.3 lookup 100 prio 100" in r.node
    assert "route add default via 198.19.254.254 dev wan0 onlink table 100" in r.node
    assert r.sysctl == ("net.ipv4.conf.all.rp_filter=1", "net.ipv4.conf.all.arp_ignore=1")
    assert "link set t1 master br0" in r.switch
    with pytest.raises(ConfigError, match=r"inside 198\.18\.0\.0/15"):
        faults.normalize("address", {"address": "10.0.0.2/24"})
    with pytest.raises(ConfigError, match="ADDRESS/PREFIX"):
        faults.normalize("twin-nic", {"address": "198.18.0.9"})

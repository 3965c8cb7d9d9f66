"""Interface selection over fixture interface tables: the route decides, user values are
validated, loopback only for single-host jobs (pure; no host state)."""

from __future__ import annotations

import pytest

from ddpnet.net.routes import Route
from ddpnet.net.select import GLOO, NCCL, TP, select
from tests.net.fixtures import LO, cfg, iface

ETH0 = iface("eth0", "198.18.0.3/24", "fe80::1/64")
DOCKER = iface("docker0", "172.17.0.1/16", kind="docker")
ROUTE = Route("eth0", "198.18.0.3", None, dst="198.18.0.1")
TABLE = (DOCKER, ETH0, LO)


def test_route_decides_and_reason_names_master_and_src() -> None:
    sel = select(cfg(), TABLE, ROUTE, {})
    assert sel.interface == "eth0" and sel.address == "198.18.0.3"
    assert (sel.gloo.value, sel.gloo.source) == ("eth0", "auto")
    assert sel.gloo.reason == "routes to MASTER_ADDR 198.18.0.1 from src 198.18.0.3"
    assert sel.nccl.value == "=eth0" and sel.tp.value == "eth0"
    assert sel.env() == {GLOO: "eth0", NCCL: "=eth0", TP: "eth0"}
    assert sel.error() is None


def test_extra_interface_sorting_first_is_not_chosen() -> None:
    extra = iface("aa0", "198.19.9.1/24", kind="virtual")
    sel = select(cfg(), (extra, *TABLE), ROUTE, {})
    assert sel.interface == "eth0"


def test_gateway_in_reason() -> None:
    route = Route("eth0", "198.18.0.3", "198.18.0.254", dst="198.18.5.1")
    sel = select(cfg("198.18.5.1"), TABLE, route, {})
    assert "via gateway 198.18.0.254" in sel.gloo.reason


def test_master_host_itself_uses_the_interface_owning_the_address() -> None:
    # the kernel answers "local ... dev lo" for the host's own address
    route = Route("lo", "198.18.0.1", None, dst="198.18.0.1", local=True)
    eth = iface("eth0", "198.18.0.1/24")
    sel = select(cfg(rank=0), (eth, LO), route, {})
    assert sel.gloo.value == "eth0" and "this host's address on eth0" in sel.gloo.reason
    assert sel.address == "198.18.0.1"


def test_master_name_shown_with_its_address() -> None:
    sel = select(cfg("node0"), TABLE, ROUTE, {})
    assert "MASTER_ADDR node0 (198.18.0.1)" in sel.gloo.reason


def test_two_interfaces_in_one_subnet_follow_the_kernel() -> None:
    eth1 = iface("eth1", "198.18.0.4/24")
    route = Route("eth1", "198.18.0.4", None, dst="198.18.0.1")
    sel = select(cfg(), (ETH0, eth1, LO), route, {})
    assert sel.interface == "eth1" and sel.address == "198.18.0.4"
    assert "also on that subnet: eth0" in sel.gloo.reason


def test_ipv6_only_host() -> None:
    eth = iface("eth0", "fd00::3/64", "fe80::3/64")
    route = Route("eth0", "fd00::3", None, dst="fd00::1")
    sel = select(cfg("fd00::1"), (eth, LO), route, {})
    assert sel.gloo.value == "eth0" and sel.address == "fd00::3"
    # a user-set interface with only IPv4 cannot reach an IPv6 master
    v4 = iface("eth1", "198.18.0.3/24")
    bad = select(cfg("fd00::1"), (eth, v4, LO), route, {GLOO: "eth1"})
    assert bad.gloo.cause == "ifname-no-address" and "IPv6" in bad.gloo.reason


def test_loopback_only_for_single_host_jobs() -> None:
    route = Route("lo", "127.0.0.1", None, dst="127.0.0.1", local=True)
    single = select(cfg("127.0.0.1", rank=0, world=2, nodes=1), TABLE, route, {})
    assert single.gloo.value == "lo" and single.gloo.ok
    multi = select(cfg("127.0.0.1", rank=0), TABLE, route, {})
    assert multi.gloo.cause == "master-loopback"
    err = multi.error(host="n1", rank=0)
    assert err is not None and err.cause == "master-loopback" and "n1" in err.message
    # RANK/WORLD_SIZE alone only *derive* a node count: a loopback master means one host
    derived = select(cfg("127.0.0.1", rank=0, num_nodes_source="derived"), TABLE, route, {})
    assert derived.gloo.value == "lo" and derived.gloo.ok


def test_user_value_wins_when_valid_and_is_not_set_again() -> None:
    eth1 = iface("eth1", "198.18.1.3/24")
    sel = select(cfg(), (ETH0, eth1, LO), ROUTE, {GLOO: "eth1", NCCL: "eth"})
    assert (sel.gloo.value, sel.gloo.source) == ("eth1", GLOO)
    assert "routes through eth0" in sel.gloo.reason
    assert sel.nccl.source == NCCL and "matches eth0, eth1" in sel.nccl.reason
    assert sel.interface == "eth1" and sel.address == "198.18.1.3"
    assert sel.env() == {TP: "eth0"}  # only automatic choices are exported


def test_gloo_list_of_plain_names() -> None:
    eth1 = iface("eth1", "198.18.1.3/24")
    sel = select(cfg(), (ETH0, eth1, LO), ROUTE, {GLOO: "eth0,eth1"})
    assert sel.gloo.ok and sel.interface == "eth0"


@pytest.mark.parametrize(
    ("var", "value", "cause", "needle"),
    [
        (GLOO, "^lo", "ifname-syntax", "NCCL syntax"),
        (GLOO, "=eth0", "ifname-syntax", "NCCL syntax"),
        (GLOO, "198.18.0.3", "ifname-syntax", "IP address"),
        (GLOO, "fe80::1%eth0", "ifname-syntax", "IP address"),
        (GLOO, "[fd00::1]:29500", "ifname-syntax", "IP address"),
        (TP, "fd00::1", "ifname-syntax", "IP address"),
        (GLOO, "eth0,", "ifname-syntax", "empty entry"),
        (GLOO, "ens5", "ifname-missing", "no interface ens5"),
        (GLOO, "eth0,ens5", "ifname-missing", "no interface ens5"),
        (GLOO, "down0", "ifname-down", "is down"),
        (GLOO, "lo", "hostname-loopback", "loopback in a multi-node job"),
        (GLOO, "bare0", "ifname-no-address", "no IPv4 address"),
        (TP, "eth0,eth1", "ifname-syntax", "one interface name"),
        (TP, "^lo", "ifname-syntax", "NCCL syntax"),
        (NCCL, "eth0,,x", "ifname-syntax", "empty entry"),
        (NCCL, "10.0.0.1", "ifname-syntax", "is an address"),
        (NCCL, "fe80::1%eth0", "ifname-syntax", "is an address"),
        (NCCL, "=ens5", "ifname-missing", "matches no interface"),
        (NCCL, "^docker,eth,lo,bare,down", "ifname-missing", "matches no interface"),
        (NCCL, "bare", "ifname-no-address", "none up with an IPv4"),
        (NCCL, "=lo", "hostname-loopback", "only loopback"),
    ],
)
def test_user_values_are_validated(var: str, value: str, cause: str, needle: str) -> None:
    table = (*TABLE, iface("down0", "198.18.2.3/24", up=False), iface("bare0"))
    sel = select(cfg(), table, ROUTE, {var: value})
    choice = sel.choices()[var]
    assert choice.cause == cause, choice
    assert needle in choice.reason
    assert "ddpnet.init() picks eth0" in choice.hint or choice.hint.startswith(
        ("ip link", "export"))
    assert var not in sel.env()


def test_an_nccl_exclusion_leaving_loopback_first_in_kernel_order_is_loopback() -> None:
    # NCCL walks getifaddrs in the kernel's order: lo (index 1) comes before eth0
    order = ("lo", "eth0", "docker0")
    sel = select(cfg(), TABLE, ROUTE, {NCCL: "^docker0"}, order=order)
    assert sel.nccl.cause == "hostname-loopback", sel.nccl
    assert "NCCL binds the first match in the kernel's interface order, lo (127.0.0.1)" \
        in sel.nccl.reason
    assert sel.nccl.hint.endswith(f"or exclude lo too: {NCCL}=^docker0,lo")
    assert select(cfg(), TABLE, ROUTE, {NCCL: "^docker0,lo"}, order=order).nccl.ok
    # one host: loopback is fine; by name (no order known) eth0 comes first
    assert select(cfg(nodes=1, world=1, rank=0), TABLE, ROUTE, {NCCL: "^docker0"},
                  order=order).nccl.ok
    assert select(cfg(), TABLE, ROUTE, {NCCL: "^docker0"}).nccl.ok


def test_ip_in_gloo_ifname_hint_names_the_owner() -> None:
    sel = select(cfg(), TABLE, ROUTE, {GLOO: "198.18.0.3"})
    assert sel.gloo.hint == f"export {GLOO}=eth0"


def test_error_follows_backend() -> None:
    sel = select(cfg(), TABLE, ROUTE, {NCCL: "^eth0,docker,lo"})
    assert sel.nccl.cause == "ifname-missing"
    assert sel.error(backend="gloo") is None
    err = sel.error(backend="nccl", host="n2", rank=3)
    assert err is not None and err.cause == "ifname-missing" and err.rank == 3
    assert err.detail == f"{NCCL}=^eth0,docker,lo" and err.hint


def test_one_character_gloo_value_is_ignored_like_torch() -> None:
    sel = select(cfg(), TABLE, ROUTE, {GLOO: "x"})
    assert sel.gloo.source == "auto"


def test_ifname_argument_forces_all_three() -> None:
    eth1 = iface("eth1", "198.18.1.3/24")
    sel = select(cfg(), (ETH0, eth1, LO), ROUTE, {GLOO: "eth0"}, ifname="eth1")
    assert [c.value for c in sel.choices().values()] == ["eth1", "=eth1", "eth1"]
    assert {c.source for c in sel.choices().values()} == {"argument ifname"}


@pytest.mark.parametrize("bad", ["nosuch0", "^lo"])
def test_bad_ifname_argument_is_named_as_the_argument(bad: str) -> None:
    # the user exported nothing: the problem and its fix name ifname=, not GLOO_SOCKET_IFNAME
    sel = select(cfg(), (ETH0, LO), ROUTE, {}, ifname=bad)
    problems = sel.problems()
    assert problems
    for choice in problems.values():
        assert choice.reason.startswith(f"ifname={bad!r}"), choice.reason
        assert "pass ifname=" in choice.hint and "eth0" in choice.hint
        assert "SOCKET_IFNAME" not in choice.hint


def test_no_route() -> None:
    sel = select(cfg(), TABLE, None, {})
    assert sel.gloo.value is None and sel.gloo.source == "unset"
    assert "no route to MASTER_ADDR 198.18.0.1" in sel.gloo.reason
    assert sel.env() == {}


def test_no_master_addr_prefers_physical_over_virtual_and_never_docker() -> None:
    veth = iface("aveth", "198.19.0.3/24", kind="virtual")
    sel = select(cfg(master_source="default", init_method="file:///s/f"),
                 (veth, DOCKER, ETH0, LO), None, {})
    assert sel.gloo.value == "eth0" and "first up physical" in sel.gloo.reason
    none = select(cfg(master_source="default"), (DOCKER, LO), None, {})
    assert none.gloo.value is None


def test_to_dict_is_json_ready() -> None:
    import json

    data = select(cfg(), TABLE, ROUTE, {GLOO: "^lo"}).to_dict()
    json.dumps(data)
    assert data["variables"][GLOO]["cause"] == "ifname-syntax"
    assert data["variables"][NCCL]["source"] == "auto"


def test_hostname_on_loopback_is_noted_for_multi_node_jobs() -> None:
    from ddpnet.net.names import from_addresses

    me = from_addresses("n2", ["127.0.1.1", "198.18.0.3"])  # Debian's /etc/hosts order
    sel = select(cfg(), TABLE, ROUTE, {}, hostname=me)
    assert sel.notes == ("hostname n2 resolves first to loopback (127.0.1.1, 198.18.0.3): "
                         "without GLOO_SOCKET_IFNAME gloo binds 127.0.1.1 and peers cannot "
                         "connect; ddpnet.init() sets it",)
    fine = from_addresses("n2", ["198.18.0.3", "127.0.1.1"])
    assert select(cfg(), TABLE, ROUTE, {}, hostname=fine).notes == ()
    route = Route("lo", "127.0.0.1", None, dst="127.0.0.1", local=True)
    assert select(cfg("127.0.0.1", nodes=1), TABLE, route, {}, hostname=me).notes == ()


def test_loopback_master_with_a_given_local_world_size_spans_hosts() -> None:
    # a single-node config copied to a cluster: LOCAL_WORLD_SIZE=1 (given) < WORLD_SIZE=4
    from dataclasses import replace
    from types import MappingProxyType

    route = Route("lo", "127.0.0.1", None, dst="127.0.0.1", local=True)
    base = cfg("localhost", rank=2, num_nodes_source="derived")
    given = replace(base, sources=MappingProxyType({**base.sources,
                                                    "local_world_size": "LOCAL_WORLD_SIZE"}))
    sel = select(given, TABLE, route, {})
    assert sel.gloo.cause == "master-loopback"
    assert "WORLD_SIZE=4 with LOCAL_WORLD_SIZE=1" in sel.gloo.reason
    assert sel.gloo.hint.startswith("export MASTER_ADDR=<rank-0 host's address>")
    # on node 0 the fix names this host's own cluster address
    node0 = select(replace(given, rank=0, node_rank=0), TABLE, route, {})
    assert "export MASTER_ADDR=198.18.0.3" in node0.gloo.hint


def test_master_name_resolving_to_loopback_here_names_the_hosts_file() -> None:
    route = Route("lo", "127.0.1.1", None, dst="127.0.1.1", local=True)
    sel = select(cfg("node0", rank=2), TABLE, route, {})
    assert sel.gloo.cause == "master-loopback"
    assert "MASTER_ADDR node0 resolves to loopback 127.0.1.1 on this host" in sel.gloo.reason
    assert "getent hosts node0" in sel.gloo.hint and "/etc/hosts" in sel.gloo.hint
    # localhost is loopback by design: the fix is the address, not /etc/hosts
    local = select(cfg("localhost", rank=2), TABLE, route, {})
    assert "/etc/hosts" not in local.gloo.hint


def test_unspecified_master_is_loopback_in_disguise() -> None:
    # MASTER_ADDR=0.0.0.0 (a bind address copied from a server config): a connect reaches
    # this very host, so every worker would wait on itself
    route = Route("lo", "127.0.0.1", None, dst="0.0.0.0", local=True)
    sel = select(cfg("0.0.0.0", rank=2), TABLE, route, {})
    assert sel.gloo.cause == "master-loopback"
    assert "MASTER_ADDR 0.0.0.0 is the unspecified address (it reaches this host)" \
        in sel.gloo.reason
    v6 = select(cfg("::", rank=2), TABLE, Route("lo", "::1", None, dst="::", local=True), {})
    assert v6.gloo.cause == "master-loopback"
    one_host = select(cfg("0.0.0.0", rank=0, world=2, nodes=1), TABLE, route, {})
    assert one_host.gloo.ok

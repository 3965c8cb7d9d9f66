"""The job's interface, one rule after the other (pure ``choose_interface`` over fixture
tables, and the ``choose_for_host`` edge with the host readers replaced): flag, the user's
*_SOCKET_IFNAME, cluster subnet, route to MASTER_ADDR, default route, first usable."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddpnet.errors import ConfigError
from ddpnet.net import interfaces as interfaces_mod
from ddpnet.net import select as select_mod
from ddpnet.net.routes import Route, default_route_iface, parse_default_route
from ddpnet.net.select import (
    GLOO,
    NCCL,
    TP,
    Ask,
    Selection,
    choose_for_host,
    choose_interface,
    select,
)
from tests.net.fixtures import LO, cfg, iface

ETH0 = iface("eth0", "192.168.1.5/24")
IB0 = iface("ib0", "10.0.0.11/24", kind="infiniband")
DOCKER = iface("docker0", "172.17.0.1/16", kind="docker")
TABLE = (LO, DOCKER, ETH0, IB0)
NET = ipaddress.ip_network("10.0.0.0/24")


def routed(name: str = "eth0", src: str = "192.168.1.5", master: str = "192.168.1.1"
           ) -> Selection:
    return select(cfg(master), TABLE, Route(name, src, None, dst=master), {})


def loopback_selection() -> Selection:
    route = Route("lo", "127.0.0.1", None, dst="127.0.0.1", local=True)
    return select(cfg("127.0.0.1", rank=0, world=2, nodes=1), TABLE, route, {})


# --------------------------------------------------------------------------- rule order

def test_tune_order_flag_subnet_route_default_route() -> None:
    # the assertions of tune's former choose_interface, through the one selector
    ifs = (LO, ETH0, IB0)
    assert choose_interface(ifs, Ask(flag="eth0")).name == "eth0"
    assert choose_interface(ifs, Ask(subnet=NET)).name == "ib0"
    assert choose_interface(ifs, selection=routed()).reason.startswith(
        "routes to MASTER_ADDR")
    picked = choose_interface(ifs, Ask(loopback_ok=False), selection=loopback_selection(),
                              default_route="eth0")
    assert (picked.name, picked.source) == ("eth0", "default-route")
    with pytest.raises(ConfigError, match="no such interface"):
        choose_interface(ifs, Ask(flag="ens99", flag_name="--iface"))


def test_flag_wins_over_everything_and_sets_all_three() -> None:
    c = choose_interface(TABLE, Ask(flag="ib0", subnet=NET), environ={GLOO: "eth0"},
                         selection=routed(), default_route="eth0")
    assert (c.name, c.source, c.reason, c.address) == ("ib0", "flag", "--iface", "10.0.0.11")
    assert c.env == {GLOO: "ib0", NCCL: "ib0", TP: "ib0"}


def test_missing_flag_names_the_flag_and_the_interfaces_here() -> None:
    with pytest.raises(ConfigError) as err:
        choose_interface(TABLE, Ask(flag="ens99", flag_name="--iface"))
    assert str(err.value).startswith("--iface ens99: no such interface")
    assert "eth0" in err.value.hint and "ib0" in err.value.hint


def test_a_down_flag_is_refused_here_with_the_up_ones() -> None:
    down = iface("eth1", "192.168.2.5/24", up=False)
    with pytest.raises(ConfigError) as err:
        choose_interface((*TABLE, down), Ask(flag="eth1"))
    assert str(err.value) == "--iface eth1: the interface is down on this host"
    assert err.value.hint.startswith("ip link set eth1 up") and "eth0" in err.value.hint
    assert "eth1" not in err.value.hint.partition("up: ")[2]
    assert choose_interface((*TABLE, down), Ask(flag="eth1", here=False)).name == "eth1"


def test_flag_for_other_hosts_is_passed_on_unchecked() -> None:
    c = choose_interface(TABLE, Ask(flag="ens99", here=False))
    assert (c.name, c.source, c.address) == ("ens99", "flag", None)


def test_user_variables_win_over_subnet_and_route_and_are_forwarded_as_set() -> None:
    env = {NCCL: "^docker,lo", GLOO: "ib0", "OTHER": "x", TP: " "}
    c = choose_interface(TABLE, Ask(subnet=ipaddress.ip_network("192.168.1.0/24")),
                         environ=env, selection=routed())
    assert (c.name, c.source) == ("ib0", "environ")
    assert c.env == {GLOO: "ib0", NCCL: "^docker,lo"}  # our order, blank TP left out
    assert c.reason == f"{GLOO}, {NCCL} already set"


def test_user_variable_naming_no_interface_here_falls_through_unless_elsewhere() -> None:
    env = {GLOO: "ens99"}
    here = choose_interface(TABLE, environ=env, selection=routed())
    assert (here.name, here.source) == ("eth0", "route")
    away = choose_interface(TABLE, Ask(here=False), environ={NCCL: "=ens99"})
    assert (away.name, away.source, away.env) == ("ens99", "environ", {NCCL: "=ens99"})


@pytest.mark.parametrize(("env", "name"), [
    ({NCCL: "^lo,docker"}, "eth0"),  # an exclusion names nothing: the route decides
    ({NCCL: "=ib0"}, "ib0"), ({TP: "ib0", NCCL: "^lo"}, "ib0"),
    ({GLOO: "ib0,eth0", NCCL: "=eth0"}, "ib0"),  # gloo's plain names first
])
def test_the_interface_the_user_s_variables_name(env: dict[str, str], name: str) -> None:
    assert choose_interface(TABLE, environ=env, selection=routed()).name == name


def test_user_loopback_is_skipped_where_a_nic_is_needed() -> None:
    c = choose_interface(TABLE, Ask(loopback_ok=False), environ={GLOO: "lo"},
                         selection=routed())
    assert (c.name, c.source) == ("eth0", "route")
    assert choose_interface(TABLE, environ={GLOO: "lo"}).source == "environ"


def test_subnet_picks_the_address_inside_it() -> None:
    two = iface("eth1", "192.168.9.9/24", "10.0.0.12/24")
    c = choose_interface((LO, ETH0, two), Ask(subnet=NET), selection=routed())
    assert (c.name, c.source, c.address) == ("eth1", "subnet", "10.0.0.12")
    assert c.reason == "has 10.0.0.12 in the cluster subnet 10.0.0.0/24"


def test_subnet_without_a_match_goes_on_to_the_route() -> None:
    c = choose_interface(TABLE, Ask(subnet=ipaddress.ip_network("10.9.0.0/16")),
                         selection=routed())
    assert c.source == "route"


def test_route_carries_init_s_variables_and_reason() -> None:
    c = choose_interface(TABLE, selection=routed())
    assert (c.name, c.source, c.address) == ("eth0", "route", "192.168.1.5")
    assert c.reason == "routes to MASTER_ADDR 192.168.1.1 from src 192.168.1.5"
    assert c.env == {GLOO: "eth0", NCCL: "=eth0", TP: "eth0"}


def test_loopback_is_an_answer_for_a_one_host_job_unless_a_nic_is_needed() -> None:
    c = choose_interface(TABLE, selection=loopback_selection())
    assert (c.name, c.source) == ("lo", "route")
    nic = choose_interface(TABLE, Ask(loopback_ok=False), selection=loopback_selection())
    assert (nic.name, nic.source) == ("ib0", "first-usable")  # infiniband before physical
    assert "first up infiniband interface" in nic.reason


def test_default_route_on_loopback_is_skipped_when_a_nic_is_needed() -> None:
    c = choose_interface(TABLE, Ask(loopback_ok=False), default_route="lo")
    assert c.source == "first-usable" and c.name == "ib0"


def test_first_usable_never_docker_and_none_when_nothing_is_up() -> None:
    c = choose_interface((LO, DOCKER, ETH0))
    assert (c.name, c.source) == ("eth0", "first-usable")
    assert c.reason.startswith("no MASTER_ADDR to route to: first up physical")
    down = iface("eth0", "192.168.1.5/24", up=False)
    none = choose_interface((LO, DOCKER, down))
    assert (none.name, none.source) == (None, "none")
    assert "no non-loopback interface is up" in none.reason


def test_without_fallback_no_route_means_no_choice_with_the_selection_s_reason() -> None:
    sel = select(cfg(), TABLE, None, {})  # no route to MASTER_ADDR
    c = choose_interface(TABLE, Ask(fallback=False), selection=sel, default_route="eth0")
    assert (c.name, c.source, c.env) == (None, "none", {})
    assert "no route to MASTER_ADDR 198.18.0.1" in c.reason
    with_fallback = choose_interface(TABLE, selection=sel, default_route="eth0")
    assert (with_fallback.name, with_fallback.reason) == ("eth0", "carries the default route")


def test_to_dict() -> None:
    d = choose_interface(TABLE, Ask(flag="eth0")).to_dict()
    assert d == {"name": "eth0", "source": "flag", "reason": "--iface",
                 "address": "192.168.1.5", "env": {GLOO: "eth0", NCCL: "eth0", TP: "eth0"}}


# --------------------------------------------------------------------------- default route

ROUTE_TABLE = """\
Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth1\t0000000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
eth0\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0
"""


def test_default_route_parsed_from_proc_net_route(tmp_path: Path) -> None:
    assert parse_default_route(ROUTE_TABLE) == "eth0"
    assert parse_default_route(ROUTE_TABLE.splitlines()[0]) is None
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "route").write_text(ROUTE_TABLE)
    assert default_route_iface(tmp_path) == "eth0"
    assert default_route_iface(tmp_path / "absent") is None


# --------------------------------------------------------------------------- the edge

@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[str]]:
    """This host = TABLE, MASTER_ADDR routed through eth0, default route via ib0; yields
    the list of route look-ups made."""
    looked: list[str] = []

    def fake_select(cfg_: object, env: object) -> object:
        looked.append("route")
        return routed()

    monkeypatch.setattr(interfaces_mod, "list_interfaces", lambda: TABLE)
    monkeypatch.setattr(select_mod, "select_for_host", fake_select)
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "route").write_text(ROUTE_TABLE.replace("eth0\t0000", "ib0\t0000"))
    yield looked


def test_edge_reads_the_route_only_when_needed(host: list[str], tmp_path: Path) -> None:
    assert choose_for_host(Ask(flag="ib0"), environ={}, proc=tmp_path).source == "flag"
    assert choose_for_host(environ={GLOO: "ib0"}, proc=tmp_path).source == "environ"
    assert host == []
    c = choose_for_host(environ={}, proc=tmp_path)
    assert (c.name, c.source) == ("eth0", "route") and host == ["route"]
    off = choose_for_host(environ={}, route_master=False, proc=tmp_path)
    assert (off.name, off.source) == ("ib0", "default-route")


def test_edge_turns_a_broken_launcher_environment_into_a_reason(
        monkeypatch: pytest.MonkeyPatch, host: list[str], tmp_path: Path) -> None:
    def broken(cfg_: object, env: object) -> object:
        raise ConfigError("WORLD_SIZE='abc' is not an integer", "fix it")

    monkeypatch.setattr(select_mod, "select_for_host", broken)
    c = choose_for_host(Ask(fallback=False), environ={}, proc=tmp_path)
    assert (c.name, c.source) == (None, "none")
    assert c.reason == "no interface selection (WORLD_SIZE='abc' is not an integer)"
    assert choose_for_host(environ={}, proc=tmp_path).source == "default-route"

"""Route lookup (``ip -j route get`` parsing and the real kernel) and name resolution."""

from __future__ import annotations

import socket

import pytest

from ddpnet.net.names import from_addresses, resolve_host
from ddpnet.net.routes import (
    Route,
    _route_by_connect,
    neighbor_state,
    parse_neigh,
    parse_route_get,
    route_to,
)


def test_parse_unicast_with_gateway() -> None:
    text = ('[{"dst":"198.18.5.1","gateway":"198.18.0.254","dev":"eth0",'
            '"prefsrc":"198.18.0.3","flags":[],"uid":0,"cache":[]}]')
    assert parse_route_get(text, "198.18.5.1") == Route(
        "eth0", "198.18.0.3", "198.18.0.254", dst="198.18.5.1")


def test_parse_local() -> None:
    text = ('[{"type":"local","dst":"198.18.0.1","dev":"lo","prefsrc":"198.18.0.1",'
            '"flags":[],"uid":0,"cache":["local"]}]')
    route = parse_route_get(text, "198.18.0.1")
    assert route is not None and route.local and route.iface == "lo"


@pytest.mark.parametrize("text", ['[{"type":"unreachable","dst":"198.18.9.9"}]', "[]",
                                  "not json", '[{"type":"blackhole","dev":"lo"}]'])
def test_parse_unusable(text: str) -> None:
    assert parse_route_get(text, "198.18.9.9") is None


def test_real_route_to_loopback() -> None:
    route = route_to("127.0.0.1")
    assert route is not None and route.iface == "lo" and route.dst == "127.0.0.1"
    fallback = _route_by_connect("127.0.0.1")
    assert fallback is not None and fallback.iface == "lo"


def test_route_to_rejects_names() -> None:
    with pytest.raises(ValueError):
        route_to("localhost")


def test_from_addresses_marks_loopback_and_dedups() -> None:
    res = from_addresses("n1", ["127.0.1.1", "198.18.0.3", "127.0.1.1", "fe80::1%eth0",
                                "fd00::1%eth0"])
    # a link-local answer keeps its zone (nothing binds or dials it without); others lose it
    assert res.addresses == ("127.0.1.1", "198.18.0.3", "fe80::1%eth0", "fd00::1")
    assert res.any_loopback and not res.only_loopback
    assert from_addresses("n1", ["127.0.1.1"]).only_loopback
    assert not from_addresses("n1", []).ok


def test_real_resolution() -> None:
    assert resolve_host("127.0.0.1").addresses == ("127.0.0.1",)
    local = resolve_host("localhost")
    assert local.ok and local.only_loopback
    me = resolve_host()
    assert me.name == socket.gethostname()
    bad = resolve_host("no-such-host.invalid", timeout=5)
    assert not bad.ok and bad.error


@pytest.mark.parametrize(
    ("text", "state"),
    [('[{"dst":"198.18.0.9","dev":"eth0","state":["FAILED"]}]', "FAILED"),
     ('[{"dst":"198.18.0.1","dev":"eth0","lladdr":"aa:bb:cc:dd:ee:ff","state":["REACHABLE"]}]',
      "REACHABLE"),
     ("[]", None), ("", None)],
)
def test_parse_neigh(text: str, state: str | None) -> None:
    assert parse_neigh(text) == state


def test_real_neighbor_lookup_of_unknown_address_is_empty() -> None:
    assert neighbor_state("198.18.255.254") is None  # a cache lookup: sends nothing


def test_hosts_file_lines_and_names_of_an_address() -> None:
    from ddpnet.net.names import hosts_lines, hosts_names

    content = ("127.0.0.1 localhost\n# 198.18.0.9 n0 (a comment)\n198.18.0.2  n0.lab\t n0 \n"
               "198.18.0.2 n1 n1.lab # the worker\n")
    assert hosts_lines(content, "n0") == ["198.18.0.2 n0.lab n0"]
    assert hosts_lines(content, "n0.lab") == ["198.18.0.2 n0.lab n0"]  # its short form too
    assert hosts_names(content, "198.18.0.2") == ["n0.lab", "n0", "n1", "n1.lab"]
    assert hosts_lines("", "n0") == [] and hosts_names(content, "10.0.0.1") == []

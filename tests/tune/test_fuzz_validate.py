"""Property-based: tune's flag parsers (subnet, ports, port range, static IP, gateway, DNS)
give a valid value or one clean ConfigError (exit 2), never another exception."""

from __future__ import annotations

import ipaddress

from hypothesis import given
from hypothesis import strategies as st

from ddpnet.tune.validate import (
    parse_dns,
    parse_port,
    parse_port_range,
    parse_static_ip,
    parse_subnet,
)
from tests.fuzzing import FUZZ, clean, int_text, text

_addr = st.one_of(st.ip_addresses().map(str), text)
_cidr = st.one_of(st.tuples(st.ip_addresses(), st.integers(-1, 200)).map(lambda t: f"{t[0]}/{t[1]}"),
                  _addr)


@FUZZ
@given(_cidr)
def test_subnet_parses_or_fails_cleanly(value: str) -> None:
    net = clean(parse_subnet, value)
    assert net is None or net.prefixlen > 0


@FUZZ
@given(st.one_of(int_text, text, st.tuples(int_text, int_text).map("-".join)))
def test_ports_parse_or_fail_cleanly(value: str) -> None:
    port = clean(parse_port, value)
    assert port is None or 1 <= port <= 65535
    span = clean(parse_port_range, value)
    assert span is None or 1024 <= span[0] < span[1] <= 65535


@FUZZ
@given(_cidr, st.one_of(st.none(), _addr), st.one_of(st.none(), text,
                                                    st.lists(_addr, max_size=3).map(",".join)))
def test_static_ip_and_dns_parse_or_fail_cleanly(cidr: str, gateway: str | None,
                                                 dns: str | None) -> None:
    iface = clean(parse_static_ip, cidr, gateway)
    if iface is not None and gateway is not None:
        assert ipaddress.ip_address(gateway) in iface.network
    servers = clean(parse_dns, dns)
    assert servers is None or all(ipaddress.ip_address(s) for s in servers)


def test_a_trailing_newline_does_not_split_the_error_line() -> None:
    # found by the fuzzer: "--port-range 1-1\n" printed the value's newline inside the message
    assert clean(parse_port_range, "1-1\n") is None
    assert clean(parse_subnet, "10.0.0.1/24\n") is None
    assert clean(parse_static_ip, "10.0.0.1\n", None) is None

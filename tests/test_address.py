"""Every address form a user can type parses, or is refused with one line and a fix."""

from __future__ import annotations

import pytest

from ddpnet.address import NO_PORT, OPTIONAL_PORT, REQUIRED_PORT, parse_address
from ddpnet.errors import ConfigError

GOOD = [
    # text, port mode, url, (host, kind, zone, port)
    ("10.0.0.1", NO_PORT, False, ("10.0.0.1", "ipv4", "", None)),
    ("node01", NO_PORT, False, ("node01", "name", "", None)),
    ("gpu_01.cluster.local.", NO_PORT, False, ("gpu_01.cluster.local.", "name", "", None)),
    ("fd00::1", NO_PORT, False, ("fd00::1", "ipv6", "", None)),
    ("FD00:0::1", NO_PORT, False, ("fd00::1", "ipv6", "", None)),
    ("fe80::1", NO_PORT, False, ("fe80::1", "ipv6", "", None)),
    ("fe80::1%eth0", NO_PORT, False, ("fe80::1", "ipv6", "eth0", None)),
    ("fe80::1%3", NO_PORT, False, ("fe80::1", "ipv6", "3", None)),
    ("::ffff:10.0.0.1", NO_PORT, False, ("::ffff:a00:1", "ipv6", "", None)),
    ("10.0.0.1:29500", OPTIONAL_PORT, False, ("10.0.0.1", "ipv4", "", 29500)),
    ("node01:1", REQUIRED_PORT, False, ("node01", "name", "", 1)),
    ("[fd00::1]:29500", REQUIRED_PORT, False, ("fd00::1", "ipv6", "", 29500)),
    ("[fe80::1%eth0]:29500", OPTIONAL_PORT, False, ("fe80::1", "ipv6", "eth0", 29500)),
    ("[fe80::1%25eth0]:29500", REQUIRED_PORT, True, ("fe80::1", "ipv6", "eth0", 29500)),
    ("[fd00::1]", OPTIONAL_PORT, False, ("fd00::1", "ipv6", "", None)),
    ("fd00::1", OPTIONAL_PORT, False, ("fd00::1", "ipv6", "", None)),
]


@pytest.mark.parametrize(("text", "mode", "url", "want"), GOOD,
                         ids=[f"{g[0]}-{g[1]}" for g in GOOD])
def test_every_form_parses(text: str, mode: str, url: bool,
                           want: tuple[str, str, str, int | None]) -> None:
    a = parse_address(text, "MASTER_ADDR", port=mode, url=url)
    assert (a.host, a.kind, a.zone, a.port) == want


def test_link_local_needs_a_zone_and_dials_with_it() -> None:
    bare = parse_address("fe80::1")
    assert bare.link_local and bare.needs_zone
    zoned = parse_address("fe80::1%eth0")
    assert zoned.link_local and not zoned.needs_zone
    assert zoned.dial == "fe80::1%eth0" and zoned.endpoint(29500) == "[fe80::1%eth0]:29500"
    assert not parse_address("fd00::1").link_local
    assert not parse_address("node01").needs_zone
    assert parse_address("10.0.0.1").endpoint(1) == "10.0.0.1:1"


BAD = [
    ("", NO_PORT, "is empty"),
    ("   ", NO_PORT, "is empty"),
    (" 10.0.0.1 ", NO_PORT, "write it without: 10.0.0.1"),
    ("node01\n", NO_PORT, "whitespace around it"),
    ("node 01", NO_PORT, "whitespace"),
    ("no\x00de", NO_PORT, "control characters"),
    ("10.0.0.256", NO_PORT, "not an IPv4 address"),
    ("10.0.1", NO_PORT, "not an IPv4 address"),
    ("node/01", NO_PORT, "'/' is not allowed"),
    ("nöde", NO_PORT, "is not allowed"),
    ("-node", NO_PORT, "is not a host name"),
    ("a..b", NO_PORT, "is not a host name"),
    ("x" * 64, NO_PORT, "is not a host name"),
    ("10.0.0.1:29500", NO_PORT, "holds a port"),
    ("node01:29500", NO_PORT, "MASTER_PORT=29500"),
    ("[fd00::1]:29500", NO_PORT, "holds a port"),
    ("[fd00::1]", NO_PORT, "without brackets: fd00::1"),
    ("[fd00::1", OPTIONAL_PORT, "does not close"),
    ("[fd00::1]x", OPTIONAL_PORT, "not :PORT"),
    ("[10.0.0.1]:1", OPTIONAL_PORT, "not an IPv6 address"),
    ("[fd00::1]:0", OPTIONAL_PORT, "not a number in 1..65535"),
    ("[fd00::1]:70000", OPTIONAL_PORT, "not a number in 1..65535"),
    ("node01:http", OPTIONAL_PORT, "not a number"),
    ("node01", REQUIRED_PORT, "has no port"),
    ("[fd00::1]", REQUIRED_PORT, "has no port"),
    ("fd00::1", REQUIRED_PORT, "write [fd00::1]:29500"),
    ("fd00::x:29500", OPTIONAL_PORT, "not an IPv6 address"),
    ("fd00::1:29500", OPTIONAL_PORT, "write [fd00::1]:29500"),
    ("fd00:::1", NO_PORT, "not an IPv6 address"),
    ("fd00::1:29500", NO_PORT, "MASTER_PORT=29500"),
    ("fd00::1:29500", NO_PORT, "address alone (fd00::1)"),
    ("fe80::1%", NO_PORT, "not an interface name"),
    ("fe80::1%eth/0", NO_PORT, "not an interface name"),
    ("fe80::1%averyveryverylongname", NO_PORT, "not an interface name"),
    ("10.0.0.1%eth0", NO_PORT, "only an IPv6 address takes"),
    ("node%eth0", NO_PORT, "only an IPv6 address takes"),
]


@pytest.mark.parametrize(("text", "mode", "needle"), BAD, ids=[repr(b[0]) for b in BAD])
def test_bad_forms_are_one_line_with_a_fix(text: str, mode: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_address(text, "MASTER_ADDR", port=mode)
    assert str(info.value).startswith("MASTER_ADDR "), info.value
    assert needle in f"{info.value} {info.value.hint}", (str(info.value), info.value.hint)
    assert info.value.hint and "\n" not in str(info.value)

"""NCCL_SOCKET_IFNAME syntax: prefixes, ^ exclusion, = exact match, and what is rejected."""

from __future__ import annotations

import pytest

from ddpnet.net.nccl import IfnameSyntaxError, NcclIfname, match, parse_nccl_ifname

NAMES = ("docker0", "eth0", "eth01", "eth1", "ib0", "lo", "veth3a")


@pytest.mark.parametrize(
    ("text", "expected", "matched"),
    [
        ("eth", NcclIfname(False, False, ("eth",)), ("eth0", "eth01", "eth1")),
        ("=eth0", NcclIfname(False, True, ("eth0",)), ("eth0",)),
        ("^docker,lo", NcclIfname(True, False, ("docker", "lo")),
         ("eth0", "eth01", "eth1", "ib0", "veth3a")),
        ("^=docker0,lo", NcclIfname(True, True, ("docker0", "lo")),
         ("eth0", "eth01", "eth1", "ib0", "veth3a")),
        ("ib,eth1", NcclIfname(False, False, ("ib", "eth1")), ("eth1", "ib0")),
        (" =eth0 ", NcclIfname(False, True, ("eth0",)), ("eth0",)),
        ("=eth", NcclIfname(False, True, ("eth",)), ()),
    ],
)
def test_parse_and_match(text: str, expected: NcclIfname, matched: tuple[str, ...]) -> None:
    spec = parse_nccl_ifname(text)
    assert spec == expected
    assert match(spec, NAMES) == matched
    assert parse_nccl_ifname(str(spec)) == spec  # round trip


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "names no interface"),
        ("^", "names no interface"),
        ("^=", "names no interface"),
        ("eth0,,eth1", "empty entry"),
        ("eth0,^lo", "apply to the whole list"),
        ("10.0.0.1", "is an address"),
        ("fd00::1", "is an address"),
        ("eth 0", "not an interface name"),
        ("eth0;rm", "not an interface name"),
    ],
)
def test_rejects(text: str, needle: str) -> None:
    with pytest.raises(IfnameSyntaxError, match=needle):
        parse_nccl_ifname(text)

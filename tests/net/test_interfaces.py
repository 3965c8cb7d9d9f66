"""Interface kinds from fixture sysfs trees, and the real table of this host."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from ddpnet.net.interfaces import (
    Address,
    Interface,
    classify_kind,
    list_interfaces,
    owner_of,
    parse_speed,
)


def _dev(sys_net: Path, name: str, *, arphrd: int = 1, virtual: bool = False,
         bridge: bool = False, device: bool = True) -> None:
    real = sys_net.parent / ("devices/virtual/net" if virtual else "devices/pci0/net") / name
    real.mkdir(parents=True)
    (real / "type").write_text(f"{arphrd}\n")
    if bridge:
        (real / "bridge").mkdir()
    if device and not virtual:
        (real / "device").mkdir()
    os.symlink(real, sys_net / name)


@pytest.fixture
def sys_net(tmp_path: Path) -> Path:
    net = tmp_path / "class/net"
    net.mkdir(parents=True)
    _dev(net, "lo", arphrd=772, virtual=True)
    _dev(net, "eth0")
    _dev(net, "ib0", arphrd=32)
    _dev(net, "br0", virtual=True, bridge=True)
    _dev(net, "docker0", virtual=True, bridge=True)
    _dev(net, "br-0123456789ab", virtual=True, bridge=True)
    _dev(net, "veth1", virtual=True)
    return net


@pytest.mark.parametrize(
    ("name", "kind"),
    [("lo", "loopback"), ("eth0", "physical"), ("ib0", "infiniband"), ("br0", "bridge"),
     ("docker0", "docker"), ("br-0123456789ab", "docker"), ("veth1", "virtual"),
     ("missing0", "virtual")],
)
def test_kinds(sys_net: Path, name: str, kind: str) -> None:
    assert classify_kind(name, sys_net) == kind


@pytest.mark.parametrize(("text", "speed"),
                         [("10000\n", 10000), ("-1\n", None), ("", None), (None, None)])
def test_speed(text: str | None, speed: int | None) -> None:
    assert parse_speed(text) == speed


def test_real_table_has_loopback_with_prefixes() -> None:
    table = {i.name: i for i in list_interfaces()}
    lo = table["lo"]
    assert lo.kind == "loopback" and lo.up and lo.mtu > 0
    v4 = [a for a in lo.addresses if a.family == 4]
    assert v4 and v4[0].ip == "127.0.0.1" and v4[0].prefix == 8
    assert all(a.family in (4, 6) for i in table.values() for a in i.addresses)
    assert set(table) == {name for _, name in socket.if_nameindex()}


def test_owner_of() -> None:
    """(Was ``bench.link.interface_of`` over its own psutil table.)"""
    def iface(name: str, *ips: str) -> Interface:
        addrs = tuple(Address(ip, 64 if ":" in ip else 24, 6 if ":" in ip else 4) for ip in ips)
        return Interface(name, True, addrs, 1500, None, "physical")

    table = (iface("lo", "127.0.0.1", "::1"), iface("eth0", "198.18.0.2", "fe80::1"))
    owner = owner_of("198.18.0.2", table)
    assert owner is not None and owner.name == "eth0"
    assert owner_of("fe80::1%eth0", table) is table[1]
    assert owner_of("10.0.0.1", table) is None

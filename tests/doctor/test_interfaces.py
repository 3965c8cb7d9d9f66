"""interfaces family: selected interface state, duplicate subnets, bridges, DHCP configs."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpnet.doctor import interfaces
from ddpnet.doctor.base import SelectedInterface
from tests.doctor.helpers import ETH0, LO, Addr, Iface, Tree, inputs


def test_selected_interface_facts(tmp_path: Path) -> None:
    r = interfaces.Selected().run(Tree(tmp_path).host(), inputs())
    assert r.status == "pass"
    assert r.summary == "eth0 198.18.0.3/24 mtu 1500 10000 Mb/s"
    assert dict(r.facts) == {"interface": "eth0", "address": "198.18.0.3", "mtu": 1500,
                             "subnet": "198.18.0.0/24", "link_speed_mbps": 10000,
                             "interface_kind": "physical"}


@pytest.mark.parametrize(("iface", "selected", "needle"), [
    (Iface("eth0", up=False, addresses=ETH0.addresses), "eth0", "is down"),
    (Iface("eth0"), "eth0", "has no address"),
    (ETH0, "eth9", "does not exist"),
    (ETH0, None, "no training interface"),
])
def test_selected_interface_failures(tmp_path: Path, iface: Iface, selected: str | None,
                                     needle: str) -> None:
    inp = inputs(interfaces=(LO, iface), selected=SelectedInterface(selected, None, "why"))
    r = interfaces.Selected().run(Tree(tmp_path).host(), inp)
    assert r.status == "fail" and needle in r.summary and r.fix


def test_two_interfaces_in_one_subnet_warn(tmp_path: Path) -> None:
    eth1 = Iface("eth1", addresses=(Addr("198.18.0.9", 24),))
    r = interfaces.SameSubnet().run(Tree(tmp_path).host(), inputs(interfaces=(LO, ETH0, eth1)))
    assert r.status == "warn" and "198.18.0.0/24 on eth0, eth1" in r.summary
    assert "GLOO_SOCKET_IFNAME=eth0" in r.fix
    assert interfaces.SameSubnet().run(Tree(tmp_path).host(), inputs()).status == "pass"


def test_bridges_warn_unless_nccl_pinned(tmp_path: Path) -> None:
    virbr = Iface("virbr0", addresses=(Addr("192.168.122.1", 24),), kind="bridge")
    inp = inputs(interfaces=(LO, ETH0, virbr))
    r = interfaces.Bridges().run(Tree(tmp_path).host(), inp)
    assert r.status == "warn" and "virbr0" in r.summary
    assert "NCCL_SOCKET_IFNAME=eth0" in r.fix
    pinned = Tree(tmp_path).host(environ={"NCCL_SOCKET_IFNAME": "eth0"})
    assert interfaces.Bridges().run(pinned, inp).status == "pass"
    down = Iface("docker0", up=False, addresses=(Addr("172.17.0.1", 16),), kind="docker")
    assert interfaces.Bridges().run(Tree(tmp_path).host(),
                                    inputs(interfaces=(LO, ETH0, down))).status == "pass"


NM_DHCP = "[connection]\nid=Wired\ninterface-name=eth0\n\n[ipv4]\nmethod=auto\n"
NM_STATIC = "[connection]\nid=Wired\ninterface-name=eth0\n\n[ipv4]\nmethod=manual\n" \
            "address1=198.18.0.3/24\n"
NETPLAN = """\
network:
  version: 2
  ethernets:
    eth1:
      dhcp4: false
    eth0:
      dhcp4: true
"""


@pytest.mark.parametrize(("path", "text", "status", "needle"), [
    ("etc/NetworkManager/system-connections/Wired.nmconnection", NM_DHCP, "warn",
     "method=auto"),
    ("etc/NetworkManager/system-connections/Wired.nmconnection", NM_STATIC, "pass",
     "method=manual"),
    ("etc/sysconfig/network-scripts/ifcfg-eth0", 'DEVICE=eth0\nBOOTPROTO="dhcp"\n', "warn",
     "BOOTPROTO=dhcp"),
    ("etc/sysconfig/network-scripts/ifcfg-eth0", "DEVICE=eth0\nBOOTPROTO=none\n"
     "IPADDR=198.18.0.3\n", "pass", "BOOTPROTO=none"),
    ("etc/netplan/01-netcfg.yaml", NETPLAN, "warn", "dhcp4: true"),
    ("etc/netplan/01-netcfg.yaml", NETPLAN.replace("true", "no"), "pass", "dhcp4: false"),
    ("etc/network/interfaces", "auto eth0\niface eth0 inet dhcp\n", "warn", "inet dhcp"),
])
def test_dhcp_detection(tmp_path: Path, path: str, text: str, status: str,
                        needle: str) -> None:
    tree = Tree(tmp_path)
    tree.write(path, text)
    r = interfaces.Dhcp().run(tree.host(), inputs())
    assert r.status == status, r
    assert needle in r.detail
    if status == "warn":
        assert "static address" in r.fix


def test_no_network_config_passes(tmp_path: Path) -> None:
    r = interfaces.Dhcp().run(Tree(tmp_path).host(), inputs())
    assert r.status == "pass" and "no DHCP configuration" in r.summary

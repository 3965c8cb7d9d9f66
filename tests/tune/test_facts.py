"""Where tune's facts come from: under ``--root`` the root's sysctl files, network
configuration and hostname win over the live host's, and every fact names its source; the
readers of the sysctl and network configuration files (pure)."""

from __future__ import annotations

import io
import ipaddress
import os
from pathlib import Path

import pytest
from rich.console import Console

from ddpnet.tune import facts as factsmod
from ddpnet.tune import sysctl
from ddpnet.tune.netconf import ifcfg, ifupdown, netplan, nm, read_configured
from ddpnet.tune.plan import build_plan
from ddpnet.tune.render import render
from ddpnet.tune.run import TuneOptions, TuneResult, run
from tests.tune.fixtures import request

NETPLAN = """\
# cloud-init's
network:
  version: 2
  ethernets:
    eth1:
      dhcp4: true
    ens5:
      match: {name: ens5}
      addresses:
        - 169.254.3.3/16
        - "192.168.7.20/24"
        - 10.1.2.3/24: {lifetime: 0}
      mtu: 9001
"""


def test_netplan_reader_takes_the_interfaces_block_only() -> None:
    found = netplan.read_config(NETPLAN, "ens5")
    assert found is not None and found.mtu == 9001
    assert found.addresses == ("169.254.3.3/16", "192.168.7.20/24", "10.1.2.3/24")
    assert netplan.read_config(NETPLAN, "eth1") == netplan.Configured((), None)
    assert netplan.read_config(NETPLAN, "eth9") is None
    ours = 'network:\n  ethernets:\n    ens5:\n      addresses: ["fd00::5/64"]\n'
    found = netplan.read_config(ours, "ens5")
    assert found is not None and found.addresses == ("fd00::5/64",)


def test_ifcfg_ifupdown_and_keyfile_readers() -> None:
    found = ifcfg.read_config("DEVICE=ens5\nIPADDR=10.0.0.5\nNETMASK=255.255.255.0\n"
                              "IPV6ADDR=fd00::5/64\nMTU=9000\n", "ens5")
    assert found is not None
    assert found.addresses == ("10.0.0.5/255.255.255.0", "fd00::5/64") and found.mtu == 9000
    assert ifcfg.read_config("DEVICE=eth0\nIPADDR=10.0.0.5\n", "ens5") is None
    text = ("auto lo\niface lo inet loopback\n\niface ens5 inet static\n"
            "    address 10.0.0.6\n    netmask 255.255.0.0\n    mtu 1450\n"
            "iface eth0 inet static\n    address 10.9.9.9/24\n")
    found = ifupdown.read_config(text, "ens5")
    assert found is not None and found.addresses == ("10.0.0.6/255.255.0.0",)
    assert found.mtu == 1450
    keyfile = ("[connection]\nid=x\ninterface-name=ens5\n[ethernet]\nmtu=8000\n"
               "[ipv4]\nmethod=manual\naddress1=10.0.0.7/24,10.0.0.1\n")
    found = nm.read_config(keyfile, "ens5")
    assert found is not None and found.addresses == ("10.0.0.7/24",) and found.mtu == 8000
    assert nm.read_config(keyfile, "eth0") is None
    assert nm.read_config("not [ini", "ens5") is None


def test_read_configured_prefers_the_subnet_and_the_last_mtu() -> None:
    files = {"/etc/netplan/50-cloud-init.yaml": NETPLAN,
             "/etc/netplan/90-ddpnet.yaml": "network:\n  ethernets:\n    ens5:\n      mtu: 1500\n",
             "/etc/hosts": "not a netplan file"}
    assert read_configured("ubuntu", files, "ens5") == (
        "192.168.7.20", 1500, "/etc/netplan/50-cloud-init.yaml", "/etc/netplan/90-ddpnet.yaml")
    subnet = ipaddress.ip_network("10.1.2.0/24")
    assert read_configured("ubuntu", files, "ens5", subnet)[0] == "10.1.2.3"
    assert read_configured("ubuntu", files, "eth9") == (None, None, "", "")


def test_sysctl_files_read_in_sysctl_system_order() -> None:
    found = ["etc/sysctl.conf", "usr/lib/sysctl.d/50-default.conf", "etc/sysctl.d/50-default.conf",
             "usr/lib/sysctl.d/10-a.conf", "etc/sysctl.d/90-ddpnet.conf", "etc/sysctl.d/x.txt"]
    assert sysctl.load_order(found) == ["usr/lib/sysctl.d/10-a.conf",
                                        "etc/sysctl.d/50-default.conf", "etc/sysctl.conf"]
    assert sysctl.configured(["-net/core/somaxconn = 1024\n# c\nnet.core.somaxconn=2048\n",
                              "net/ipv4/conf/eth0.100/rp_filter = 2\n"]) == {
        "net.core.somaxconn": "2048", "net.ipv4.conf.eth0/100.rp_filter": "2"}


@pytest.mark.parametrize("text", ["9" * 5000, "0", "70000", "x", "1500.0"])
def test_odd_mtus_are_not_facts(text: str) -> None:
    found = ifupdown.read_config(f"iface ens5 inet static\n    mtu {text}\n", "ens5")
    assert found is not None and found.mtu is None


def test_an_odd_port_range_under_the_root_is_the_kernel_default(
        tmp_path: Path, fixed_iface: None) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/sysctl.conf").write_text(
        f"net.ipv4.ip_local_port_range = 60000 {'9' * 5000}\n")
    facts = factsmod.gather(tmp_path, distro="debian")
    assert facts.port_range == (32768, 60999) and facts.sources["port_range"] == "kernel default"


def _image(root: Path) -> None:
    for rel, text in {
        "etc/hostname": "img-node\n",
        "etc/os-release": "ID=ubuntu\nVERSION_ID=22.04\n",
        "usr/lib/sysctl.d/50-default.conf": "net.core.somaxconn = 1024\n",
        "etc/sysctl.d/60-big.conf": f"net.ipv4.tcp_rmem = 4096 131072 {32 << 20}\n"
                                    "net.ipv4.ip_local_reserved_ports = 8000\n",
        "etc/sysctl.conf": "net.core.somaxconn = 65535\n",
        "etc/netplan/50-cloud-init.yaml": NETPLAN,
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


@pytest.fixture
def fixed_iface(monkeypatch: pytest.MonkeyPatch) -> None:
    """The live selection, fixed: ens5 at 10.9.9.9, MTU 1500, 25 Gb/s."""
    def choose(*_: object) -> factsmod._Iface:
        return factsmod._Iface("ens5", "--iface", "10.9.9.9", 1500, 25000)

    monkeypatch.setattr(factsmod, "_choose_iface", choose)


def test_a_root_gives_its_own_sysctls_address_mtu_and_hostname(
        tmp_path: Path, fixed_iface: None) -> None:
    _image(tmp_path)
    facts = factsmod.gather(tmp_path, distro="ubuntu")
    assert facts.hostname == "img-node" and facts.sources["hostname"].endswith("/etc/hostname")
    assert facts.sysctl_now["net.core.somaxconn"] == "65535"  # sysctl.conf is read last
    assert facts.sysctl_now["net.ipv4.tcp_rmem"] == f"4096 131072 {32 << 20}"
    assert facts.reserved_ports == "8000" and facts.port_range == (32768, 60999)
    assert facts.sources["port_range"] == "kernel default"
    assert "/etc/sysctl.d/60-big.conf" in facts.sources["sysctl"]
    assert (facts.address, facts.mtu) == ("192.168.7.20", 9001)
    assert facts.sources["mtu"] == f"root {tmp_path}: /etc/netplan/50-cloud-init.yaml"
    assert facts.speed_mbps == 25000 and facts.sources["speed_mbps"] == "live host"
    assert facts.sources["iface"].startswith("live host")
    assert facts.selinux_enforce is None and "not the running system" in facts.sources["selinux_enforce"]
    # the drop-in keeps the root's higher tcp_rmem max and somaxconn, and says so
    part = build_plan(request("ubuntu", "none", static_ip=None, gateway=None, dns=None,
                              profile="guide"), facts).part("sysctl")
    assert part is not None
    written = sysctl.settings_in(part.files[0].content)
    assert written["net.ipv4.tcp_rmem"].split()[2] == str(32 << 20)
    assert written["net.core.somaxconn"] == "65535"
    assert written["net.ipv4.ip_local_reserved_ports"] == "8000,29400,29500"
    assert any(f"root {tmp_path}" in n and "never lowers" in n for n in part.notes)


def test_an_empty_root_falls_back_to_the_live_host_and_says_so(
        tmp_path: Path, fixed_iface: None) -> None:
    facts = factsmod.gather(tmp_path, distro="debian")
    assert (facts.address, facts.mtu) == ("10.9.9.9", 1500)
    assert facts.sources["address"] == facts.sources["mtu"] == "live host"
    assert facts.sources["hostname"] == "live host" and facts.sysctl_now == {}
    assert "no sysctl files" in facts.sources["sysctl"]


def test_a_symlink_out_of_the_root_is_not_read(tmp_path: Path, fixed_iface: None) -> None:
    outside = tmp_path / "outside.conf"
    outside.write_text("net.core.somaxconn = 99999\n")
    root = tmp_path / "root"
    (root / "etc/sysctl.d").mkdir(parents=True)
    os.symlink(outside, root / "etc/sysctl.d/70-escape.conf")
    os.symlink(outside, root / "etc/hostname")
    facts = factsmod.gather(root, distro="debian")
    assert "net.core.somaxconn" not in facts.sysctl_now
    assert facts.sources["hostname"] == "live host"


def test_the_plan_shows_each_facts_source(tmp_path: Path, fixed_iface: None) -> None:
    _image(tmp_path)
    result = run(TuneOptions(root=tmp_path, firewall="none", iface="ens5"))
    data = result.to_dict()
    assert data["facts"]["sources"]["mtu"].endswith("/etc/netplan/50-cloud-init.yaml")
    assert data["facts"]["mtu"] == 9001 and data["facts"]["hostname"] == "img-node"
    buf = io.StringIO()
    render(result, Console(file=buf, width=300, color_system=None, soft_wrap=True))
    text = buf.getvalue()
    assert "read     speed_mbps  (live host)" in text
    assert f"read     address, mtu  (root {tmp_path}: /etc/netplan/50-cloud-init.yaml)" in text
    assert isinstance(result, TuneResult) and result.mode == "dry-run"


def test_a_live_run_shows_one_source() -> None:
    from dataclasses import replace

    from ddpnet.tune.render import facts_by_source
    from tests.tune.fixtures import FACTS

    live = replace(FACTS, sources={"iface": "live host: interface selection", "mtu": "live host"})
    assert facts_by_source(build_plan(request("debian", "none"), live)) == {
        "live host": ["every fact"]}
    mixed = replace(live, sources={**live.sources, "mtu": "root /x: /etc/netplan/a.yaml"})
    assert facts_by_source(build_plan(request("debian", "none"), mixed)) == {
        "live host: interface selection": ["iface"], "root /x: /etc/netplan/a.yaml": ["mtu"]}

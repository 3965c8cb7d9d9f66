"""The rendered files checked by the tools that consume them: Debian's ``netplan generate``
and ``firewall-offline-cmd`` (firewalld's own parser), when installed
(scripts/install-system-deps.sh installs netplan.io and firewalld)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ddpnet.tune.plan import build_plan
from tests.tune.fixtures import FACTS, request


@pytest.mark.skipif(shutil.which("netplan") is None, reason="needs netplan (netplan.io)")
@pytest.mark.parametrize("static_ip,gateway,dns", [
    ("10.0.0.11/24", "10.0.0.1", "10.0.0.2,10.0.0.3"),
    ("10.0.0.11/24", None, None),
    ("fd00::11/64", "fd00::1", "fd00::2,fd00::3"),
])
def test_netplan_generate_accepts_the_yaml(tmp_path: Path, static_ip: str, gateway: str | None,
                                           dns: str | None) -> None:
    subnet = "fd00::/64" if ":" in static_ip else "10.0.0.0/24"
    plan = build_plan(request("ubuntu", "none", static_ip=static_ip, gateway=gateway, dns=dns,
                              cluster_subnet=subnet), FACTS)
    part = plan.part("static-ip")
    assert part is not None
    (f,) = part.files
    target = tmp_path / f.path.lstrip("/")
    target.parent.mkdir(parents=True)
    target.write_text(f.content)
    target.chmod(f.mode)
    proc = subprocess.run(["netplan", "generate", "--root-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "Permissions" not in proc.stderr, proc.stderr  # 0600 as netplan wants
    network = (tmp_path / "run/systemd/network/10-netplan-ens33.network").read_text()
    assert f"Address={static_ip}" in network
    link = (tmp_path / "run/systemd/network/10-netplan-ens33.link").read_text()
    assert "MTUBytes=9000" in link
    if gateway:
        assert f"Gateway={gateway}" in network
    for d in (dns or "").split(","):
        assert not d or d in network.split("DNS=", 1)[1]


def _offline(argv: tuple[str, ...], config: Path) -> subprocess.CompletedProcess[str]:
    """A firewall-cmd --permanent command run through firewall-offline-cmd on ``config``."""
    assert argv[:2] == ("firewall-cmd", "--permanent"), argv
    return subprocess.run(["firewall-offline-cmd", "--system-config", str(config), *argv[2:]],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(shutil.which("firewall-offline-cmd") is None,
                    reason="needs firewall-offline-cmd (firewalld)")
def test_firewalld_commands_parse_and_round_trip(tmp_path: Path) -> None:
    plan = build_plan(request("rhel9", "firewalld", port_range="50000-51000"), FACTS)
    part = plan.part("firewall")
    assert part is not None
    adds = [c for c in part.apply if "--permanent" in c.argv]
    assert len(adds) == 3
    for c in adds:
        proc = _offline(c.argv, tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    # the idempotence check (`unless`) recognises a rule as present (one: each call takes ~2 s)
    assert _offline(adds[-1].unless, tmp_path).stdout.strip() == "yes"
    zone = (tmp_path / "zones/public.xml").read_text()
    assert zone.count('<source address="10.0.0.0/24"/>') == 3
    assert '<port port="50000-51000" protocol="tcp"/>' in zone
    assert "0.0.0.0/0" not in zone
    for c in part.revert:
        if "--permanent" in c.argv:
            assert _offline(c.argv, tmp_path).returncode == 0
    assert "10.0.0.0/24" not in (tmp_path / "zones/public.xml").read_text()


def _keyfile(text: str) -> dict[str, dict[str, str]]:
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)
    out = {s: dict(parser[s]) for s in parser.sections()}
    out["connection"].pop("uuid", None)
    out.get("ipv6", {}).pop("addr-gen-mode", None)  # nmcli prints the default
    return out


@pytest.mark.skipif(shutil.which("nmcli") is None, reason="needs nmcli (network-manager)")
@pytest.mark.parametrize("static_ip,gateway,subnet,dns", [
    ("10.0.0.11/24", "10.0.0.1", "10.0.0.0/24", "10.0.0.2,10.0.0.3"),
    ("fd00::11/64", "fd00::1", "fd00::/64", "fd00::2"),
])
def test_nm_keyfile_parses_and_equals_the_nmcli_equivalent(
        static_ip: str, gateway: str, subnet: str, dns: str) -> None:
    """``nmcli --offline`` (no daemon) reads our keyfile and builds one from the printed
    nmcli command: both describe the same connection."""
    from ddpnet.tune.netconf.nm import nmcli_argv

    req = request("rhel9", "none", static_ip=static_ip, gateway=gateway, cluster_subnet=subnet,
                  dns=dns)
    part = build_plan(req, FACTS).part("static-ip")
    assert part is not None
    ours = subprocess.run(["nmcli", "--offline", "connection", "modify"],
                          input=part.files[0].content, capture_output=True, text=True,
                          timeout=30)
    assert ours.returncode == 0, ours.stderr
    theirs = subprocess.run(["nmcli", "--offline", *nmcli_argv(req, FACTS)[1:]],
                            capture_output=True, text=True, timeout=30)
    assert theirs.returncode == 0, theirs.stderr
    assert _keyfile(ours.stdout) == _keyfile(theirs.stdout)
    assert _keyfile(ours.stdout)["ethernet"]["mtu"] == "9000"


@pytest.mark.skipif(shutil.which("ufw") is None or os.geteuid() != 0,
                    reason="needs ufw and root")
def test_ufw_commands_parse(tmp_path: Path) -> None:
    """``ufw --dry-run`` parses each rule and prints the iptables rule it would add."""
    part = build_plan(request("ubuntu", "ufw"), FACTS).part("firewall")
    assert part is not None and len(part.apply) == 3
    for c, port in zip(part.apply, ("29500", "29400", "32768:60999"), strict=True):
        proc = subprocess.run(["ufw", "--dry-run", *c.argv[1:]], capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert f"-A ufw-user-input -p tcp --dport {port} -s 10.0.0.0/24 -j ACCEPT" in \
            proc.stdout.replace("-m multiport --dports", "--dport")


SUBNETS = [("10.0.0.0/24", "10.0.0.11/24"), ("fd00::/64", "fd00::11/64")]


def _firewall_files(firewall: str, subnet: str, static_ip: str) -> dict[str, str]:
    req = request("debian", firewall, cluster_subnet=subnet, static_ip=static_ip, gateway=None,
                  dns=None)
    part = build_plan(req, FACTS).part("firewall")
    assert part is not None
    return {f.path: f.content for f in part.files if f.path.startswith("/etc/ddpnet/")}


def _check(argv: list[str], content: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "rules"
    path.write_text(content)
    return subprocess.run([*argv, str(path)], capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(shutil.which("nft") is None or os.geteuid() != 0,
                    reason="needs nft and root (nft -c talks to the kernel)")
@pytest.mark.parametrize("subnet,static_ip", SUBNETS)
def test_nft_accepts_the_inet_table(tmp_path: Path, subnet: str, static_ip: str) -> None:
    (content,) = _firewall_files("nftables", subnet, static_ip).values()
    assert "table inet ddpnet {" in content  # one table for both families
    saddr = "ip6 saddr" if ":" in subnet else "ip saddr"
    assert f"{saddr} {subnet} tcp dport" in content
    proc = _check(["nft", "-c", "-f"], content, tmp_path)
    assert proc.returncode == 0, proc.stderr
    # the validator can fail: a v6 subnet under the v4 match is refused
    wrong = content.replace(saddr, "ip6 saddr" if saddr == "ip saddr" else "ip saddr")
    assert _check(["nft", "-c", "-f"], wrong, tmp_path).returncode != 0


@pytest.mark.skipif(shutil.which("iptables-restore") is None or
                    shutil.which("ip6tables-restore") is None or os.geteuid() != 0,
                    reason="needs iptables-restore, ip6tables-restore and root")
@pytest.mark.parametrize("subnet,static_ip", SUBNETS)
def test_iptables_and_ip6tables_restore_accept_both_files(
        tmp_path: Path, subnet: str, static_ip: str) -> None:
    files = _firewall_files("iptables", subnet, static_ip)
    v4, v6 = files["/etc/ddpnet/firewall.iptables"], files["/etc/ddpnet/firewall.ip6tables"]
    for tool, content in (("iptables-restore", v4), ("ip6tables-restore", v6)):
        proc = _check([tool, "--test", "--noflush"], content, tmp_path)
        assert proc.returncode == 0, (tool, proc.stderr)
        assert "--ctstate NEW" in content and "-j DROP" in content  # both families gated
    ours, other = (v4, v6) if ":" not in subnet else (v6, v4)
    assert f"-s {subnet}" in ours and "-j ACCEPT" in ours
    assert "-s " not in other and "-j ACCEPT" not in other  # nobody from the other family
    # the validator can fail: the v6 chain loaded into iptables (or v4 into ip6tables)
    if ":" in subnet:
        assert _check(["iptables-restore", "--test", "--noflush"], v6, tmp_path).returncode
    else:
        v6_with_v4 = v6.replace("-i lo -j RETURN", f"-i lo -j RETURN\n-A DDPNET -s {subnet}")
        assert _check(["ip6tables-restore", "--test", "--noflush"], v6_with_v4,
                      tmp_path).returncode


@pytest.mark.skipif(shutil.which("firewall-offline-cmd") is None,
                    reason="needs firewall-offline-cmd (firewalld)")
def test_firewalld_ipv6_subnet_gets_ipv6_rich_rules(tmp_path: Path) -> None:
    req = request("rhel9", "firewalld", cluster_subnet="fd00::/64", static_ip="fd00::11/64",
                  gateway=None, dns=None)
    part = build_plan(req, FACTS).part("firewall")
    assert part is not None
    adds = [c for c in part.apply if "--permanent" in c.argv]
    assert len(adds) == 3 and all('family="ipv6"' in c.argv[-1] for c in adds)
    proc = _offline(adds[0].argv, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    zone = (tmp_path / "zones/public.xml").read_text()
    assert 'family="ipv6"' in zone and '<source address="fd00::/64"/>' in zone
    wrong = (*adds[0].argv[:-1], adds[0].argv[-1].replace("ipv6", "ipv4"))
    proc = _offline(wrong, tmp_path)
    assert proc.returncode != 0, proc.stdout  # the tool does check the family


@pytest.mark.skipif(shutil.which("ufw") is None or os.geteuid() != 0,
                    reason="needs ufw and root")
def test_ufw_ipv6_subnet_goes_to_the_ipv6_chain() -> None:
    req = request("ubuntu", "ufw", cluster_subnet="fd00::/64", static_ip="fd00::11/64",
                  gateway=None, dns=None)
    part = build_plan(req, FACTS).part("firewall")
    assert part is not None
    proc = subprocess.run(["ufw", "--dry-run", *part.apply[0].argv[1:]], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "-A ufw6-user-input -p tcp --dport 29500 -s fd00::/64 -j ACCEPT" in proc.stdout

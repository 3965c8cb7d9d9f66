"""firewall family through a Host: manager detection from rule dumps, pass/warn/fail of
each port check, the fix for each manager; and a real run against nft/iptables rules in a
scratch network namespace."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from ddpnet.doctor import firewall
from ddpnet.doctor.base import CommandOutput, Host, SelectedInterface, run_command
from tests.doctor.helpers import ETH0, GOOD_SYSCTLS, LO, Addr, Iface, Tree, fixture, inputs, ok

NFT = ("nft", "-j", "list", "ruleset")
IPT = ("iptables-save", "-t", "filter")
EMPTY_NFT = '{"nftables": [{"metainfo": {"version": "1.0.6"}}]}'


def host_with(tmp_path: Path, nft: str | None = EMPTY_NFT, ipt: str | None = None,
              **kw: object) -> Host:
    tree = Tree(tmp_path)
    tree.sysctls(GOOD_SYSCTLS)
    commands: dict[tuple[str, ...], CommandOutput | None] = {}
    if nft is not None:
        commands[NFT] = ok(nft)
    if ipt is not None:
        commands[IPT] = ok(ipt)
    return tree.host(commands=commands, **kw)  # type: ignore[arg-type]


def run_all(host: Host, **kw: object) -> dict[str, object]:
    inp = inputs(**kw)
    return {c.id: c.run(host, inp) for c in firewall.CHECKS}


def test_no_firewall_warns_about_open_tcpstore(tmp_path: Path) -> None:
    r = run_all(host_with(tmp_path, ipt=fixture("firewall/ipt_empty.txt")))
    m = r["firewall.manager"]
    assert m.status == "warn" and "unauthenticated" in m.summary  # type: ignore[attr-defined]
    assert "198.18.0.0/24" in m.fix  # type: ignore[attr-defined]
    assert m.facts["firewall"]["managers"] == ["none"]  # type: ignore[attr-defined]
    assert r["firewall.master-port"].status == "pass"  # type: ignore[attr-defined]


def test_outside_a_job_the_rule_admits_the_cluster_nic_never_loopback(tmp_path: Path) -> None:
    """No MASTER_ADDR: the selection is loopback; ``ip saddr != 127.0.0.0/8 ... drop`` would
    shut out every peer. The cluster NIC's subnet (the selector's, loopback refused) instead,
    else ask for --cluster-subnet."""
    host = host_with(tmp_path, ipt=fixture("firewall/ipt_empty.txt"))
    lo_sel = SelectedInterface("lo", "127.0.0.1", "the whole job is on this host")
    nic = SelectedInterface("eth0", "198.18.0.3", "carries the default route")
    m = run_all(host, master_addr="127.0.0.1", selected=lo_sel, cluster=nic)["firewall.manager"]
    assert "127.0.0.0/8" not in m.fix  # type: ignore[attr-defined]
    assert "iifname != lo ip saddr != 198.18.0.0/24 tcp dport" in m.fix  # type: ignore
    none = SelectedInterface(None, None, "no non-loopback interface is up")
    m = run_all(host, master_addr="127.0.0.1", selected=lo_sel, cluster=none,
                interfaces=(LO,))["firewall.manager"]
    assert m.fix == firewall.ASK_SUBNET and "saddr" not in m.fix  # type: ignore[attr-defined]
    given = run_all(host, selected=lo_sel, cluster=none, cluster_subnet="10.1.0.0/16")
    assert "saddr != 10.1.0.0/16" in given["firewall.manager"].fix  # type: ignore


@pytest.mark.parametrize(("kind", "nft", "ipt"), [
    ("nftables", "firewall/nft_block_master.json", "firewall/ipt_empty.txt"),
    ("iptables", None, "firewall/ipt_block_master.txt"),
])
def test_blocked_master_port_fails_on_rank0(tmp_path: Path, kind: str, nft: str | None,
                                            ipt: str) -> None:
    host = host_with(tmp_path, nft=fixture(nft) if nft else EMPTY_NFT, ipt=fixture(ipt))
    r = run_all(host, master_addr="198.18.0.3", node_rank=0)
    assert r["firewall.manager"].summary == f"active: {kind}"  # type: ignore[attr-defined]
    res = r["firewall.master-port"]
    assert res.status == "fail", res  # type: ignore[attr-defined]
    assert "29500/tcp from 198.18.0.0/24 is dropped by " + kind in res.summary  # type: ignore
    if kind == "nftables":
        assert res.fix.startswith("nft insert rule ip drlab input ip saddr 198.18.0.0/24 "  # type: ignore
                                  "tcp dport 29500 accept")
    else:
        assert res.fix.startswith("iptables -I INPUT -s 198.18.0.0/24 -p tcp --dport 29500 "  # type: ignore
                                  "-j ACCEPT")
    assert r["firewall.ephemeral"].status == "pass"  # type: ignore[attr-defined]


def test_blocked_master_port_only_warns_on_other_nodes(tmp_path: Path) -> None:
    host = host_with(tmp_path, nft=fixture("firewall/nft_block_master.json"))
    assert run_all(host)["firewall.master-port"].status == "warn"  # type: ignore[attr-defined]


def test_policy_drop_fails_ephemeral_range_and_c10d(tmp_path: Path) -> None:
    host = host_with(tmp_path, nft=fixture("firewall/nft_policy_drop_master_only.json"))
    r = run_all(host, c10d=True)
    assert r["firewall.master-port"].status == "pass"  # type: ignore[attr-defined]
    eph = r["firewall.ephemeral"]
    assert eph.status == "fail" and "32768:60999/tcp" in eph.summary  # type: ignore
    assert "tcp dport 32768-60999 accept" in eph.fix  # type: ignore[attr-defined]
    assert r["firewall.c10d-port"].status == "fail"  # type: ignore[attr-defined]


def test_cluster_rule_set_passes_everything(tmp_path: Path) -> None:
    host = host_with(tmp_path, nft=fixture("firewall/nft_cluster_open.json"))
    r = run_all(host, c10d=True)
    assert {k: v.status for k, v in r.items()} == {  # type: ignore[attr-defined]
        "firewall.manager": "pass", "firewall.master-port": "pass",
        "firewall.master-port-exposed": "skip",  # not the master host
        "firewall.c10d-port": "pass", "firewall.ephemeral": "pass"}


def test_cluster_subnet_flag_changes_the_source(tmp_path: Path) -> None:
    host = host_with(tmp_path, nft=fixture("firewall/nft_cluster_open.json"))
    r = run_all(host, cluster_subnet="10.9.0.0/16")
    assert r["firewall.master-port"].status == "warn"  # other node: warn
    assert "from 10.9.0.0/16" in r["firewall.master-port"].summary  # type: ignore


def test_uncertain_rule_warns(tmp_path: Path) -> None:
    host = host_with(tmp_path, nft=fixture("firewall/nft_named_set.json"))
    res = run_all(host, node_rank=0, master_addr="198.18.0.3")["firewall.master-port"]
    # the named set is not evaluated: the policy drop decides, and the set is shown
    assert res.status == "fail" and "policy drop" in res.detail  # type: ignore[attr-defined]


def test_unreadable_rules_skip(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    host = tree.host(commands={NFT: CommandOutput(1, "", "Operation not permitted"),
                               IPT: CommandOutput(1, "", "Permission denied")})
    r = run_all(host)
    assert r["firewall.manager"].status == "skip"  # type: ignore[attr-defined]
    assert "root" in r["firewall.manager"].detail  # type: ignore[attr-defined]


def test_firewalld_and_ufw(tmp_path: Path) -> None:
    from tests.doctor.test_firewall_rules import UFW, ZONES

    tree = Tree(tmp_path)
    commands = {("firewall-cmd", "--list-all-zones"): ok(ZONES), NFT: ok(EMPTY_NFT)}
    r = run_all(tree.host(commands=commands))  # installed but not running: not asked
    assert r["firewall.manager"].status == "warn"
    tree.write("proc/812/comm", "firewalld\n")
    host = tree.host(commands=commands)
    r = run_all(host)
    assert r["firewall.manager"].summary == "active: firewalld"  # type: ignore[attr-defined]
    assert r["firewall.ephemeral"].status == "fail"  # type: ignore[attr-defined]
    assert "firewall-cmd --permanent --zone=trusted --add-source=198.18.0.0/24" in \
        r["firewall.ephemeral"].fix  # type: ignore[attr-defined]

    tree2 = Tree(tmp_path / "u")
    tree2.write("etc/ufw/ufw.conf", "ENABLED=yes\n")
    tree2.write("etc/default/ufw", 'DEFAULT_INPUT_POLICY="DROP"\n')
    host = tree2.host(commands={("ufw", "status"): ok(UFW), NFT: ok(EMPTY_NFT)})
    r = run_all(host)
    assert r["firewall.manager"].summary == "active: ufw"  # type: ignore[attr-defined]
    assert r["firewall.master-port"].status == "pass"  # type: ignore[attr-defined]
    eph = r["firewall.ephemeral"]
    assert eph.status == "fail" and eph.fix.startswith("ufw allow proto tcp from "  # type: ignore
                                                        "198.18.0.0/24 to any port 32768:60999")


# --------------------------------------------------------------------------- real rules

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("nft"),
    reason="needs root, ip and nft to build a scratch network namespace")


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"dr-fw-{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def in_ns(ns: str, argv: Sequence[str]) -> None:
    subprocess.run(["ip", "netns", "exec", ns, *argv], check=True, capture_output=True)


@pytest.mark.root
@needs_root
@pytest.mark.parametrize("manager", ["nftables", "iptables"])
def test_real_rules_in_a_namespace(tmp_path: Path, netns: str, manager: str) -> None:
    """The real nft / iptables-save of a namespace where port 29500 is dropped."""
    if manager == "nftables":
        in_ns(netns, ["nft", "add", "table", "inet", "drt"])
        in_ns(netns, ["nft", "add", "chain", "inet", "drt", "input",
                      "{ type filter hook input priority 0; policy accept; }"])
        in_ns(netns, ["nft", "add", "rule", "inet", "drt", "input", "tcp", "dport", "29500",
                      "drop"])
    else:
        if not shutil.which("iptables"):
            pytest.skip("iptables not installed")
        in_ns(netns, ["iptables", "-A", "INPUT", "-p", "tcp", "--dport", "29500", "-j",
                      "REJECT"])

    def run(argv: Sequence[str], timeout: float) -> CommandOutput | None:
        return run_command(["ip", "netns", "exec", netns, *argv], timeout)

    tree = Tree(tmp_path)
    tree.sysctls(GOOD_SYSCTLS)
    host = Host(proc=tree.root / "proc", run=run, which=shutil.which)
    inp = inputs(master_addr="198.18.0.3", node_rank=0)
    results = {c.id: c.run(host, inp) for c in firewall.CHECKS}
    assert results["firewall.manager"].summary == f"active: {manager}"
    res = results["firewall.master-port"]
    assert res.status == "fail", res
    assert manager in res.summary
    assert results["firewall.ephemeral"].status == "pass"


OPEN_TO_ALL = ("*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
               "-A INPUT -p tcp -m tcp --dport 29500 -j ACCEPT\nCOMMIT\n")


def test_master_port_open_to_everyone_warns_on_the_master(tmp_path: Path) -> None:
    """Issue 17: the store is unauthenticated; a rule accepting MASTER_PORT from any source
    exposes it beyond the cluster subnet."""
    host = host_with(tmp_path, ipt=OPEN_TO_ALL)
    res = run_all(host, master_addr="198.18.0.3", node_rank=0)["firewall.master-port-exposed"]
    assert res.status == "warn", res  # type: ignore[attr-defined]
    assert "203.0.113.7" in res.summary and "198.18.0.0/24" in res.summary  # type: ignore
    assert "--cluster-subnet 198.18.0.0/24" in res.fix  # type: ignore[attr-defined]


def test_master_port_open_to_the_cluster_only_passes(tmp_path: Path) -> None:
    host = host_with(tmp_path, nft=fixture("firewall/nft_cluster_open.json"))
    res = run_all(host, master_addr="198.18.0.3", node_rank=0)["firewall.master-port-exposed"]
    assert res.status == "pass", res  # type: ignore[attr-defined]


def test_exposure_is_judged_on_the_master_only_and_not_over_loopback(tmp_path: Path) -> None:
    host = host_with(tmp_path, ipt=OPEN_TO_ALL)
    assert run_all(host)["firewall.master-port-exposed"].status == "skip"  # type: ignore
    loop = run_all(host, master_addr="127.0.0.1")["firewall.master-port-exposed"]
    assert loop.status == "pass" and "loopback" in loop.summary  # type: ignore[attr-defined]


def test_outsider_is_outside_the_cluster_subnet() -> None:
    import ipaddress

    assert firewall.outsider(ipaddress.IPv4Network("10.0.0.0/8")) == "203.0.113.7"
    assert firewall.outsider(ipaddress.IPv4Network("203.0.113.0/24")) == "192.0.2.7"


# ----------------------------------------------------------------- IPv6 (issue 17, part 5)

IP6T = ("ip6tables-save", "-t", "filter")
CLUSTER_ONLY_V4 = ("*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
                   "-A INPUT -s 198.18.0.0/24 -p tcp -m tcp --dport 29500 -j ACCEPT\nCOMMIT\n")
V6_OPEN = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"
V6_CLOSED = "*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"
ETH0_V6 = Iface("eth0", addresses=(Addr("198.18.0.3", 24), Addr("fd00:ddb::3", 64, 6),
                                   Addr("fe80::1", 64, 6)))


def v6_host(tmp_path: Path, ipt: str, ip6t: str | None, nft: str = EMPTY_NFT) -> Host:
    tree = Tree(tmp_path)
    tree.sysctls(GOOD_SYSCTLS)
    commands: dict[tuple[str, ...], CommandOutput | None] = {NFT: ok(nft), IPT: ok(ipt)}
    if ip6t is not None:
        commands[IP6T] = ok(ip6t)
    return tree.host(commands=commands)


def exposed(host: Host, interfaces: tuple[object, ...] = (LO, ETH0_V6)) -> object:
    return run_all(host, master_addr="198.18.0.3", node_rank=0,
                   interfaces=interfaces)["firewall.master-port-exposed"]


def test_v4_only_rules_leave_the_store_open_over_ipv6(tmp_path: Path) -> None:
    res = exposed(v6_host(tmp_path, CLUSTER_ONLY_V4, V6_OPEN))
    assert res.status == "warn", res  # type: ignore[attr-defined]
    assert "IPv6" in res.summary and "fd00:ddb::3" in res.summary  # type: ignore
    assert "ip6tables:" in res.detail and "ip6tables -I INPUT" in res.fix  # type: ignore


def test_ipv6_closed_as_well_passes_and_says_both_families(tmp_path: Path) -> None:
    res = exposed(v6_host(tmp_path, CLUSTER_ONLY_V4, V6_CLOSED))
    assert res.status == "pass", res  # type: ignore[attr-defined]
    assert "IPv4 and IPv6" in res.summary  # type: ignore[attr-defined]


def test_no_global_ipv6_address_judges_ipv4_only(tmp_path: Path) -> None:
    res = exposed(v6_host(tmp_path, CLUSTER_ONLY_V4, V6_OPEN), (LO, ETH0))
    assert res.status == "pass" and "(IPv4)" in res.summary, res  # type: ignore


def _nft(family: str, *rules: list[dict[str, object]]) -> str:
    import json

    items: list[dict[str, object]] = [
        {"table": {"family": family, "name": "t"}},
        {"chain": {"family": family, "table": "t", "name": "input", "type": "filter",
                   "hook": "input", "prio": 0, "policy": "accept"}}]
    items += [{"rule": {"family": family, "table": "t", "chain": "input", "expr": expr}}
              for expr in rules]
    return json.dumps({"nftables": items})


_V4_CLUSTER_ACCEPT = [{"match": {"op": "==", "left": {"payload": {"protocol": "ip",
                                                                  "field": "saddr"}},
                                 "right": {"prefix": {"addr": "198.18.0.0", "len": 24}}}},
                      {"accept": None}]
_DROP_29500 = [{"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}},
                          "right": 29500}}, {"drop": None}]


@pytest.mark.parametrize(("family", "status"), [("inet", "pass"), ("ip", "warn")])
def test_nft_ip_table_misses_ipv6_and_inet_table_covers_it(
        tmp_path: Path, family: str, status: str) -> None:
    """An ``ip`` table never sees IPv6 packets; an ``inet`` one does, and its ``ip saddr``
    match never hits them (so the v6 packet falls to the drop)."""
    nft = _nft(family, _V4_CLUSTER_ACCEPT, _DROP_29500)
    res = exposed(v6_host(tmp_path, V6_OPEN, None, nft=nft))
    assert res.status == status, res  # type: ignore[attr-defined]


def test_ufw_v6_lines_apply_to_ipv6_only() -> None:
    from ddpnet.doctor.firewall_rules import Packet, evaluate_ufw

    status = ("Status: active\n\nTo                         Action      From\n"
              "--                         ------      ----\n"
              "29500/tcp                  ALLOW       198.18.0.0/24\n"
              "29500/tcp (v6)             ALLOW       Anywhere (v6)\n")
    v4 = evaluate_ufw(status, "DROP", Packet(29500, "203.0.113.7"))
    v6 = evaluate_ufw(status, "DROP", Packet(29500, "2001:db8::7", family=6))
    assert v4 is not None and v4.verdict == "drop"
    assert v6 is not None and v6.verdict == "accept" and "(v6)" in v6.by


@pytest.mark.root
@needs_root
def test_real_ipv4_only_iptables_in_a_namespace_warns_about_ipv6(
        tmp_path: Path, netns: str) -> None:
    """The real iptables-save / ip6tables-save of a namespace whose v4 rules close the store
    to outsiders while ip6tables is left open (what a v4-only guide leaves behind)."""
    if not (shutil.which("iptables") and shutil.which("ip6tables-save")):
        pytest.skip("iptables/ip6tables not installed")
    in_ns(netns, ["iptables", "-A", "INPUT", "-s", "198.18.0.0/24", "-p", "tcp", "--dport",
                  "29500", "-j", "ACCEPT"])
    in_ns(netns, ["iptables", "-A", "INPUT", "-p", "tcp", "--dport", "29500", "-j", "DROP"])

    def run(argv: Sequence[str], timeout: float) -> CommandOutput | None:
        return run_command(["ip", "netns", "exec", netns, *argv], timeout)

    tree = Tree(tmp_path)
    tree.sysctls(GOOD_SYSCTLS)
    host = Host(proc=tree.root / "proc", run=run, which=shutil.which)
    res = exposed(host)
    assert res.status == "warn" and "IPv4 only" in res.summary, res  # type: ignore
    in_ns(netns, ["ip6tables", "-A", "INPUT", "-p", "tcp", "--dport", "29500", "-j", "DROP"])
    host = Host(proc=tree.root / "proc", run=run, which=shutil.which)
    assert exposed(host).status == "pass"  # type: ignore[attr-defined]


def test_without_nft_or_iptables_the_firewall_is_unknown_not_open(tmp_path: Path) -> None:
    """Neither tool can be run (not installed, or not on the PATH of slurmd's empty
    environment): the kernel may still drop every port; say unknown, and why."""
    r = run_all(Tree(tmp_path).host(commands={}))
    m, eph = r["firewall.manager"], r["firewall.ephemeral"]
    assert m.status == "skip" and m.summary.startswith(  # type: ignore[attr-defined]
        "firewall unknown: cannot read the rules of nftables, iptables (nft and "
        "iptables-save cannot be run (not installed or not on PATH)")
    assert eph.status == "skip" and "unknown" in eph.summary  # type: ignore[attr-defined]
    assert "open" not in eph.summary  # type: ignore[attr-defined]


def test_a_tool_that_fails_says_why(tmp_path: Path) -> None:
    host = Tree(tmp_path).host(commands={NFT: CommandOutput(1, "", "Operation not permitted")})
    m = run_all(host)["firewall.manager"]
    assert m.status == "skip" and "nftables: nft exited 1: Operation not permitted" in \
        m.summary  # type: ignore[attr-defined]

"""names family: the Debian 127.0.1.1 hostname trap, unresolvable names, MASTER_ADDR with
several answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpnet.doctor import names
from ddpnet.doctor.base import SelectedInterface
from ddpnet.net.names import hostname_address, hosts_fix, is_loopback
from ddpnet.tune import hosts as tune_hosts
from tests.doctor.helpers import Tree, inputs

HOSTS_DEBIAN = "127.0.0.1\tlocalhost\n127.0.1.1\tnode1.example node1\n"


def test_hostname_on_127_0_1_1_fails_with_the_line_to_fix(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    tree.write("etc/hosts", HOSTS_DEBIAN)
    host = tree.host(names={"node1": ["127.0.1.1"]})
    r = names.HostnameResolves().run(host, inputs())
    assert r.status == "fail"
    assert "127.0.1.1 node1.example node1" in r.detail
    assert "'198.18.0.3 node1'" in r.fix
    assert r.facts["hostname_loopback"] is True


def test_loopback_hostname_with_gloo_ifname_passes(tmp_path: Path) -> None:
    host = Tree(tmp_path).host(names={"node1": ["::1", "127.0.1.1"]},
                               environ={"GLOO_SOCKET_IFNAME": "eth0"})
    r = names.HostnameResolves().run(host, inputs())
    assert r.status == "pass" and "GLOO_SOCKET_IFNAME=eth0" in r.summary
    assert r.facts["hostname_loopback"] is True


def test_loopback_first_fails_loopback_later_warns(tmp_path: Path) -> None:
    host = Tree(tmp_path).host(names={"node1": ["127.0.1.1", "198.18.0.3"]})
    r = names.HostnameResolves().run(host, inputs())
    assert r.status == "fail" and "resolves first to loopback (127.0.1.1)" in r.summary
    host = Tree(tmp_path).host(names={"node1": ["198.18.0.3", "127.0.1.1"]})
    r = names.HostnameResolves().run(host, inputs())
    assert r.status == "warn" and r.facts["hostname_loopback"] is False
    host = Tree(tmp_path / "b").host(names={"node1": ["198.18.0.3"]})
    r = names.HostnameResolves().run(host, inputs())
    assert r.status == "pass" and r.facts["hostname_loopback"] is False


def test_unresolvable_hostname_fails(tmp_path: Path) -> None:
    r = names.HostnameResolves().run(Tree(tmp_path).host(names={}), inputs())
    assert r.status == "fail" and "does not resolve" in r.summary
    assert "Name or service not known" in r.detail


def test_master_addr(tmp_path: Path) -> None:
    host = Tree(tmp_path).host(names={
        "198.18.0.1": ["198.18.0.1"], "master": ["198.18.0.1", "198.18.0.2"],
        "dual": ["198.18.0.1", "2001:db8::1"], "localhost": ["127.0.0.1"]})
    run = names.MasterResolves().run
    assert run(host, inputs()).status == "pass"
    r = run(host, inputs(master_addr="master"))
    assert r.status == "warn" and "2 addresses" in r.summary
    r = run(host, inputs(master_addr="dual"))
    assert r.status == "warn" and "IPv4 and IPv6" in r.summary
    r = run(host, inputs(master_addr="nosuch"))
    assert r.status == "fail" and "does not resolve" in r.summary
    r = run(host, inputs(master_addr="localhost", num_nodes=4))
    assert r.status == "fail" and "loopback on a 4-node job" in r.summary
    assert run(host, inputs(master_addr="localhost", num_nodes=1)).status == "pass"


def test_loopback_hostname_on_a_single_host_run_only_warns(tmp_path: Path) -> None:
    host = Tree(tmp_path).host(names={"node1": ["127.0.1.1"]})
    r = names.HostnameResolves().run(host, inputs(master_addr="127.0.0.1", num_nodes=1))
    assert r.status == "warn" and "multi-node job would hang" in r.summary
    r = names.HostnameResolves().run(host, inputs(master_addr="198.18.0.1", num_nodes=1))
    assert r.status == "fail"


def test_hostname_on_127_0_0_1_single_host_fix_names_the_nic_not_loopback(tmp_path: Path) -> None:
    """A single-host run selects ``lo``; the fix must still map the name to the NIC's address
    (it proposed "replace the line mapping vm to 127.0.0.1 with '127.0.0.1 vm'")."""
    tree = Tree(tmp_path)
    tree.write("etc/hosts", "127.0.0.1 localhost vm\n::1 localhost\n")
    host = tree.host(names={"vm": ["127.0.0.1"]}, hostname="vm")
    single = inputs(master_addr="127.0.0.1", num_nodes=1, world_size=2, node_rank=0,
                    selected=SelectedInterface("lo", "127.0.0.1", "MASTER_ADDR is loopback"))
    r = names.HostnameResolves().run(host, single)
    assert r.status == "warn"
    assert "'127.0.0.1 vm'" not in r.fix
    assert "remove vm from the 127.0.0.1 line" in r.fix
    assert "add the line '198.18.0.3 vm'" in r.fix


@pytest.mark.parametrize("hosts_text,hostname,resolved", [
    ("127.0.0.1 localhost vm\n", "vm", "127.0.0.1"),
    ("127.0.0.1\tlocalhost\n127.0.1.1\tnode1.example node1\n", "node1.example", "127.0.1.1"),
    ("127.0.0.1 localhost\n127.0.1.1 node1 # debian\n198.18.0.3 node1\n", "node1", "127.0.1.1"),
])
def test_doctor_proposes_the_fix_tune_applies(tmp_path: Path, hosts_text: str, hostname: str,
                                              resolved: str) -> None:
    """One fix: doctor's proposal is the rewrite tune's renderer writes, and that rewrite
    takes the name off loopback."""
    tree = Tree(tmp_path)
    tree.write("etc/hosts", hosts_text)
    host = tree.host(names={hostname: [resolved]}, hostname=hostname)
    single = inputs(selected=SelectedInterface("lo", "127.0.0.1", "MASTER_ADDR is loopback"))
    r = names.HostnameResolves().run(host, single)
    fix = hosts_fix(hosts_text, hostname, "198.18.0.3")
    assert fix.changes and fix.proposal in r.fix
    new, what = tune_hosts.fix_hosts(hosts_text, hostname, "198.18.0.3")
    assert (new, what) == (fix.content, fix.what)
    for line in new.splitlines():
        fields = line.split("#")[0].split()
        assert not (fields and is_loopback(fields[0]) and hostname in fields[1:]), new


def test_no_fix_maps_a_name_to_loopback() -> None:
    assert hostname_address([], "127.0.0.1") == (None, "no up interface has a routable address")
    with pytest.raises(ValueError, match="fixes nothing"):
        hosts_fix("127.0.0.1 localhost vm\n", "vm", "127.0.0.1")


def test_resolver_speed_names_a_dead_nameserver(tmp_path: Path) -> None:
    import dataclasses

    from ddpnet.doctor.names import ResolverSpeed
    from ddpnet.net.resolver import Lookup

    tree = Tree(tmp_path)
    tree.write("etc/resolv.conf", "nameserver 198.18.0.253\noptions timeout:3 attempts:1\n")
    asked: list[tuple[list[str], list[str]]] = []

    def canned(forward: list[str], reverse: list[str]) -> list[Lookup]:
        asked.append((list(forward), list(reverse)))
        return [Lookup("forward", forward[0], 0.01, "198.18.0.3"),
                Lookup("reverse", reverse[-1], 3.0, answered=False)]

    host = dataclasses.replace(tree.host(), lookups=canned)
    r = ResolverSpeed().run(host, inputs(master_addr="198.18.0.1"))
    assert asked == [(["node1"], ["198.18.0.3", "198.18.0.1"])]
    assert r.status == "warn" and "up to 3 s each" in r.summary
    assert "198.18.0.253" in r.detail and "/etc/hosts" in r.fix
    assert r.facts["resolver"]["lookups"][1]["answered"] is False
    ok = dataclasses.replace(tree.host(), lookups=lambda f, rv: [Lookup("forward", "a", 0.0)])
    assert ResolverSpeed().run(ok, inputs()).status == "pass"
    assert ResolverSpeed().run(tree.host(), inputs()).status == "skip"

"""names family: the Debian 127.0.1.1 hostname trap, unresolvable names, MASTER_ADDR with
several answers."""

from __future__ import annotations

from pathlib import Path

from ddpnet.doctor import names
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

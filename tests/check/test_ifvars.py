"""Interface variables compared across nodes as the libraries read them (rank 0, pure)."""

from __future__ import annotations

from typing import Any

from ddpnet.check.causes import Cause
from ddpnet.check.compare import NodeFacts
from ddpnet.check.ifvars import compare_picks
from ddpnet.check.stages.facts import binding_facts, prefer_bindings
from ddpnet.net.interfaces import Address, Interface
from ddpnet.net.picks import GLOO, NCCL


def _i(name: str, cidr: str, kind: str = "physical") -> Interface:
    ip, prefix = cidr.split("/")
    return Interface(name, True, (Address(ip, int(prefix), 4),), 1500, None, kind)


def _node(rank: int, environ: dict[str, str], table: tuple[Interface, ...],
          order: tuple[str, ...]) -> NodeFacts:
    cluster = next(i for i in table if i.addresses[0].ip.startswith("10."))
    facts: dict[str, Any] = {"hostname": f"n{rank}", "address": cluster.addresses[0].ip,
                             "subnet": "10.0.0.0/24", **binding_facts(environ, table, order)}
    return NodeFacts(rank, facts)


LO = _i("lo", "127.0.0.1/8", "loopback")


def _cluster(rank: int, first: str = "eth0") -> tuple[tuple[Interface, ...], tuple[str, ...]]:
    eth0, eth1 = _i("eth0", f"10.0.0.{rank + 1}/24"), _i("eth1", f"192.168.9.{rank + 1}/24")
    order = ("lo", "eth0", "eth1") if first == "eth0" else ("lo", "eth1", "eth0")
    return (eth0, eth1, LO), order


def test_a_prefix_that_matches_another_nic_first_on_one_node_is_named() -> None:
    nodes = [_node(r, {NCCL: "eth"}, *_cluster(r, "eth1" if r == 2 else "eth0"))
             for r in range(3)]
    [cause] = compare_picks(nodes)
    assert cause.id == "ifname-mismatch" and cause.severity == "fail" and cause.ranks == (2,)
    assert "rank 2 on n2 (10.0.0.3): NCCL_SOCKET_IFNAME=eth picks eth1 192.168.9.3 " \
        "(192.168.9.0/24, not the cluster subnet 10.0.0.0/24" in cause.detail
    assert "rank(s) 0,1: eth0 in 10.0.0.0/24" in cause.detail
    assert cause.fix == "on n2 (10.0.0.3): export NCCL_SOCKET_IFNAME==eth0"


def test_an_exclusion_that_leaves_loopback_fails_on_every_node() -> None:
    nodes = [_node(r, {NCCL: "^docker0"}, *_cluster(r)) for r in range(2)]
    [cause] = compare_picks(nodes)
    assert cause.ranks == (0, 1) and "picks lo 127.0.0.1 (loopback" in cause.detail


def test_every_node_agreeing_on_another_network_is_a_warning() -> None:
    nodes = [_node(r, {GLOO: "eth1"}, *_cluster(r)) for r in range(2)]
    [cause] = compare_picks(nodes)
    assert cause.severity == "warn" and "every node agrees" in cause.detail
    assert "export GLOO_SOCKET_IFNAME=eth0" in cause.fix


def test_gloo_device_lists_of_different_lengths_are_named() -> None:
    nodes = [_node(r, {GLOO: "eth0,eth1" if r == 1 else "eth0"}, *_cluster(r))
             for r in range(3)]
    causes = compare_picks(nodes)
    devices = [c for c in causes if "number of devices" in c.detail]
    assert len(devices) == 1 and devices[0].ranks == (1,)
    assert "rank 1 on n1 (10.0.0.2): 2 (GLOO_SOCKET_IFNAME=eth0,eth1)" in devices[0].detail


def test_agreeing_cluster_bindings_and_one_host_name_nothing() -> None:
    nodes = [_node(r, {NCCL: "=eth0", GLOO: "eth0"}, *_cluster(r)) for r in range(3)]
    assert compare_picks(nodes) == []
    one = [NodeFacts(r, {**n.facts, "hostname": "same"}) for r, n in enumerate(nodes)]
    bad = [_node(r, {NCCL: "^docker0"}, *_cluster(r)) for r in range(2)]
    assert compare_picks([NodeFacts(n.rank, {**n.facts, "hostname": "same"})
                          for n in bad]) == [] and compare_picks(one) == []


def test_gloos_network_finding_is_the_checks_own_interface_mismatch() -> None:
    # the check binds gloo where GLOO_SOCKET_IFNAME says: its interface-mismatch says it
    mine = Cause("interface-mismatch", "d", "f", ranks=(2,))
    same = Cause("ifname-mismatch", "d", "f", ranks=(2,), data={"var": GLOO})
    count = Cause("ifname-mismatch", "d", "f", ranks=(2,), data={"var": GLOO, "devices": True})
    other = Cause("ifname-mismatch", "d", "f", ranks=(2,), data={"var": NCCL})
    assert prefer_bindings([mine], [same, count, other]) == [mine, count, other]
    assert prefer_bindings([], [same]) == [same]


def test_the_shells_variable_fails_as_the_doctor_fails_it() -> None:
    from ddpnet.check.ifvars import shell_cause
    from ddpnet.doctor.base import Host, Inputs, SelectedInterface
    from ddpnet.doctor.environment import IfnameVars

    lo = Interface("lo", True, (Address("127.0.0.1", 8, 4),), 65536, None, "loopback")
    inputs = Inputs(interfaces=(lo,), selected=SelectedInterface("lo"))
    bad = IfnameVars().run(Host(environ={"GLOO_SOCKET_IFNAME": "eth9"}), inputs)
    cause = shell_cause(bad, "vm")
    assert cause is not None and cause.severity == "fail" and cause.hosts == ("vm",)
    assert bad.summary in cause.detail and cause.fix == bad.fix
    assert shell_cause(IfnameVars().run(Host(environ={"GLOO_SOCKET_IFNAME": "lo"}), inputs),
                       "vm") is None

"""Several networks between the hosts: which to measure and when the job is on the slow one
(pure; the lab test is in test_lab_networks.py)."""

from __future__ import annotations

from typing import Any

from ddpnet.check import networks
from ddpnet.check.compare import NodeFacts
from ddpnet.check.nics import nic_facts
from ddpnet.check.stages.facts import binding_facts
from ddpnet.net.interfaces import Address, Interface


def _i(name: str, *cidrs: str, speed: int | None = None, kind: str = "physical",
       up: bool = True) -> Interface:
    addrs = tuple(Address(c.split("/")[0], int(c.split("/")[1]), 6 if ":" in c else 4)
                  for c in cidrs)
    return Interface(name, up, addrs, 1500, speed, kind)


LO = _i("lo", "127.0.0.1/8", kind="loopback")


def _node(rank: int, *table: Interface, address: str | None = None,
          iface: str = "eth0") -> NodeFacts:
    """A rank's facts as the facts stage publishes them, from its interface table."""
    address = address or f"10.0.0.{rank + 1}"
    facts: dict[str, Any] = {
        "hostname": f"n{rank}", "address": address, "interface": iface,
        "subnet": "10.0.0.0/24", **binding_facts({}, (LO, *table), ("lo",)),
        **nic_facts((LO, *table), "auto", "routes to MASTER_ADDR", lambda _k: None)}
    return NodeFacts(rank, facts)


def _two_networks(n: int = 3, mgmt: int | None = 1000, fast: int | None = 100000,
                  **kw: Any) -> list[NodeFacts]:
    return [_node(r, _i("eth0", f"10.0.0.{r + 1}/24", speed=mgmt),
                  _i("ib0", f"10.1.0.{r + 1}/24", speed=fast, **kw)) for r in range(n)]


def test_a_network_every_host_shares_is_planned_with_a_sender_on_another_host() -> None:
    p = networks.plan(_two_networks())
    assert p is not None and p.sender == 1
    assert p.chosen.subnet == "10.0.0.0/24" and p.chosen.interfaces == "eth0"
    assert [o.subnet for o in p.others] == ["10.1.0.0/24"]
    assert p.others[0].leg(0) == networks.Leg(0, "ib0", "10.1.0.1", 100000)
    assert networks.nominal_ratio(p.chosen, p.others[0]) == 100.0


def test_nothing_to_compare_on_one_network_one_host_or_a_faster_job_network() -> None:
    one_net = [_node(r, _i("eth0", f"10.0.0.{r + 1}/24")) for r in range(3)]
    assert networks.plan(one_net) is None
    # two ranks of one host (same address): one host, nothing between hosts to compare
    one_host = [_node(r, _i("eth0", "10.0.0.1/24"), _i("eth1", "10.1.0.1/24"),
                      address="10.0.0.1") for r in range(2)]
    assert networks.plan(one_host) is None
    # the job already runs on the nominally faster network: no stream is spent on it
    assert networks.plan(_two_networks(mgmt=100000, fast=1000)) is None


def test_alike_bridges_docker_down_and_partial_networks_are_not_networks() -> None:
    def host(r: int, *extra: Interface) -> NodeFacts:
        return _node(r, _i("eth0", f"10.0.0.{r + 1}/24"), *extra)

    # docker0 / virbr0 with one address on every host: local to each host
    same_bridge = [host(r, _i("virbr0", "192.168.122.1/24", kind="bridge")) for r in range(3)]
    docker = [host(r, _i("docker0", f"172.17.0.{r + 1}/16", kind="docker")) for r in range(3)]
    down = [host(r, _i("eth1", f"10.1.0.{r + 1}/24", up=False)) for r in range(3)]
    partial = [host(r, *([_i("eth1", f"10.1.0.{r + 1}/24")] if r < 2 else []))
               for r in range(3)]
    # a second address on the job's own NIC is the same link, not another network
    same_nic = [_node(r, _i("eth0", f"10.0.0.{r + 1}/24", f"10.5.0.{r + 1}/24"))
                for r in range(3)]
    for nodes in (same_bridge, docker, down, partial, same_nic):
        assert networks.plan(nodes) is None


def test_measured_twice_as_fast_is_named_with_the_fix() -> None:
    p = networks.plan(_two_networks(mgmt=None, fast=None))  # virtual links: speed unknown
    assert p is not None
    labels = {0: "n0 (10.0.0.1)", 1: "n1 (10.0.0.2)", 2: "n2 (10.0.0.3)"}
    cause = networks.judge(p, [0.094, 3.1], labels)
    assert cause is not None and cause.id == "slower-network-chosen"
    assert cause.severity == "warn" and cause.ranks == (0, 1)
    assert cause.hosts == ("n0 (10.0.0.1)", "n1 (10.0.0.2)")
    assert "10.0.0.0/24 (eth0" in cause.detail and "0.09 Gb/s" in cause.detail
    assert "10.1.0.0/24 (ib0" in cause.detail and "33.0x faster measured" in cause.detail
    assert "MASTER_ADDR to rank 0's address on it (10.1.0.1)" in cause.fix
    assert "GLOO_SOCKET_IFNAME=ib0 NCCL_SOCKET_IFNAME==ib0 on every node" in cause.fix
    # 1.5x is not enough, and an unmeasured network with unknown speeds is never named
    assert networks.judge(p, [1.0, 1.5], labels) is None
    assert networks.judge(p, [1.0, None], labels) is None


def test_nominal_speed_names_it_unless_the_measurement_contradicts() -> None:
    p = networks.plan(_two_networks(mgmt=1000, fast=100000))
    assert p is not None
    by_speed = networks.judge(p, [None, None], {})
    assert by_speed is not None and "100.0x faster by link speed" in by_speed.detail
    assert "1000 Mb/s" in by_speed.detail and "100000 Mb/s" in by_speed.detail
    # a single stream CPU-bound at 9 Gb/s either way: the link speed still decides
    assert networks.judge(p, [9.0, 9.5], {}) is not None
    # measured slower over the "fast" network (a bad cable, a 1 G switch): not named
    assert networks.judge(p, [0.9, 0.5], {}) is None


def test_per_host_interface_names_are_listed_per_host() -> None:
    nodes = [_node(r, _i("eth0", f"10.0.0.{r + 1}/24"),
                   _i(f"enp{r}s0", f"10.1.0.{r + 1}/24")) for r in range(2)]
    p = networks.plan(nodes)
    assert p is not None
    cause = networks.judge(p, [0.1, 1.0], {0: "n0", 1: "n1"})
    assert cause is not None and "10.1.0.0/24 (enp0s0, enp1s0" in cause.detail
    assert "on n0: export GLOO_SOCKET_IFNAME=enp0s0" in cause.fix
    assert "on n1: export GLOO_SOCKET_IFNAME=enp1s0 NCCL_SOCKET_IFNAME==enp1s0" in cause.fix


def test_at_most_three_other_networks_and_the_summary_lists_each() -> None:
    nodes = [_node(r, _i("eth0", f"10.0.0.{r + 1}/24"),
                   *(_i(f"eth{k}", f"10.{k}.0.{r + 1}/24") for k in range(1, 6)))
             for r in range(2)]
    p = networks.plan(nodes)
    assert p is not None and len(p.others) == networks.MAX_ALTERNATIVES
    rows = networks.summary(p, [0.5, 2.0, None, 0.4])
    assert [r["job"] for r in rows] == [True, False, False, False]
    assert rows[1] == {"subnet": "10.1.0.0/24", "interfaces": "eth1",
                       "nominal": "speed unknown", "job": False, "gbps": 2.0}
    assert "rank 1 streamed to rank 0" in networks.note(p, [0.5, 2.0, None, 0.4])
    assert "not measured" in networks.note(p, [0.5, 2.0, None, 0.4])


def test_facts_of_an_older_rank_without_links_are_judged_by_measurement_only() -> None:
    nodes = _two_networks(mgmt=1000, fast=100000)
    old = NodeFacts(2, {k: v for k, v in nodes[2].facts.items() if k != "links"})
    p = networks.plan([*nodes[:2], old])
    assert p is not None and networks.nominal_ratio(p.chosen, p.others[0]) is None
    assert networks.judge(p, [0.1, 0.15], {}) is None

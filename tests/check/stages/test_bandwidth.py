"""The bandwidth judgement: only links that cross a NIC are compared (issue 18, item 11:
``make demo`` warned "check the switch ports" over loopback), and links slow for their
round trip are high-latency's, not slow-node's (issue 57)."""

from __future__ import annotations

from ddpnet.check import latency, tournament
from ddpnet.check.causes import Cause
from ddpnet.check.context import Findings
from ddpnet.check.registration import Registration
from ddpnet.check.stages.bandwidth import _judge
from ddpnet.check.stages.latency import judge


def _found(addresses: list[str]) -> Findings:
    roster = [Registration(rank=r, world_size=len(addresses), master_port=29500, host="vm",
                           address=a, interface="lo", pid=100 + r, uid=str(r))
              for r, a in enumerate(addresses)]
    return Findings(world=len(addresses), master="127.0.0.1:29500", roster=roster)


def _bw(n: int, slow: dict[tuple[int, int], float],
        fast: float = 8.0) -> list[list[float | None]]:
    return [[None if i == j else slow.get((i, j), fast) for j in range(n)] for i in range(n)]


def test_one_host_over_loopback_raises_no_link_warning() -> None:
    found = _found(["127.0.0.1"] * 4)
    assert _judge(found, _bw(4, {(1, 2): 2.0, (3, 0): 1.5})) == []
    assert any("cross a NIC" in n for n in found.extra["notes"])


def test_one_host_by_its_nic_address_raises_no_link_warning() -> None:
    found = _found(["10.0.0.5"] * 4)
    assert _judge(found, _bw(4, {(3, j): 0.5 for j in range(3)})) == []


def test_two_hosts_judge_only_the_links_between_them() -> None:
    # ranks 0,1 on host A and 2,3 on host B; the slow same-host link 0->1 is not named,
    # the slow cross-host link 1->2 is
    found = _found(["198.18.0.1", "198.18.0.1", "198.18.0.2", "198.18.0.2"])
    (cause,) = _judge(found, _bw(4, {(0, 1): 0.5, (1, 2): 1.0}))
    assert cause.id == "slow-link" and cause.ranks == (1, 2)
    assert "0->1" not in cause.detail and "1->2" in cause.detail
    assert cause.hosts == ("vm (198.18.0.1)", "vm (198.18.0.2)")


def test_cross_nic_blanks_same_host_and_loopback_pairs() -> None:
    gbps, blanked = tournament.cross_nic(_bw(3, {}), ["10.0.0.1", "127.0.0.1", "10.0.0.2"])
    assert blanked == 4  # 0<->1 and 1<->2 involve loopback
    assert gbps[0][2] == 8.0 and gbps[2][0] == 8.0 and gbps[0][1] is None


def test_cause_names_each_host_once() -> None:
    cause = Cause(id="slow-link", detail="d", fix="f", hosts=("vm (127.0.0.1)",) * 2)
    assert cause.hosts == ("vm (127.0.0.1)",)


#: the 4-node 1 Gbit/s lab: node 2 behind `delay 40ms`, node 3 shaped to 100 Mbit/s
LAB = [f"198.18.0.{i + 1}" for i in range(4)]


def _lab_round_trips() -> dict[tuple[int, int], float]:
    return {(i, j): 0.05 + 40.3 * (2 in (i, j)) for i in range(4) for j in range(4) if i != j}


def _lab_rates() -> list[list[float | None]]:
    return _bw(4, {**{p: 0.44 for i in (0, 1) for p in ((i, 2), (2, i))},
                   **{p: 0.09 for i in range(3) for p in ((i, 3), (3, i))}}, fast=0.95)


def _lab_facts() -> dict[int, dict[str, object]]:
    return {r: {"address": a, "interface": "eth0", "subnet": "198.18.0.0/24",
                "sysctl": {"net.ipv4.tcp_rmem": "4096 131072 33554432",
                           "net.ipv4.tcp_wmem": "4096 16384 4194304"}}
            for r, a in enumerate(LAB)}


def test_a_delayed_node_is_high_latency_and_a_rate_limited_one_still_slow_node() -> None:
    found = _found(LAB)
    found.rtt = _lab_round_trips()
    found.latency = latency.find(found.rtt, LAB)
    found.windows = {r: latency.Window.of(f) for r, f in _lab_facts().items()}
    found.causes.extend(_judge(found, _lab_rates()))
    found.stages["bandwidth"] = "fail"
    # the delayed node's links are left to high-latency: only the shaped node is slow
    assert [(c.id, c.ranks) for c in found.causes] == [("slow-node", (3,))]
    judge(found, _lab_facts())
    cause = next(c for c in found.causes if c.id == "high-latency")
    assert cause.ranks == (2,) and cause.severity == "fail" and cause.stage == "bandwidth"
    # judged against the healthy links, not a median the shaped node drags down
    assert "0.44 Gb/s while the others carry 0.95 Gb/s" in cause.detail
    assert "ddpnet tune --cluster-subnet 198.18.0.0/24" in cause.fix
    assert "tc qdisc show dev eth0" in cause.fix
    assert found.stages["bandwidth"] == "fail"


def test_without_the_round_trips_the_delayed_node_is_slow_node_as_before() -> None:
    found = _found(LAB)
    causes = _judge(found, _lab_rates())
    assert sorted(c.ranks for c in causes if c.id == "slow-node") == [(3,)]
    judge(found, _lab_facts())  # nothing measured: nothing named
    assert not any(c.id == "high-latency" for c in found.causes)


def test_a_shaped_node_whose_probes_queued_behind_a_stream_is_still_slow_node() -> None:
    # node 3 at 100 Mbit/s timed at 40 ms both ways (its tbf queue full of a ring stream):
    # 0.09 Gb/s is far below what the window allows at 40 ms, so it is not the latency's
    found = _found(LAB)
    found.rtt = {(i, j): 0.05 + 40.3 * (3 in (i, j)) for i in range(4) for j in range(4)
                 if i != j}
    found.latency = latency.find(found.rtt, LAB)
    found.windows = {r: latency.Window.of(f) for r, f in _lab_facts().items()}
    assert found.latency is not None
    causes = _judge(found, _bw(4, {p: 0.09 for i in range(3) for p in ((i, 3), (3, i))},
                               fast=0.95))
    assert [(c.id, c.ranks) for c in causes] == [("slow-node", (3,))]
    assert found.latency is None
    found.causes.extend(causes)
    judge(found, _lab_facts())
    assert not any(c.id == "high-latency" for c in found.causes)

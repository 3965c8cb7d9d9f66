"""The link baseline: pair planning, method choice, iperf3 JSON, sysfs speed; and real
measurements over loopback with both methods (two threads stand in for two ranks)."""

from __future__ import annotations

import json
import shutil
import threading
from typing import Any

import pytest

from ddpnet.bench.link import (
    Endpoint,
    choose_method,
    local_address,
    measure_link,
    merge_pairs,
    nominal_gbps,
    parse_iperf3,
    plan_pairs,
)
from ddpnet.bench.result import PairRate
from ddpnet.errors import RequirementError
from ddpnet.net.interfaces import Address, Interface, parse_speed


def ep(rank: int, addr: str, iperf3: bool = True) -> Endpoint:
    return Endpoint(rank, addr, "eth0", iperf3)


def test_plan_pairs_ring_over_one_rank_per_host() -> None:
    eps = [ep(0, "a"), ep(1, "a"), ep(2, "b"), ep(3, "b"), ep(4, "c"), ep(5, "c")]
    assert plan_pairs(eps) == [(0, 2), (2, 4), (4, 0)]


def test_plan_pairs_two_hosts_both_directions() -> None:
    assert plan_pairs([ep(1, "b"), ep(0, "a")]) == [(0, 1), (1, 0)]


def test_plan_pairs_one_host_and_one_rank() -> None:
    assert plan_pairs([ep(0, "lo"), ep(1, "lo"), ep(2, "lo")]) == [(0, 1)]
    assert plan_pairs([ep(0, "lo")]) == []


def test_plan_pairs_grows_linearly() -> None:
    eps = [ep(r, f"10.0.{r // 256}.{r % 256}") for r in range(1000)]
    pairs = plan_pairs(eps)
    assert len(pairs) == 1000 and pairs[-1] == (999, 0)


def test_choose_method() -> None:
    both = [ep(0, "a"), ep(1, "b")]
    assert choose_method("auto", both) == ("iperf3", "")
    method, note = choose_method("auto", [ep(0, "a"), ep(1, "b", iperf3=False)])
    assert method == "tcp" and "iperf3 missing" in note
    assert choose_method("tcp", both) == ("tcp", "")
    with pytest.raises(RequirementError) as err:
        choose_method("iperf3", [ep(0, "a"), ep(1, "b", iperf3=False)])
    assert "rank(s) 1" in err.value.message and "--baseline tcp" in err.value.hint


def iface(name: str, *ips: str, speed_mbps: int | None = None) -> Interface:
    addrs = tuple(Address(ip, 64 if ":" in ip else 24, 6 if ":" in ip else 4) for ip in ips)
    return Interface(name, True, addrs, 1500, speed_mbps, "physical")


def test_local_address_is_what_the_library_binds() -> None:
    # (interface_of moved to net.interfaces.owner_of: tests/net/test_interfaces.py)
    table = [iface("lo", "127.0.0.1", "::1"), iface("eth0", "198.18.0.2"),
             iface("eth1", "fe80::2", "198.18.1.2"), iface("docker0", "172.17.0.1")]
    order = ("lo", "eth0", "eth1", "docker0")
    pinned = {"GLOO_SOCKET_IFNAME": "eth1,eth0"}
    assert local_address(pinned, "gloo", table, "198.18.0.2", order) == "198.18.1.2"
    # pinned for the other backend: the selector's address toward MASTER_ADDR
    assert local_address(pinned, "nccl", table, "198.18.0.2", order) == "198.18.0.2"
    assert local_address({}, "gloo", table, None, order) == "127.0.0.1"
    # NCCL's syntax as NCCL reads it: prefix (first in kernel order), exact, exclusion
    assert local_address({"NCCL_SOCKET_IFNAME": "eth"}, "nccl", table, None, order) \
        == "198.18.0.2"
    assert local_address({"NCCL_SOCKET_IFNAME": "=eth1"}, "nccl", table, None, order) \
        == "198.18.1.2"
    assert local_address({"NCCL_SOCKET_IFNAME": "^lo,eth"}, "nccl", table, None, order) \
        == "172.17.0.1"
    # a pin that matches nothing here: the selector's address, not a made-up one
    assert local_address({"GLOO_SOCKET_IFNAME": "ib0"}, "gloo", table, "198.18.0.2", order) \
        == "198.18.0.2"


IPERF3_OK = {"start": {}, "end": {"sum_sent": {"bits_per_second": 9.6e8},
                                  "sum_received": {"bits_per_second": 9.41e8}}}


def test_parse_iperf3() -> None:
    assert parse_iperf3(json.dumps(IPERF3_OK)) == pytest.approx(0.941)
    with pytest.raises(ValueError, match="unable to connect"):
        parse_iperf3(json.dumps({"start": {}, "end": {},
                                 "error": "unable to connect to server"}))
    with pytest.raises(ValueError):
        parse_iperf3(json.dumps({"end": {}}))
    with pytest.raises(ValueError):
        parse_iperf3("")


def test_nominal_gbps() -> None:
    # the sysfs speed file is read by net.interfaces (parse_speed); the bench converts it
    for text, gbps in (("25000\n", 25.0), ("-1\n", None), ("x\n", None), (None, None)):
        assert nominal_gbps(iface("eth0", speed_mbps=parse_speed(text))) == gbps
    assert nominal_gbps(None) is None


def test_merge_pairs_prefers_a_rate_and_marks_the_missing() -> None:
    pairs = [(0, 1), (1, 2), (2, 0)]
    reports = [[PairRate(0, 1, None, "refused")], [PairRate(0, 1, 0.9)], []]
    assert merge_pairs(pairs, reports) == [
        PairRate(0, 1, 0.9), PairRate(1, 2, None, "not reported"),
        PairRate(2, 0, None, "not reported")]


class ThreadGroup:
    """all_gather_object for ranks that are threads of this process."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.barrier = threading.Barrier(n, timeout=60)
        self.slots: list[Any] = [None] * n
        self.lock = threading.Lock()

    def allgather(self, rank: int) -> Any:
        def gather(obj: Any) -> list[Any]:
            self.slots[rank] = obj
            self.barrier.wait()
            out = list(self.slots)
            self.barrier.wait()
            return out

        return gather


def measure_on_threads(method: str, n: int = 2) -> list[Any]:
    group = ThreadGroup(n)
    results: list[Any] = [None] * n

    def rank_main(rank: int) -> None:
        results[rank] = measure_link(method, 1.0, rank, group.allgather(rank), backend="gloo",
                                     environ={"GLOO_SOCKET_IFNAME": "lo"},
                                     master_addr="127.0.0.1")

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


@pytest.mark.parametrize("method", [
    "tcp",
    pytest.param("iperf3", marks=pytest.mark.skipif(shutil.which("iperf3") is None,
                                                    reason="iperf3 not installed")),
])
def test_measure_link_over_loopback(method: str) -> None:
    results = measure_on_threads(method)
    assert results[0] == results[1]  # every rank learns the same baseline
    link = results[0]
    assert link.method == method and link.interface == "lo"
    assert [(p.src, p.dst) for p in link.pairs] == [(0, 1)]
    assert link.pairs[0].error == ""
    assert "loopback" in link.note
    # loopback carries gigabits per second even on a loaded 2-core machine
    assert link.gbps is not None and link.gbps > 0.5, link


def test_measure_link_none_and_single_rank() -> None:
    link = measure_link("none", 1.0, 0, lambda obj: [obj], backend="gloo", environ={},
                        master_addr="127.0.0.1")
    assert link.gbps is None and link.method == "none"
    one = measure_link("tcp", 1.0, 0, lambda obj: [obj], backend="gloo",
                       environ={"GLOO_SOCKET_IFNAME": "lo"}, master_addr="127.0.0.1")
    assert one.gbps is None and one.pairs == () and "one rank" in one.note


def test_summarize_uses_slowest_pair_and_keeps_errors() -> None:
    from ddpnet.bench.link import summarize

    link = summarize("iperf3", [PairRate(0, 1, 0.94), PairRate(1, 2, 0.91),
                                PairRate(2, 0, None, "refused")], 10.0, "eth0", "")
    assert link.gbps == 0.91 and link.nominal_gbps == 10.0
    failed = summarize("tcp", [PairRate(0, 1, None, "refused")], None, None, "")
    assert failed.gbps is None and "refused" in failed.note

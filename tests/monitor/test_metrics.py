"""The node's metrics as a scrape renders them (monitor.metrics): exact rates from fixture
counters, real prometheus_client text, Prometheus's promtool when installed."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ddpnet.monitor.metrics import OTHER, NodeCollector, NodeState, top_peers
from ddpnet.monitor.rates import PeerRate, compute
from ddpnet.monitor.sources import GpuReading, SocketBytes
from tests.monitor.fixtures import counters, snap


def state() -> NodeState:
    node = NodeState("node1", "0.1.0")
    sock = (SocketBytes("10.0.0.1:5000", "10.0.0.2:29500", 0, 0),)
    later = (SocketBytes("10.0.0.1:5000", "10.0.0.2:29500", 2_000_000, 500_000),)
    a = snap(0.0, counters(0, 0), retrans=0, out=0, sockets=sock)
    b = snap(2.0, counters(250_000_000, 125_000_000, errors=3, drops=1), retrans=10, out=1000,
             sockets=later)
    node.add(compute(a, b, ["eth0"]))
    gpu = GpuReading(0, "H200", 50.0, 1024.0, 2048.0, 300.0, 100.0, None)
    c = snap(4.0, counters(250_000_000, 125_000_000, errors=5), retrans=10, out=2000,
             sockets=later)
    from dataclasses import replace
    node.add(replace(compute(b, c, ["eth0"]), gpus=(gpu,)))
    return node


def scrape(node: NodeState) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(node))
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_the_last_sample_is_served_in_bytes_and_the_counts_summed_since_start() -> None:
    got = scrape(state())
    eth0 = (("host", "node1"), ("interface", "eth0"))
    assert got[("ddpnet_node_network_receive_bytes_per_second", eth0)] == 0.0  # last sample
    assert got[("ddpnet_node_network_speed_bytes_per_second", eth0)] == 125e6  # 1 Gb/s
    assert got[("ddpnet_node_network_errors_total", eth0)] == 5  # 3 + 2 more
    assert got[("ddpnet_node_network_drops_total", eth0)] == 1
    assert got[("ddpnet_node_tcp_retransmits_total", (("host", "node1"),))] == 10
    assert got[("ddpnet_node_tcp_retransmit_ratio", (("host", "node1"),))] == 0.0
    gpu = (("gpu", "0"), ("host", "node1"), ("name", "H200"))
    assert got[("ddpnet_node_gpu_utilisation_ratio", gpu)] == 0.5
    assert got[("ddpnet_node_gpu_memory_total_bytes", gpu)] == 2048 * 2**20
    assert got[("ddpnet_node_gpu_pcie_transmit_bytes_per_second", gpu)] == 100e6
    assert ("ddpnet_node_gpu_pcie_receive_bytes_per_second", gpu) not in got  # unsupported
    peer = (("host", "node1"), ("peer", "10.0.0.2"))
    assert got[("ddpnet_node_peer_connections", peer)] == 1


def test_the_first_sample_rates() -> None:
    node = NodeState("node1")
    a, b = snap(0.0, counters(0, 0)), snap(2.0, counters(250_000_000, 125_000_000))
    node.add(compute(a, b, ["eth0"]))
    eth0 = (("host", "node1"), ("interface", "eth0"))
    got = scrape(node)
    assert got[("ddpnet_node_network_receive_bytes_per_second", eth0)] == 125e6
    assert got[("ddpnet_node_network_utilisation_ratio", eth0)] == 1.0


def test_before_any_sample_only_the_identity_and_zero_counts() -> None:
    got = scrape(NodeState("node1"))
    assert got[("ddpnet_node_info", (("host", "node1"), ("version", "")))] == 1
    assert not [k for k in got if k[0].endswith("_per_second")]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian's prometheus)")
def test_promtool_finds_nothing_to_say_about_a_scrape() -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(state()))
    out = subprocess.run(["promtool", "check", "metrics"], input=generate_latest(registry),
                         capture_output=True, timeout=60)
    assert out.returncode == 0 and not (out.stdout + out.stderr).strip(), out


def test_top_peers_keeps_the_busiest_and_sums_the_rest_into_other() -> None:
    peers = [PeerRate(f"10.0.0.{i}", i * 0.1, 0.05, 2) for i in range(1, 21)]
    kept = top_peers(peers, keep=8)
    assert [p.address for p in kept[:8]] == [f"10.0.0.{i}" for i in range(20, 12, -1)]
    other = kept[8]
    assert (other.address, other.connections) == (OTHER, 24)
    assert other.rx_gbps == pytest.approx(sum(i * 0.1 for i in range(1, 13)))
    assert other.tx_gbps == pytest.approx(12 * 0.05)
    assert top_peers(peers[:3], keep=8) == tuple(reversed(peers[:3]))  # no other: none left


def series_at(hosts: int) -> int:
    """The series one node serves in a job of ``hosts`` hosts under gloo's full mesh (a
    connection to every other host; one interface, no GPU)."""
    a = snap(0.0, counters(0, 0), retrans=0, out=0, sockets=tuple(
        SocketBytes("10.0.0.1:5000", f"10.1.{h // 250}.{h % 250}:29500", 0, 0)
        for h in range(hosts - 1)))
    b = snap(1.0, counters(1000, 1000), retrans=0, out=10, sockets=tuple(
        SocketBytes("10.0.0.1:5000", f"10.1.{h // 250}.{h % 250}:29500", 10 * h, 10 * h)
        for h in range(hosts - 1)))
    node = NodeState("node1", "0.1.0")
    node.add(compute(a, b, ["eth0"]))
    return len(scrape(node))


def test_a_nodes_series_stay_bounded_whatever_the_jobs_size() -> None:
    """docs/monitor.md's figures: 8 hosts 33 series, 64 and 1,024 hosts 39 (peers: the 8
    busiest and other, 3 series each; 3 per remote address made them 33, 201 and 3,081)."""
    assert [series_at(n) for n in (8, 64, 1024)] == [33, 39, 39]

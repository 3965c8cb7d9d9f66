"""The node's metrics (``ddpnet monitor --metrics-port``) in Prometheus's exposition format.

:class:`NodeCollector` is a ``prometheus_client`` collector over :class:`NodeState`: the last
:class:`~ddpnet.monitor.rates.Sample` the monitor took (rx/tx per interface against its link
speed, TCP retransmits, traffic per peer, GPUs) and the error and drop counts summed since
start (counters, so ``rate()`` and ``increase()`` work on them). A scrape renders what the
last sample measured; nothing is rendered between scrapes. Labels: ``host`` (this host's
name, as the job's metrics and DCGM's ``Hostname`` carry it), ``interface``, ``peer``
(an address: the :data:`TOP_PEERS` busiest, then ``other``), ``gpu`` (its index).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

from ddpnet.monitor.rates import PeerRate, Sample

PREFIX = "ddpnet_node"
MIB = 1 << 20
#: peers served by name: the busiest this many by traffic; the rest are summed into one
#: ``peer="other"`` series, so a node's series stay bounded however many hosts it talks to
#: (gloo's full mesh: every host of the job; plus whatever else connects)
TOP_PEERS = 8
OTHER = "other"


def top_peers(peers: Sequence[PeerRate], keep: int = TOP_PEERS) -> tuple[PeerRate, ...]:
    """The ``keep`` busiest peers (rx + tx; ties by address) and, when there are more, one
    ``other`` summing the rest (pure): at most ``keep + 1`` series per family."""
    ranked = sorted(peers, key=lambda p: (-(p.rx_gbps + p.tx_gbps), p.address))
    rest = ranked[keep:]
    if not rest:
        return tuple(ranked)
    other = PeerRate(OTHER, sum(p.rx_gbps for p in rest), sum(p.tx_gbps for p in rest),
                     sum(p.connections for p in rest))
    return (*ranked[:keep], other)


class NodeState:
    """The last sample and the totals since start: written by the sampling loop, read by
    scrapes (the server's thread), one lock."""

    def __init__(self, host: str, version: str = "") -> None:
        self.host, self.version = host, version
        self.lock = threading.Lock()
        self.last: Sample | None = None
        self.errors: dict[str, int] = {}
        self.drops: dict[str, int] = {}
        self.retransmits = 0.0

    def add(self, sample: Sample) -> None:
        with self.lock:
            self.last = sample
            for rate in sample.interfaces:
                self.errors[rate.name] = self.errors.get(rate.name, 0) + rate.errors
                self.drops[rate.name] = self.drops.get(rate.name, 0) + rate.drops
            self.retransmits += sample.retrans_per_s * sample.interval

    def copy(self) -> tuple[Sample | None, dict[str, int], dict[str, int], float]:
        with self.lock:
            return self.last, dict(self.errors), dict(self.drops), self.retransmits


def _gauge(name: str, text: str, labels: list[str]) -> Any:
    from prometheus_client.core import GaugeMetricFamily

    return GaugeMetricFamily(f"{PREFIX}_{name}", text, labels=["host", *labels])


class NodeCollector:
    """A ``prometheus_client`` custom collector over a :class:`NodeState`."""

    def __init__(self, state: NodeState) -> None:
        self.state = state

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import InfoMetricFamily

        sample, errors, drops, retransmits = self.state.copy()
        host = self.state.host
        info = InfoMetricFamily(PREFIX, "This node's ddpnet monitor (always 1)")
        info.add_metric([], {"host": host, "version": self.state.version})
        yield info
        yield from self.totals(host, errors, drops, retransmits)
        if sample is None:
            return
        when = _gauge("sample_timestamp_seconds", "When the last sample ended (Unix time)", [])
        when.add_metric([host], sample.time)
        span = _gauge("sample_interval_seconds", "How long the last sample measured", [])
        span.add_metric([host], sample.interval)
        yield from (when, span)
        yield from self.interfaces(host, sample)
        yield from self.tcp(host, sample)
        yield from self.peers(host, sample)
        yield from self.gpus(host, sample)

    def totals(self, host: str, errors: dict[str, int], drops: dict[str, int],
               retransmits: float) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        for name, counts, text in (("network_errors", errors, "Receive and transmit errors"),
                                   ("network_drops", drops, "Receive and transmit drops")):
            family = CounterMetricFamily(f"{PREFIX}_{name}", f"{text} since the monitor "
                                         "started", labels=["host", "interface"])
            for interface, count in sorted(counts.items()):
                family.add_metric([host, interface], float(count))
            yield family
        family = CounterMetricFamily(f"{PREFIX}_tcp_retransmits", "TCP segments retransmitted "
                                     "since the monitor started", labels=["host"])
        family.add_metric([host], round(retransmits))
        yield family

    def interfaces(self, host: str, sample: Sample) -> Iterator[Any]:
        labels = ["interface"]
        rx = _gauge("network_receive_bytes_per_second", "Bytes received per second over the "
                    "last sample", labels)
        tx = _gauge("network_transmit_bytes_per_second", "Bytes sent per second over the last "
                    "sample", labels)
        speed = _gauge("network_speed_bytes_per_second", "The link's nominal speed", labels)
        used = _gauge("network_utilisation_ratio", "The busier direction's share of the link "
                      "speed (0..1)", labels)
        for rate in sample.interfaces:
            names = [host, rate.name]
            rx.add_metric(names, rate.rx_gbps * 1e9 / 8)
            tx.add_metric(names, rate.tx_gbps * 1e9 / 8)
            if rate.link_gbps is not None:
                speed.add_metric(names, rate.link_gbps * 1e9 / 8)
            if rate.utilisation is not None:
                used.add_metric(names, rate.utilisation)
        yield from (rx, tx, speed, used)

    def tcp(self, host: str, sample: Sample) -> Iterator[Any]:
        per_s = _gauge("tcp_retransmits_per_second", "TCP segments retransmitted per second "
                       "over the last sample", [])
        per_s.add_metric([host], sample.retrans_per_s)
        ratio = _gauge("tcp_retransmit_ratio", "Retransmitted over sent TCP segments in the "
                       "last sample", [])
        ratio.add_metric([host], sample.retrans_ratio)
        yield from (per_s, ratio)

    def peers(self, host: str, sample: Sample) -> Iterator[Any]:
        labels = ["peer"]
        rx = _gauge("peer_receive_bytes_per_second", "Bytes per second received from peer "
                    "(its address) over the last sample", labels)
        tx = _gauge("peer_transmit_bytes_per_second", "Bytes per second sent to peer over the "
                    "last sample", labels)
        conns = _gauge("peer_connections", "Open TCP connections to peer", labels)
        for peer in top_peers(sample.peers):
            names = [host, peer.address]
            rx.add_metric(names, peer.rx_gbps * 1e9 / 8)
            tx.add_metric(names, peer.tx_gbps * 1e9 / 8)
            conns.add_metric(names, float(peer.connections))
        yield from (rx, tx, conns)

    def gpus(self, host: str, sample: Sample) -> Iterator[Any]:
        labels = ["gpu", "name"]
        util = _gauge("gpu_utilisation_ratio", "GPU busy share (NVML, 0..1)", labels)
        used = _gauge("gpu_memory_used_bytes", "GPU memory in use", labels)
        total = _gauge("gpu_memory_total_bytes", "GPU memory in all", labels)
        power = _gauge("gpu_power_watts", "GPU power draw", labels)
        pcie_tx = _gauge("gpu_pcie_transmit_bytes_per_second", "PCIe bytes per second out of "
                         "the GPU", labels)
        pcie_rx = _gauge("gpu_pcie_receive_bytes_per_second", "PCIe bytes per second into the "
                         "GPU", labels)
        for gpu in sample.gpus:
            names = [host, str(gpu.index), gpu.name]
            util.add_metric(names, gpu.util_percent / 100)
            used.add_metric(names, gpu.memory_used_mib * MIB)
            total.add_metric(names, gpu.memory_total_mib * MIB)
            for family, value in ((power, gpu.power_w), (pcie_tx, gpu.pcie_tx_mbps),
                                  (pcie_rx, gpu.pcie_rx_mbps)):
                if value is not None:
                    scale = 1.0 if family is power else 1e6  # NVML MB/s
                    family.add_metric(names, value * scale)
        yield from (util, used, total, power, pcie_tx, pcie_rx)

"""Rates from two snapshots: Gb/s per interface, retransmits per second, bytes per peer."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

from ddpnet.monitor.sources import GpuReading, Snapshot, strip_port


@dataclass(frozen=True)
class IfRate:
    name: str
    rx_gbps: float
    tx_gbps: float
    rx_pps: float
    tx_pps: float
    link_gbps: float | None
    #: share of the nominal link speed used by the busier direction, 0..1 (None: unknown speed)
    utilisation: float | None
    errors: int  # new errors (rx + tx) during the interval
    drops: int


@dataclass(frozen=True)
class PeerRate:
    address: str
    rx_gbps: float
    tx_gbps: float
    connections: int


@dataclass(frozen=True)
class Sample:
    """One measurement over ``interval`` seconds ending at ``time``."""

    time: float
    interval: float
    interfaces: tuple[IfRate, ...]
    retrans_per_s: float
    retrans_ratio: float  # retransmitted / sent segments in the interval
    peers: tuple[PeerRate, ...]
    gpus: tuple[GpuReading, ...]

    def to_dict(self) -> dict[str, Any]:
        """The ``ddpnet monitor --once --json`` object."""
        return {
            "time": self.time,
            "interval": self.interval,
            "interfaces": [asdict(i) for i in self.interfaces],
            "tcp": {"retrans_per_s": self.retrans_per_s, "retrans_ratio": self.retrans_ratio},
            "peers": [asdict(p) for p in self.peers],
            "gpus": [asdict(g) for g in self.gpus],
        }


def _gbps(delta_bytes: int, seconds: float) -> float:
    return max(delta_bytes, 0) * 8 / seconds / 1e9


def compute(prev: Snapshot, cur: Snapshot, names: list[str] | None = None) -> Sample:
    """Rates between ``prev`` and ``cur`` for ``names`` (all interfaces present in both when
    None). Counters that went backwards (an interface re-created) count as zero."""
    dt = cur.time - prev.time
    if dt <= 0:
        raise ValueError("snapshots must be taken at increasing times")
    chosen = names if names is not None else sorted(set(prev.interfaces) & set(cur.interfaces))
    rates = []
    for name in chosen:
        a, b = prev.interfaces.get(name), cur.interfaces.get(name)
        if a is None or b is None:
            continue
        rx, tx = _gbps(b.rx_bytes - a.rx_bytes, dt), _gbps(b.tx_bytes - a.tx_bytes, dt)
        mbps = cur.link_mbps.get(name)
        link = mbps / 1000 if mbps else None
        rates.append(IfRate(
            name=name, rx_gbps=rx, tx_gbps=tx,
            rx_pps=max(b.rx_packets - a.rx_packets, 0) / dt,
            tx_pps=max(b.tx_packets - a.tx_packets, 0) / dt,
            link_gbps=link,
            utilisation=(max(rx, tx) / link) if link else None,
            errors=max((b.rx_errors + b.tx_errors) - (a.rx_errors + a.tx_errors), 0),
            drops=max((b.rx_drops + b.tx_drops) - (a.rx_drops + a.tx_drops), 0),
        ))
    retrans = max(cur.tcp_retrans_segs - prev.tcp_retrans_segs, 0)
    sent = max(cur.tcp_out_segs - prev.tcp_out_segs, 0)
    return Sample(
        time=cur.time, interval=dt, interfaces=tuple(rates),
        retrans_per_s=retrans / dt, retrans_ratio=(retrans / sent) if sent else 0.0,
        peers=peer_rates(prev, cur, dt), gpus=cur.gpus,
    )


def peer_rates(prev: Snapshot, cur: Snapshot, dt: float) -> tuple[PeerRate, ...]:
    """Bytes per remote address, like iftop: per-connection deltas summed by peer. A
    connection that opened during the interval counts from zero; loopback peers are skipped."""
    before = {(s.local, s.remote): s for s in prev.sockets}
    rx: dict[str, int] = defaultdict(int)
    tx: dict[str, int] = defaultdict(int)
    conns: dict[str, int] = defaultdict(int)
    for s in cur.sockets:
        peer = strip_port(s.remote)
        if peer.startswith("127.") or peer == "::1":
            continue
        old = before.get((s.local, s.remote))
        rx[peer] += max(s.received - (old.received if old else 0), 0)
        tx[peer] += max(s.sent - (old.sent if old else 0), 0)
        conns[peer] += 1
    peers = [PeerRate(p, _gbps(rx[p], dt), _gbps(tx[p], dt), conns[p]) for p in conns]
    return tuple(sorted(peers, key=lambda p: -(p.rx_gbps + p.tx_gbps)))

"""Counter fixtures: snapshots built by hand so expected rates are exact."""

from __future__ import annotations

from ddpnet.monitor.sources import IfCounters, Snapshot, SocketBytes


def counters(rx: int, tx: int, rx_pkts: int = 0, tx_pkts: int = 0, errors: int = 0,
             drops: int = 0) -> IfCounters:
    return IfCounters(rx_bytes=rx, tx_bytes=tx, rx_packets=rx_pkts, tx_packets=tx_pkts,
                      rx_errors=errors, tx_errors=0, rx_drops=drops, tx_drops=0)


def snap(t: float, eth0: IfCounters, retrans: int = 0, out: int = 0,
         sockets: tuple[SocketBytes, ...] = ()) -> Snapshot:
    return Snapshot(time=t, interfaces={"eth0": eth0, "lo": counters(0, 0)},
                    tcp_retrans_segs=retrans, tcp_out_segs=out, sockets=sockets,
                    link_mbps={"eth0": 1000, "lo": None})


class FakeSources:
    """Returns the given snapshots in order (the monitor's Sources protocol)."""

    def __init__(self, snaps: list[Snapshot]) -> None:
        self.snaps = list(snaps)
        self.calls = 0

    def snapshot(self, peers: bool, gpus: bool) -> Snapshot:
        self.calls += 1
        if self.calls <= len(self.snaps):
            return self.snaps[self.calls - 1]
        # past the fixtures: the last counters again, time moving on
        last = self.snaps[-1]
        return Snapshot(last.time + self.calls - len(self.snaps), last.interfaces, last.tcp_retrans_segs,
                        last.tcp_out_segs, last.sockets, last.gpus, last.link_mbps)

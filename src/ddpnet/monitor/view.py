"""The live view: a rich table per refresh, with sparklines of the recent rates."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.text import Text

from ddpnet.monitor.rates import Sample
from ddpnet.output import WholeTable, table

_BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float], width: int = 20) -> str:
    """Unicode bars scaled to the window's maximum (all-zero shows the lowest bar)."""
    vals = list(values)[-width:]
    if not vals:
        return ""
    top = max(vals)
    if top <= 0:
        return _BARS[0] * len(vals)
    return "".join(_BARS[min(len(_BARS) - 1, int(v / top * (len(_BARS) - 1) + 0.5))]
                   for v in vals)


class History:
    """The last ``width`` rx+tx rates per interface, for the sparklines."""

    def __init__(self, width: int = 30) -> None:
        self.width = width
        self.rates: dict[str, deque[float]] = {}

    def add(self, sample: Sample) -> None:
        for i in sample.interfaces:
            self.rates.setdefault(i.name, deque(maxlen=self.width)).append(i.rx_gbps + i.tx_gbps)


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def render(sample: Sample, history: History, title: str = "ddpnet monitor",
           live: bool = True) -> Group:
    """One frame of the live view."""
    nets = table(title)
    for col in ("iface", "rx Gb/s", "tx Gb/s", "% link", "link Gb/s", "rx pkt/s", "tx pkt/s",
                "errors", "drops", "history"):
        nets.add_column(col, justify="left" if col in ("iface", "history") else "right")
    for i in sample.interfaces:
        util = None if i.utilisation is None else 100 * i.utilisation
        nets.add_row(i.name, _fmt(i.rx_gbps), _fmt(i.tx_gbps), _fmt(util, ".1f"),
                     _fmt(i.link_gbps, ".0f"), f"{i.rx_pps:.0f}", f"{i.tx_pps:.0f}",
                     str(i.errors), str(i.drops),
                     sparkline(history.rates.get(i.name, ()), history.width))
    parts: list[RenderableType] = [nets]
    tcp = Text(f"TCP retransmits: {sample.retrans_per_s:.1f}/s "
               f"({100 * sample.retrans_ratio:.2f}% of segments sent)")
    if sample.retrans_ratio > 0.01:
        tcp.stylize("bold red")
    parts.append(tcp)
    if sample.peers:
        parts.append(_peers(sample))
    if sample.gpus:
        parts.append(_gpus(sample))
    if live:
        parts.append(Text("Ctrl-C to quit", style="dim"))
    return Group(*parts)


def _peers(sample: Sample) -> WholeTable:
    """The ten busiest remote addresses."""
    peers = table("peers")
    for col in ("address", "rx Gb/s", "tx Gb/s", "conns"):
        peers.add_column(col, justify="left" if col == "address" else "right")
    for p in sample.peers[:10]:
        peers.add_row(p.address, _fmt(p.rx_gbps), _fmt(p.tx_gbps), str(p.connections))
    return peers


def _gpus(sample: Sample) -> WholeTable:
    gpus = table("GPUs")
    for col in ("gpu", "name", "util %", "mem GiB", "power W", "PCIe tx MB/s",
                "PCIe rx MB/s"):
        gpus.add_column(col)
    for g in sample.gpus:
        gpus.add_row(str(g.index), g.name, f"{g.util_percent:.0f}",
                     f"{g.memory_used_mib / 1024:.1f}/{g.memory_total_mib / 1024:.1f}",
                     _fmt(g.power_w, ".0f"), _fmt(g.pcie_tx_mbps, ".0f"),
                     _fmt(g.pcie_rx_mbps, ".0f"))
    return gpus

"""What ``ddpnet monitor`` shows people: the live view while it samples (a full-screen frame
on a terminal, one line per sample when piped), and the ``--once`` frame at the end."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from ddpnet.monitor.view import History
from ddpnet.monitor.view import render as frame

if TYPE_CHECKING:
    from rich.console import Console
    from rich.live import Live

    from ddpnet.monitor.rates import Sample
    from ddpnet.monitor.result import MonitorResult


def sample_line(sample: Sample) -> str:
    """``12:00:01 eth0 rx 0.100 tx 0.200 Gb/s; retrans 0.0/s``"""
    parts = [f"{i.name} rx {i.rx_gbps:.3f} tx {i.tx_gbps:.3f} Gb/s" for i in sample.interfaces]
    return time.strftime("%H:%M:%S ") + "; ".join(parts) + \
        f"; retrans {sample.retrans_per_s:.1f}/s"


class Display:
    """Shows each sample as it comes when ``streaming`` (nothing otherwise)."""

    def __init__(self, title: str, streaming: bool) -> None:
        from ddpnet.output import console

        self.title = title
        self.streaming = streaming
        self.out = console()
        self.history = History()
        self.live: Live | None = None
        if streaming and sys.stdout.isatty():
            from rich.live import Live

            self.live = Live(console=self.out, auto_refresh=False, screen=True)
            self.live.start()

    def show(self, sample: Sample) -> None:
        self.history.add(sample)
        if self.live is not None:
            self.live.update(frame(sample, self.history, self.title), refresh=True)
        elif self.streaming:
            self.out.print(sample_line(sample), markup=False)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()


def render(result: MonitorResult, out: Console) -> None:
    """``--once``: the frame of its one sample; a streamed run has shown everything."""
    if result.once and result.samples:
        history = History()
        for sample in result.samples:
            history.add(sample)
        out.print(frame(result.samples[0], history, result.title, live=False))

"""Telemetry during training: a background sampler per rank and a summary of it.

``ddpnet train --monitor`` starts a :class:`Recorder` on every rank and gathers each rank's
:meth:`Recorder.summary` to rank 0, which adds them to the training summary.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ddpnet.monitor.rates import Sample
from ddpnet.monitor.record import CsvRecorder
from ddpnet.monitor.sampler import samples
from ddpnet.monitor.sources import Sources, SystemSources


class Recorder:
    """Samples ``names`` every ``interval`` seconds in a daemon thread until :meth:`stop`."""

    def __init__(self, names: Sequence[str], interval: float = 1.0,
                 sources: Sources | None = None, csv_path: Path | None = None,
                 gpus: bool = False) -> None:
        self.names = list(names)
        self.interval = interval
        self.sources = sources or SystemSources()
        self.gpus = gpus
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._csv = CsvRecorder(csv_path, self.names, 0) if csv_path else None
        self._thread = threading.Thread(target=self._run, name="ddpnet-monitor", daemon=True)

    def _run(self) -> None:
        for sample in samples(self.sources, self.names, self.interval, gpus=self.gpus,
                              stop=self._stop):
            self.samples.append(sample)
            if self._csv:
                self._csv.append(sample)

    def start(self) -> Recorder:
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(timeout=self.interval + 5)
        return self.summary()

    def __enter__(self) -> Recorder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def summary(self) -> dict[str, Any]:
        """Mean and peak rates per interface, and TCP retransmits, over the run."""
        per_if: dict[str, Any] = {}
        for name in self.names:
            rx = [i.rx_gbps for s in self.samples for i in s.interfaces if i.name == name]
            tx = [i.tx_gbps for s in self.samples for i in s.interfaces if i.name == name]
            if rx:
                per_if[name] = {
                    "rx_gbps_mean": sum(rx) / len(rx), "rx_gbps_max": max(rx),
                    "tx_gbps_mean": sum(tx) / len(tx), "tx_gbps_max": max(tx),
                }
        retrans = [s.retrans_per_s for s in self.samples]
        return {
            "samples": len(self.samples),
            "interval": self.interval,
            "interfaces": per_if,
            "retrans_per_s_mean": sum(retrans) / len(retrans) if retrans else 0.0,
            "retrans_per_s_max": max(retrans) if retrans else 0.0,
        }

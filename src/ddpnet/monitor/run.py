"""``ddpnet monitor``: its options, the sampling run (shown live while it lasts, recorded to
CSV, plotted at the end) and the result ``--json`` prints."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddpnet.errors import ConfigError
from ddpnet.monitor.result import MonitorResult

if TYPE_CHECKING:
    from ddpnet.monitor.rates import Sample
    from ddpnet.monitor.sources import NvmlGpus


#: the longest ``--duration`` (seconds): a week; threading's timer overflows far beyond
MAX_DURATION = 7 * 86400.0


@dataclass(frozen=True)
class MonitorOptions:
    """``ddpnet monitor``'s flags, checked when built (``--interval nan`` fails too: every
    comparison with nan is false)."""

    iface: str = "auto"
    interval: float = 1.0
    duration: float | None = None
    gpu: bool | None = None
    peers: bool = False
    record: Path | None = None
    plot: Path | None = None
    once: bool = False
    as_json: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.interval <= 3600:
            raise ConfigError(f"--interval {self.interval} is outside (0, 3600] seconds",
                              "use e.g. --interval 1")
        if self.duration is not None and not 0 <= self.duration <= MAX_DURATION:
            raise ConfigError(f"--duration {self.duration} is not a number of seconds in "
                              f"0..{MAX_DURATION:g} (a week)", "use e.g. --duration 30")
        if self.as_json and not self.once and self.duration is None:
            raise ConfigError("--json needs --once or --duration (it prints one object at the "
                              "end)", "use: ddpnet monitor --once --json")


def run(options: MonitorOptions) -> MonitorResult:
    """Sample until ``--duration``, one interval with ``--once``, or Ctrl-C."""
    from ddpnet.monitor.select import choose
    from ddpnet.monitor.sources import SystemSources

    gpus = _gpus(options.gpu)
    use_gpu = gpus is not None and gpus.available
    sources = SystemSources(gpus=gpus)
    chosen = choose(options.iface, sources.snapshot(False, False).interfaces)
    result = MonitorResult((), chosen.names, chosen.source, chosen.reason, use_gpu,
                           options.once)
    taken = _sample(options, sources, result)
    if options.plot is not None:
        _plot(options.plot, options.record, chosen.names, taken)
    return MonitorResult(tuple(taken), chosen.names, chosen.source, chosen.reason, use_gpu,
                         options.once)


def _gpus(gpu: bool | None) -> NvmlGpus | None:
    """GPU telemetry unless ``--no-gpu``; ``--gpu`` without a usable NVML is an error."""
    from ddpnet.monitor.sources import NvmlGpus

    gpus = NvmlGpus() if gpu is not False else None
    if gpu and gpus is not None and not gpus.available:
        raise ConfigError(f"--gpu asked for but {gpus.reason}",
                          "install nvidia-ml-py and the NVIDIA driver, or drop --gpu")
    return gpus


def _sample(options: MonitorOptions, sources: Any, shown: MonitorResult) -> list[Sample]:
    from ddpnet.monitor.record import CsvRecorder
    from ddpnet.monitor.render import Display
    from ddpnet.monitor.sampler import samples

    recorder = CsvRecorder(options.record, shown.names, 0) if options.record else None
    stop = threading.Event()
    duration = options.interval if options.once else options.duration
    if duration is not None:
        timer = threading.Timer(duration + options.interval / 2, stop.set)
        timer.daemon = True
        timer.start()
    taken: list[Sample] = []
    display = Display(shown.title, streaming=not options.once and not options.as_json)
    try:
        for sample in samples(sources, shown.names, options.interval, peers=options.peers,
                              gpus=shown.gpu, stop=stop):
            taken.append(sample)
            if recorder:
                recorder.append(sample)
            display.show(sample)
            if options.once:
                break
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        display.close()
    return taken


def _plot(out: Path, record: Path | None, names: Sequence[str],
          taken: Sequence[Sample]) -> None:
    """The recorded CSV (or the samples of this run) drawn to ``out``."""
    from ddpnet.monitor.plot import plot_series
    from ddpnet.monitor.record import header, read_series, row

    if record is not None:
        cols, rows = read_series(record)
    else:
        cols = header(names, 0)
        rows = [[float(c) if c else None for c in row(s, names, 0)] for s in taken]
    plot_series(cols, rows, out)

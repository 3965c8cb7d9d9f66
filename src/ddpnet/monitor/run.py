"""``ddpnet monitor``: its options, the sampling run (shown live while it lasts, recorded to
CSV, plotted at the end) and the result ``--json`` prints. With ``--metrics-port`` it is a
long-running exporter instead: no view, nothing kept, the last sample served to Prometheus
(:mod:`ddpnet.monitor.metrics`) on the monitored interface's address (outside a job the
node's cluster interface, never loopback unless asked) or ``--listen``'s."""

from __future__ import annotations

import functools
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
    #: serve the node's metrics on this port (a long-running exporter; None: the live view)
    metrics_port: int | None = None
    #: the address it serves on (``--listen``; None: the monitored interface's own)
    listen: str | None = None

    def __post_init__(self) -> None:
        if not 0 < self.interval <= 3600:
            raise ConfigError(f"--interval {self.interval} is outside (0, 3600] seconds",
                              "use e.g. --interval 1")
        if self.duration is not None and not 0 <= self.duration <= MAX_DURATION:
            raise ConfigError(f"--duration {self.duration} is not a number of seconds in "
                              f"0..{MAX_DURATION:g} (a week)", "use e.g. --duration 30")
        if self.metrics_port is not None and (self.once or self.as_json or self.plot):
            raise ConfigError(f"--metrics-port {self.metrics_port} serves until stopped: it "
                              "takes no --once, --json or --plot",
                              "drop those flags (--record and --duration still apply)")
        if self.listen is not None:
            _check_listen(self.listen, self.metrics_port)
        if self.as_json and not self.once and self.duration is None:
            raise ConfigError("--json needs --once or --duration (it prints one object at the "
                              "end)", "use: ddpnet monitor --once --json")


def _check_listen(listen: str, port: int | None) -> None:
    """``--listen`` is an IP address (0.0.0.0 or :: for every interface) and goes with
    ``--metrics-port`` (pure; ConfigError otherwise)."""
    import ipaddress

    if port is None:
        raise ConfigError(f"--listen {listen} is where --metrics-port serves, and it is not "
                          "given", f"add --metrics-port, e.g. --listen {listen} "
                          "--metrics-port 9465")
    try:
        ipaddress.ip_address(listen)
    except ValueError:
        raise ConfigError(f"--listen {listen!r} is not an IP address",
                          "give one of this host's addresses (`ip -brief address`), 0.0.0.0 "
                          "for every interface, or leave --listen out") from None


def run(options: MonitorOptions) -> MonitorResult:
    """Sample until ``--duration``, one interval with ``--once``, or Ctrl-C."""
    from ddpnet.monitor.select import _init_selection, choose
    from ddpnet.monitor.sources import SystemSources

    gpus = _gpus(options.gpu)
    use_gpu = gpus is not None and gpus.available
    sources = SystemSources(gpus=gpus)
    exporting = options.metrics_port is not None
    chosen = choose(options.iface, sources.snapshot(False, False).interfaces,
                    functools.partial(_init_selection, loopback_ok=not exporting))
    result = MonitorResult((), chosen.names, chosen.source, chosen.reason, use_gpu,
                           options.once)
    if options.metrics_port is not None:
        _export(options, options.metrics_port, sources, result)
        return result
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


@dataclass(frozen=True)
class Listening:
    """Where the exporter listens and why (said on its one line on stderr)."""

    address: str
    why: str


def metrics_address(names: Sequence[str], interfaces: Sequence[Any], reason: str = "",
                    listen: str | None = None) -> Listening:
    """Where the exporter listens (pure): ``listen`` (``--listen``) as given; else the first
    address of the first monitored interface that has one (IPv4 first; loopback only when
    nothing else is monitored), never every interface; ``reason``: why those interfaces.
    ConfigError when none has one."""
    if listen is not None:
        return Listening(listen, "--listen")
    by_name = {i.name: i for i in interfaces}
    found = [(name, a) for name in names
             for a in sorted(getattr(by_name.get(name), "addresses", ()), key=lambda a: a.family)]
    ordered = sorted(found, key=lambda pair: pair[1].is_loopback)  # stable: the order kept
    if ordered:
        name, first = ordered[0]
        return Listening(str(first.ip), f"{name}'s address; {reason or 'given'}")
    raise ConfigError(f"--metrics-port: no address on {', '.join(names) or 'any interface'} "
                      "to serve the metrics on", "pick an interface with --iface NAME, or an "
                      "address with --listen ADDRESS")


def _export(options: MonitorOptions, port: int, sources: Any, shown: MonitorResult) -> None:
    """Sample until ``--duration`` or a signal, serving each sample's metrics (edge)."""
    import socket
    import sys

    from prometheus_client import CollectorRegistry

    from ddpnet import __version__
    from ddpnet.monitor.metrics import NodeCollector, NodeState
    from ddpnet.monitor.record import CsvRecorder
    from ddpnet.monitor.sampler import samples
    from ddpnet.net.exposition import Server, bind
    from ddpnet.net.interfaces import list_interfaces

    listening = metrics_address(shown.names, list_interfaces(), shown.reason, options.listen)
    address = listening.address
    state = NodeState(socket.gethostname(), __version__)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(state))
    server = Server(bind(address, port, "--metrics-port"), registry)
    shown_at = f"[{address}]" if ":" in address else address
    sys.stderr.write(f"ddpnet monitor: serving {', '.join(shown.names)} on "
                     f"http://{shown_at}:{server.port}/metrics ({address}: {listening.why})\n")
    sys.stderr.flush()
    recorder = CsvRecorder(options.record, shown.names, 0) if options.record else None
    stop = threading.Event()
    if options.duration is not None:
        timer = threading.Timer(options.duration + options.interval / 2, stop.set)
        timer.daemon = True
        timer.start()
    try:
        for sample in samples(sources, shown.names, options.interval, peers=True,
                              gpus=shown.gpu, stop=stop):
            state.add(sample)
            if recorder:
                recorder.append(sample)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        server.close()


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

"""``ddpnet monitor``: live network, GPU and TCP telemetry on this node."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import click

from ddpnet.errors import ConfigError


@click.command("monitor")
@click.option("--iface", default="auto", show_default=True,
              help="auto (the interface ddpnet.init() would select), all, or NAME[,NAME].")
@click.option("--interval", type=float, default=1.0, show_default=True,
              help="Seconds per sample.")
@click.option("--duration", type=float, default=None, help="Stop after S seconds.")
@click.option("--gpu/--no-gpu", "gpu", default=None,
              help="GPU telemetry via nvidia-ml-py (default: when available).")
@click.option("--peers", is_flag=True, help="Traffic per remote address (like iftop).")
@click.option("--record", "record_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Append one CSV row per sample.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Draw the recorded series to a PNG at the end.")
@click.option("--once", is_flag=True, help="Measure one interval, print, exit.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def command(iface: str, interval: float, duration: float | None, gpu: bool | None,
            peers: bool, record_path: Path | None, plot_path: Path | None, once: bool,
            as_json: bool) -> int:
    """Watch rx/tx per interface against the link speed, TCP retransmits, per-peer traffic
    and GPUs in one view (the guides' nload + iftop + nvidia-smi)."""
    from ddpnet.monitor.rates import Sample
    from ddpnet.monitor.record import CsvRecorder, read_series
    from ddpnet.monitor.sampler import samples
    from ddpnet.monitor.select import choose
    from ddpnet.monitor.sources import NvmlGpus, SystemSources
    from ddpnet.monitor.view import History, render
    from ddpnet.output import console, emit_json

    # written so that nan fails too (every comparison with nan is false)
    if not 0 < interval <= 3600:
        raise ConfigError(f"--interval {interval} is outside (0, 3600] seconds",
                          "use e.g. --interval 1")
    if duration is not None and not 0 <= duration < float("inf"):
        raise ConfigError(f"--duration {duration} is not a number of seconds >= 0",
                          "use e.g. --duration 30")
    if as_json and not once and duration is None:
        raise ConfigError("--json needs --once or --duration (it prints one object at the end)",
                          "use: ddpnet monitor --once --json")

    gpus = NvmlGpus() if gpu is not False else None
    if gpu and gpus is not None and not gpus.available:
        raise ConfigError(f"--gpu asked for but {gpus.reason}",
                          "install nvidia-ml-py and the NVIDIA driver, or drop --gpu")
    use_gpu = gpus is not None and gpus.available
    sources = SystemSources(gpus=gpus)
    first = sources.snapshot(False, False)
    chosen = choose(iface, first.interfaces)
    recorder = CsvRecorder(record_path, chosen.names, 0) if record_path else None
    collected: list[Sample] = []
    stop = threading.Event()
    if once:
        duration = interval
    if duration is not None:
        timer = threading.Timer(duration + interval / 2, stop.set)
        timer.daemon = True
        timer.start()

    out = console()
    live = None
    history = History()
    tty = sys.stdout.isatty() and not as_json
    if tty and not once:
        from rich.live import Live

        live = Live(console=out, auto_refresh=False, screen=True)
        live.start()
    try:
        for sample in samples(sources, chosen.names, interval, peers=peers, gpus=use_gpu,
                              stop=stop):
            collected.append(sample)
            history.add(sample)
            if recorder:
                recorder.append(sample)
            if live is not None:
                live.update(render(sample, history, f"ddpnet monitor ({chosen.reason})"),
                            refresh=True)
            elif not as_json and not once:
                parts = [f"{i.name} rx {i.rx_gbps:.3f} tx {i.tx_gbps:.3f} Gb/s"
                         for i in sample.interfaces]
                out.print(time.strftime("%H:%M:%S ") + "; ".join(parts)
                          + f"; retrans {sample.retrans_per_s:.1f}/s", markup=False)
            if once:
                break
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        if live is not None:
            live.stop()

    if as_json:
        meta = {"iface": {"names": list(chosen.names), "source": chosen.source,
                          "reason": chosen.reason}, "gpu": use_gpu}
        if once and collected:
            emit_json({**collected[0].to_dict(), "selection": meta})
        else:
            emit_json({"selection": meta, "samples": [s.to_dict() for s in collected]})
    elif once and collected:
        out.print(render(collected[0], history, f"ddpnet monitor ({chosen.reason})",
                         live=False))
    if plot_path is not None:
        from ddpnet.monitor.plot import plot_series
        from ddpnet.monitor.record import header, row

        if record_path is not None:
            cols, rows = read_series(record_path)
        else:
            cols = header(chosen.names, 0)
            rows = [[float(c) if c else None for c in row(s, chosen.names, 0)]
                    for s in collected]
        plot_series(cols, rows, plot_path)
    return 0

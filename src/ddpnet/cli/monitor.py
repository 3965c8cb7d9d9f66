"""``ddpnet monitor``: live network, GPU and TCP telemetry on this node."""

from __future__ import annotations

from pathlib import Path

import click

from ddpnet.cli.flags import iface_option


@click.command("monitor")
@iface_option("iface", "auto (the interface ddpnet.init() would select; outside a job the "
              "one of the default route), all, or NAME[,NAME].", default="auto",
              show_default=True)
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
@click.option("--metrics-port", type=click.IntRange(1, 65535), default=None,
              help="Serve the measurements to Prometheus on this port of the monitored "
                   "interface's address, until stopped (no live view; docs/monitor.md).")
@click.option("--listen", metavar="ADDRESS", default=None,
              help="With --metrics-port: serve on this address instead (0.0.0.0: every "
                   "interface).")
def command(iface: str, interval: float, duration: float | None, gpu: bool | None,
            peers: bool, record_path: Path | None, plot_path: Path | None, once: bool,
            as_json: bool, metrics_port: int | None, listen: str | None) -> int:
    """Watch rx/tx per interface against the link speed, TCP retransmits, per-peer traffic
    and GPUs in one view (the guides' nload + iftop + nvidia-smi)."""
    from ddpnet.monitor.render import render
    from ddpnet.monitor.run import MonitorOptions, run
    from ddpnet.output import finish

    options = MonitorOptions(iface=iface, interval=interval, duration=duration, gpu=gpu,
                             peers=peers, record=record_path, plot=plot_path, once=once,
                             as_json=as_json, metrics_port=metrics_port, listen=listen)
    return finish(run(options), as_json, render)

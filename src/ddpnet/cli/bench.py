"""``ddpnet bench``: collective bandwidth (algbw, busbw) next to what the link carries.

Run on every rank by any launcher (torchrun, srun, mpirun), or ``--local N`` to start N ranks
on this machine. Rank 0 prints; every rank returns the same exit code. The logic lives in
``ddpnet.bench.command``; this module only parses.
"""

from __future__ import annotations

from typing import Any

import click

from ddpnet.bench.config import BASELINES, DTYPES, MODES, OPS
from ddpnet.local import MAX_LOCAL_RANKS
from ddpnet.process_group import BACKENDS


@click.command("bench")
@click.option("--collectives", default="all", show_default=True,
              help="Comma list of all_reduce, all_gather, reduce_scatter, broadcast, reduce, "
                   "all_to_all, send_recv (or all).")
@click.option("-b", "--min-bytes", default="1K", show_default=True, help="Smallest size.")
@click.option("-e", "--max-bytes", default=None,
              help="Largest size (default: 256M on GPUs, 16M on CPU, where the sweep to 256M "
                   "takes minutes: -e 256M runs it).")
@click.option("-f", "--factor", default=2, show_default=True, type=int,
              help="Size multiplier between steps.")
@click.option("--iters", default=20, show_default=True, type=int, help="Timed iterations.")
@click.option("--warmup", default=5, show_default=True, type=int, help="Untimed iterations.")
@click.option("--dtype", default="float32", show_default=True, type=click.Choice(list(DTYPES)))
@click.option("--backend", default="auto", show_default=True,
              type=click.Choice(list(BACKENDS)),
              help="auto: nccl with a GPU, else gloo.")
@click.option("--op", default="sum", show_default=True, type=click.Choice(list(OPS)),
              help="Reduction op (avg is NCCL-only).")
@click.option("--mode", default="both", show_default=True, type=click.Choice(list(MODES)),
              help="In-place, out-of-place or both where torch has both.")
@click.option("--check", is_flag=True, help="Verify results; count wrong elements.")
@click.option("--min-busbw", type=float, default=None,
              help="Exit 1 if a collective's best busbw is below this (Gb/s).")
@click.option("--baseline", default="auto", show_default=True, type=click.Choice(list(BASELINES)),
              help="Link baseline: iperf3 -J, own tcp stream, none (auto: iperf3 if present).")
@click.option("--baseline-time", default=3.0, show_default=True, type=float,
              help="Seconds each link stream runs.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (rank 0).")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), default=None,
              help="Write the rows as CSV.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Write busbw against size as a PNG.")
@click.option("--local", type=int, default=None,
              help=f"Start this many ranks on this machine (127.0.0.1; at most "
                   f"{MAX_LOCAL_RANKS}).")
@click.option("--timeout", default=900.0, show_default=True, type=float,
              help="Seconds before a stuck collective or local run fails.")
def command(as_json: bool, **flags: Any) -> int:
    """Measure collective bandwidth and compare it with the link's real rate.

    Sizes are total buffer bytes (K/M/G binary). Tables show GB/s (10^9 bytes/s) like
    nccl-tests; JSON fields ending in _gbps are Gb/s (10^9 bits/s), like iperf3.
    """
    from ddpnet.bench.command import run
    from ddpnet.bench.options import build_options
    from ddpnet.bench.render import report

    options = build_options(as_json=as_json, **flags)
    return report(run(options), as_json)

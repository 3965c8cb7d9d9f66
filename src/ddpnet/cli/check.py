"""``ddpnet check``: run on every rank; rank 0 prints the verdict, root cause first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ddpnet.cli.sshflags import hostfile_options, ssh_flags


@click.command("check")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Write a self-contained HTML report (rank 0).")
@click.option("--matrix/--no-matrix", default=None,
              help="Bandwidth matrix (default: on up to 64 ranks).")
@click.option("--full-mesh", is_flag=True,
              help="Probe every pair of ranks (default: every pair up to 64 ranks, a "
                   "sample of O(log N) peers per rank above).")
@click.option("--bench/--no-bench", default=False, help="Collective bandwidth sweep.")
@click.option("--timeout", "stage_timeout", type=click.FloatRange(1, 3600), default=20.0,
              show_default=True, help="Seconds each stage may take.")
@click.option("--join-timeout", type=click.FloatRange(0.5, 3600), default=10.0,
              show_default=True, help="Seconds rank 0 waits for every rank to join.")
@click.option("--bw-seconds", type=click.FloatRange(0.05, 60), default=1.0, show_default=True,
              help="Seconds each bandwidth round streams.")
@click.option("--backend", type=click.Choice(["auto", "gloo", "nccl"]), default="auto",
              show_default=True)
@click.option("--local", "local", type=click.IntRange(1, 64), default=None,
              help="Spawn N ranks on this machine over loopback (no launcher, no root).")
@ssh_flags
def command(as_json: bool, report_path: Path | None, matrix: bool | None, full_mesh: bool,
            bench: bool, stage_timeout: float, join_timeout: float, bw_seconds: float, backend: str,
            local: int | None, **ssh: Any) -> int:
    """Check the whole cluster at once: rendezvous, facts, reachability, process group,
    bandwidth. Run it on every rank (torchrun, srun, mpirun, exported RANK/WORLD_SIZE/
    MASTER_ADDR/MASTER_PORT), with --local N on one machine, or with --hostfile FILE on every
    host of FILE over SSH (one rank per host; rank 0 on the first)."""
    from ddpnet.check.options import CheckOptions
    from ddpnet.check.render_text import render_result
    from ddpnet.check.run import run, run_and_leave
    from ddpnet.output import finish

    options = CheckOptions(matrix=matrix, full_mesh=full_mesh, bench=bench,
                           stage_timeout=stage_timeout, join_timeout=join_timeout,
                           bw_seconds=bw_seconds, backend=backend, local=local,
                           report_path=str(report_path) if report_path is not None else None)
    hostfile = hostfile_options(**ssh)
    if hostfile is not None:
        from ddpnet.check.hosts import render, run_hosts

        return run_and_leave(lambda: finish(run_hosts(options, hostfile, as_json), as_json,
                                            render))
    return run_and_leave(lambda: finish(run(options), as_json, render_result))

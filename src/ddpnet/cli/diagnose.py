"""``ddpnet diagnose``: name why a job hangs (live) or died (dump files)."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("diagnose")
@click.option("--dumps", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Read the rank-N.json dumps a job left in this directory (its "
                   "DDPNET_WATCH_DIR, default ./ddpnet-watch) instead of asking a live job.")
@click.option("--job-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="A `ddpnet sbatch --requeue` job's directory (DDPNET_JOB_DIR, default "
                   "./ddpnet-job-<id>): its recovery history (drains, requeues, resumes) and "
                   "its newest verdict.")
@click.option("--master", default=None, metavar="HOST:PORT",
              help="The job's MASTER_ADDR:MASTER_PORT (default: from this environment).")
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="The watch hub's port (default: DDPNET_WATCH_PORT, else derived).")
@click.option("--timeout", type=click.FloatRange(0.1, 600), default=5.0, show_default=True,
              help="Seconds to wait for the hub.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def command(dumps: Path | None, job_dir: Path | None, master: str | None, port: int | None,
            timeout: float, as_json: bool) -> int:
    """Name why a running job hangs (from its watch hub) or why it died (from its dumps):
    the rank, its host and the cause. Exit 0 when nothing is stalled, 1 when a cause is
    named."""
    from ddpnet.diagnose.run import DiagnoseOptions, render, run
    from ddpnet.output import finish

    options = DiagnoseOptions(dumps=dumps, job_dir=job_dir, master=master, port=port,
                              timeout=timeout)
    return finish(run(options), as_json, render)

"""``ddpnet train``: reference DDP training, run on every rank by any launcher, or on N local
ranks with ``--local N``."""

from __future__ import annotations

from typing import Any

import click

from ddpnet.local import MAX_LOCAL_RANKS
from ddpnet.train.defaults import SIZE_FIELDS, SIZES_HELP


@click.command("train")
@click.option("--model", type=click.Choice(["mlp", "cnn", "transformer"]), default="mlp",
              show_default=True, help="Built-in model.")
@click.option("--width", type=int, default=None,
              help="Hidden width / channels; scales parameters (mlp: ~depth*width^2) "
                   f"[default: per device, {SIZES_HELP}].")
@click.option("--depth", type=int, default=None,
              help="Layers [default: per device, see --width].")
@click.option("--dataset", type=click.Choice(["synthetic", "digits"]), default="synthetic",
              show_default=True, help="digits: scikit-learn's bundled 8x8 digits (no download).")
@click.option("--samples", type=int, default=None,
              help="Training samples of the synthetic dataset "
                   "[default: per device, see --width].")
@click.option("--eval-samples", type=int, default=1024, show_default=True,
              help="Eval samples of the synthetic dataset.")
@click.option("--epochs", type=int, default=1, show_default=True)
@click.option("--max-steps", type=int, default=None, help="Stop after this many steps.")
@click.option("--batch-size", type=int, default=None,
              help="Per rank [default: per device, see --width].")
@click.option("--lr", type=float, default=None,
              help="Learning rate [default: the model's: 0.05 SGD, 1e-3 AdamW].")
@click.option("--optimizer", type=click.Choice(["auto", "sgd", "adamw"]), default="auto",
              show_default=True, help="auto: SGD for mlp/cnn, AdamW for the transformer.")
@click.option("--warmup-steps", type=int, default=None,
              help="Linear lr warmup steps [default: the model's; 0: none].")
@click.option("--clip-grad", type=float, default=None,
              help="Clip the gradient norm [default: the model's, 1.0 transformer; 0: none].")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--grad-accum", type=int, default=1, show_default=True,
              help="Micro-batches per step; all but the last run under no_sync.")
@click.option("--bucket-cap-mb", type=float, default=25.0, show_default=True,
              help="DDP gradient bucket size.")
@click.option("--amp", type=click.Choice(["off", "bf16", "fp16"]), default="off",
              show_default=True, help="Autocast; fp16 needs CUDA (uses GradScaler).")
@click.option("--comm-hook", type=click.Choice(["none", "fp16", "bf16", "powersgd"]),
              default="none", show_default=True, help="Gradient compression for all-reduce.")
@click.option("--powersgd-rank", type=int, default=4, show_default=True)
@click.option("--powersgd-start-iter", type=int, default=2, show_default=True,
              help="Plain all-reduce steps before PowerSGD starts.")
@click.option("--static-graph", is_flag=True, help="DDP static_graph=True (fixed graph).")
@click.option("--tf32/--no-tf32", default=True, show_default=True,
              help="CUDA: fp32 matmuls on TF32 tensor cores (--no-tf32: full fp32).")
@click.option("--compile", "compile", is_flag=True,
              help="torch.compile the model before training (the first steps compile).")
@click.option("--checkpoint-dir", default=None, help="Rank 0 writes checkpoints here; "
              "a run resumes from the newest complete one.")
@click.option("--checkpoint-every", type=int, default=0, show_default=True,
              help="Steps between checkpoints (0: only at the end, with --checkpoint-dir).")
@click.option("--keep-checkpoints", type=int, default=3, show_default=True)
@click.option("--requeue-on-signal", is_flag=True, envvar="DDPNET_REQUEUE_ON_SIGNAL",
              help="After the checkpoint SIGUSR1/SIGTERM asks for (exit 75), run `scontrol "
                   "requeue $SLURM_JOB_ID` (also DDPNET_REQUEUE_ON_SIGNAL=1).")
@click.option("--log-every", type=int, default=10, show_default=True,
              help="Steps between metric lines (each evaluates the eval set).")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
              show_default=True)
@click.option("--pg-timeout", "pg_timeout_s", type=float, default=300.0, show_default=True,
              help="Seconds before a stuck connect or collective fails this rank.")
@click.option("--local", "local", type=int, default=None,
              help=f"Start N ranks on this machine (1 to {MAX_LOCAL_RANKS}; no launcher needed).")
@click.option("--step-sleep", "step_sleep_s", type=float, default=0.0, hidden=True,
              help="Sleep per step in seconds (fault drills, demos).")
@click.option("--monitor", is_flag=True,
              help="Record network telemetry on every rank (ddpnet monitor's sampler); rank 0 "
                   "adds each rank's summary to the training summary.")
@click.option("--monitor-interval", type=float, default=1.0, show_default=True,
              help="Seconds per telemetry sample with --monitor.")
@click.option("--metrics-port", type=click.IntRange(1, 65535), default=None,
              envvar="DDPNET_METRICS_PORT",
              help="Rank 0 serves the job's Prometheus metrics on this port, on the job's "
                   "interface (docs/watch.md; also DDPNET_METRICS_PORT).")
@click.option("--json", "as_json", is_flag=True, help="Print the final summary as JSON.")
def command(local: int | None, as_json: bool, monitor: bool, monitor_interval: float,
            **flags: Any) -> int:
    """Train a small model with DDP, showing every step of the guides done right.

    Run it on every rank (torchrun, srun, mpirun, `ddpnet lab run`), or `--local N`.
    """
    from ddpnet.train.config import TrainConfig, TrainOptions
    from ddpnet.train.report import report
    from ddpnet.train.run import leave, run

    flags["monitor_interval_s"] = monitor_interval if monitor else 0.0
    open_sizes = frozenset(k for k in SIZE_FIELDS if flags[k] is None)
    given = {k: v for k, v in flags.items() if k not in open_sizes}
    result = run(TrainOptions(TrainConfig(**given), local=local, as_json=as_json,
                              open_sizes=open_sizes))
    code = report(result, as_json)
    if result.rank is None:  # the --local parent: its ranks ran the group
        return code
    leave(code)  # see leave(): a finished rank skips C++ teardown

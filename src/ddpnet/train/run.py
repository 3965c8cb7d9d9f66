"""One rank's whole run: validate, join the group, train, report, leave the group."""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from ddpnet.train.config import TrainConfig, validate
from ddpnet.train.loop import StepCallback, StepEvent, Summary

if TYPE_CHECKING:
    from ddpnet.monitor.recorder import Recorder
    from ddpnet.train.dist import Dist


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def format_log_line(e: StepEvent) -> str:
    """The per-interval line rank 0 prints (pure, for tests and for the README)."""
    return (
        f"step {e.step}/{e.total_steps} epoch {e.epoch} loss {e.global_loss:.4f} "
        f"eval_acc {e.eval_accuracy:.3f} {e.samples_per_s:.0f} samples/s "
        f"step {e.step_time_s * 1e3:.1f} ms (compute {e.compute_s * 1e3:.1f}, "
        f"comm wait {e.comm_wait_s * 1e3:.1f}) all-reduce {human_bytes(e.bytes_allreduced)}/step"
    )


class Reporter:
    """Rank 0's progress: a rich bar on a terminal, one line per log interval otherwise."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._progress: Any = None
        self._task: Any = None
        if stream.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            self._progress = Progress(TextColumn("train"), BarColumn(), MofNCompleteColumn(),
                                      TextColumn("{task.description}"),
                                      console=Console(file=stream), transient=True)

    def __call__(self, e: StepEvent) -> None:
        if self._progress is not None:
            if self._task is None:
                self._progress.start()
                self._task = self._progress.add_task("", total=e.total_steps)
            self._progress.update(self._task, completed=e.step)
        if e.is_log_step:
            line = format_log_line(e)
            if self._progress is not None:
                self._progress.console.print(line, markup=False, highlight=False)
            else:
                self.stream.write(line + "\n")
                self.stream.flush()

    def close(self) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.stop()


def render_summary(s: Summary) -> str:
    share = "n/a" if math.isnan(s.comm_share) else f"{s.comm_share:.0%}"
    lines = [
        f"trained {s.steps} steps on {s.world_size} rank(s) ({s.backend}, {s.device}), "
        f"{s.parameters:,} parameters",
        f"final loss {s.final_loss:.4f}  eval loss {s.eval_loss:.4f}  "
        f"eval accuracy {s.eval_accuracy:.3f}",
        f"{s.samples_per_s:.0f} samples/s  step {s.step_time_s * 1e3:.1f} ms  "
        f"comm share {share}  all-reduce {human_bytes(s.bytes_per_step)}/step "
        f"({s.bytes_note})",
    ]
    if s.resumed_from is not None:
        lines.append(f"resumed from step {s.resumed_from}")
    return "\n".join(lines)


def leave(code: int) -> NoReturn:
    """End a rank process that ran a process group: flush, then ``os._exit``.

    The job is done and its output written by the time this runs, but tearing torch's gloo
    and c10d objects down in the interpreter's exit can still abort a rank with
    "terminate called without an active exception" (exit 134), rarely and only under load
    (seen once in three CI-like runs, after the summary was printed; the barrier in
    ``dist.shutdown`` made it rarer, not impossible). A launcher reads 134 as a failed
    worker (torchrun would restart the group), so a finished rank leaves without running
    C++ static destructors.
    """
    import contextlib
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed or broken pipe
            stream.flush()
    os._exit(code)


def run_rank(cfg: TrainConfig, *, as_json: bool,
             callbacks: Sequence[StepCallback] = ()) -> int:
    """Run this rank (called on every rank by any launcher); 0 on success."""
    import torch

    from ddpnet.train.dist import init_distributed, shutdown
    from ddpnet.train.loop import train

    validate(cfg, cuda_available=torch.cuda.is_available())
    d = init_distributed(cfg.device, timeout_s=cfg.pg_timeout_s)
    human = sys.stderr if as_json else sys.stdout
    reporter = Reporter(human) if d.rank == 0 else None

    def note(message: str) -> None:
        if d.rank == 0:
            human.write(f"note: {message}\n")

    recorder = start_telemetry(cfg, d)
    telemetry: list[dict[str, Any]] | None = None
    try:
        summary = train(cfg, d, callbacks=[*callbacks, *([reporter] if reporter else [])],
                        note=note)
        if recorder is not None:
            telemetry = gather_telemetry(d, recorder.stop())
    finally:
        if reporter is not None:
            reporter.close()
        if recorder is not None:
            recorder.stop()
        shutdown()
    if d.rank == 0:
        out = summary.to_dict()
        if telemetry is not None:
            out["telemetry"] = telemetry
        if as_json:
            sys.stdout.write(json.dumps(out, indent=2) + "\n")
        else:
            human.write(render_summary(summary) + "\n")
            if telemetry is not None:
                human.write(render_telemetry(telemetry) + "\n")
        sys.stdout.flush()
    return 0


def start_telemetry(cfg: TrainConfig, d: Dist) -> Recorder | None:
    """``--monitor``: sample the interface the backend uses (the one ``ddpnet.init()``
    selected; every interface but lo when unknown) in a background thread on this rank."""
    if cfg.monitor_interval_s <= 0:
        return None
    from ddpnet.monitor.recorder import Recorder
    from ddpnet.monitor.select import all_but_loopback
    from ddpnet.monitor.sources import SystemSources

    sources = SystemSources()
    available = sources.snapshot(False, False).interfaces
    names = ((d.interface,) if d.interface in available
             else all_but_loopback(available))
    return Recorder(names, cfg.monitor_interval_s, sources=sources).start()


def gather_telemetry(d: Dist, mine: dict[str, Any]) -> list[dict[str, Any]]:
    """Every rank's telemetry summary, gathered to all ranks (rank 0 reports them)."""
    import socket

    import torch.distributed as tdist

    mine = {"rank": d.rank, "host": socket.gethostname(), **mine}
    if d.world_size == 1:
        return [mine]
    gathered: list[Any] = [None] * d.world_size
    tdist.all_gather_object(gathered, mine)
    return [g for g in gathered if g is not None]


def render_telemetry(per_rank: list[dict[str, Any]]) -> str:
    """One line per rank: mean/peak rx+tx on the training interface, TCP retransmits."""
    lines = ["network during training (per rank):"]
    for t in per_rank:
        parts = [f"{name} rx {v['rx_gbps_mean']:.3f}/{v['rx_gbps_max']:.3f} "
                 f"tx {v['tx_gbps_mean']:.3f}/{v['tx_gbps_max']:.3f} Gb/s (mean/peak)"
                 for name, v in t["interfaces"].items()]
        lines.append(f"  rank {t['rank']} {t['host']}: {'; '.join(parts) or 'no samples'}; "
                     f"TCP retrans {t['retrans_per_s_mean']:.1f}/s")
    return "\n".join(lines)

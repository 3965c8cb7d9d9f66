"""What rank 0 shows (pure rendering, no torch): the per-interval log line, the progress bar,
the final summary and the telemetry lines; :func:`report` hands a result to ``ddpnet.output``."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from rich.console import Console

    from ddpnet.train.result import TrainResult
    from ddpnet.train.summary import StepEvent, Summary


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
    if s.resumed_from is not None and s.resumed_from >= s.steps:
        return already_finished(s)
    share = "n/a" if math.isnan(s.comm_share) else f"{s.comm_share:.0%}"
    lines = [
        f"trained {s.steps} steps on {s.world_size} rank(s) ({s.backend}, {s.device}), "
        f"{s.parameters:,} parameters",
        f"final loss {s.final_loss:.4f}  eval loss {s.eval_loss:.4f}  "
        f"eval accuracy {s.eval_accuracy:.3f}",
        f"{s.samples_per_s:.0f} samples/s ({precision_text(s)})  step "
        f"{s.step_time_s * 1e3:.1f} ms  comm share {share}  all-reduce "
        f"{human_bytes(s.bytes_per_step)}/step ({s.bytes_note})",
    ]
    if s.utilisation:
        lines.append(utilisation_line(s.utilisation))
    if s.resumed_from is not None:
        lines.append(f"resumed from step {s.resumed_from}")
    if s.precision_note:
        lines.append(f"note: {s.precision_note}")
    return "\n".join(lines)


def already_finished(s: Summary) -> str:
    """A run resumed from a checkpoint of its last step trains nothing: say so, not a loss
    and a rate of nan."""
    where = s.config.get("checkpoint_dir")
    at = f" in {where}" if where else ""
    return (f"already finished: the checkpoint{at} is at step {s.resumed_from} of {s.steps}, "
            f"so no step was trained ({s.world_size} rank(s), {s.backend}, {s.device})\n"
            "to train again: another --checkpoint-dir, or raise --max-steps/--epochs")


def precision_text(s: Summary) -> str:
    """"bf16", "fp32, TF32 matmuls" (CUDA), "fp32"."""
    if s.precision == "fp32" and s.tf32 is not None:
        return "fp32, TF32 matmuls" if s.tf32 else "fp32, full-fp32 matmuls"
    return s.precision


def utilisation_line(u: dict[str, Any]) -> str:
    """Model FLOP/s per rank beside MFU: "model 412.0 TFLOP/s per rank = 41.6% MFU (H100 SXM
    bf16 dense peak 989.4)", or why there is no MFU."""
    rate = u["tflops"]
    head = f"model {rate:.3g} TFLOP/s per rank" if rate == rate else "model TFLOP/s unknown"
    if u.get("mfu") is None:
        return f"{head} (no MFU: {u['source']})"
    return (f"{head} = {u['mfu']:.1%} MFU ({u['gpu']} {u['peak_of']} dense peak "
            f"{u['peak_tflops']:g})")


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


def render_preempted(p: dict[str, Any]) -> str:
    """The one line of a run stopped by a preemption signal."""
    return (f"preempted by {p['signal']} at step {p['step']}/{p['total_steps']}: checkpoint "
            f"{p['checkpoint']} saved (exit 75); run the same command to resume")


def render(result: TrainResult, out: Console) -> None:
    """The human form of rank 0's result: the summary, then the telemetry (if recorded)."""
    if result.preempted is not None:
        out.print(render_preempted(result.preempted), markup=False, highlight=False)
        return
    if result.summary is None:
        return
    out.print(render_summary(result.summary), markup=False)
    if result.telemetry is not None:
        out.print(render_telemetry(list(result.telemetry)), markup=False)


def report(result: TrainResult, as_json: bool) -> int:
    """Print ``result`` through ``ddpnet.output`` where there is something to print (rank 0
    of a run); other ranks and the ``--local`` parent print nothing (their rank 0 does)."""
    if result.summary is None and result.preempted is None:
        return result.exit_code
    from ddpnet.output import finish

    return finish(result, as_json, render)

"""Preemption: stop at a step every rank agrees on, checkpoint, exit 75, optionally requeue.

A scheduler warns a job before it ends it: SLURM sends ``--signal=USR1@90`` some seconds
before the time limit, SIGTERM on preemption or at the limit (then SIGKILL after KillWait).
The handlers here only record the signal (async-signal-safe: no I/O, no locks); the loop
asks at each step boundary whether any rank was told (:func:`agree`, one all-reduce of one
integer), so every rank stops after the same step even when the signal reached one rank
only. Rank 0 then writes the checkpoint (``ddpnet.train.resume.save``, atomic), every rank
leaves the group and exits ``ExitCode.PREEMPTED`` (75), and, when asked, rank 0 (or the
``--local`` parent) runs ``scontrol requeue $SLURM_JOB_ID`` so the job starts again from
that checkpoint. Active only with ``--checkpoint-dir``: without one there is nothing to
resume from, and the signals keep their usual meaning.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import FrameType
from typing import Any

from ddpnet.errors import Terminated
from ddpnet.exitcodes import ExitCode

#: the signals that ask for a checkpoint and a clean stop
SIGNALS = (signal.SIGUSR1, signal.SIGTERM)

#: a second SIGTERM this long after the first ends the rank at once (Terminated, 143): the
#: scheduler's patience is over. A repeat within it is the same notice delivered twice
#: (SLURM signals every process of a step, and a launcher forwards the signal again).
ESCALATE_AFTER_S = 5.0

class StopRequest:
    """Records the first stop signal (and when); a later SIGTERM, ``ESCALATE_AFTER_S`` after
    the first, raises :class:`ddpnet.errors.Terminated` as the CLI's own handler would."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.signum = 0
        self.at = 0.0
        self._clock = clock
        self._previous: dict[int, Any] = {}

    def on_signal(self, signum: int, frame: FrameType | None = None) -> None:
        now = self._clock()
        if not self.signum:
            self.signum, self.at = signum, now
        elif signum == signal.SIGTERM and now - self.at >= ESCALATE_AFTER_S:
            raise Terminated(signum)

    def install(self) -> StopRequest:
        """Handle :data:`SIGNALS` (main thread only; elsewhere nothing is installed)."""
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self.on_signal) for s in SIGNALS}
        return self

    def restore(self) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        self._previous = {}

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""


#: the ranks compare notes about every this many seconds of training (every step when a
#: step is slower): one all-reduce of two integers, 0.28-0.36 ms median on loopback gloo
#: (benchmarks/preempt_overhead.py), so well under 0.1% of the time, and a stop comes at
#: most this much training after the signal
CHECK_INTERVAL_S = 0.5
#: and at least every this many steps
MAX_CHECK_EVERY = 1000


def check_every(step_time_s: float, interval_s: float = CHECK_INTERVAL_S) -> int:
    """Steps between two checks so that they are ``interval_s`` apart (pure)."""
    if not step_time_s > 0:  # no measurement yet (or nan): check at the next step
        return 1
    return max(1, min(MAX_CHECK_EVERY, round(interval_s / step_time_s)))


def agree(request: StopRequest, device: str, every: int = 1) -> tuple[int, int]:
    """The signal any rank received (0: none) and the steps until the next check (the
    smallest any rank wants), the same on every rank: one all-reduce (max) of two integers
    at a step boundary every rank reaches."""
    import torch
    import torch.distributed as dist

    flag = torch.tensor([request.signum, -every], dtype=torch.int64, device=device)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    signum, neg_every = (int(v) for v in flag.tolist())
    return signum, -neg_every


class StopChecks:
    """When the ranks next ask each other whether to stop: a step number every rank holds
    the same (it comes out of the all-reduce), spaced by :func:`check_every` of this
    rank's recent step time."""

    def __init__(self, request: StopRequest, device: str,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.request, self.device, self._clock = request, device, clock
        self.next_step: int | None = None  # None: at the first boundary
        self._last: tuple[int, float] | None = None

    def poll(self, step: int) -> int:
        """At every step boundary: the agreed signal (0: go on) when a check is due."""
        if self.next_step is not None and step < self.next_step:
            return 0
        now = self._clock()
        per_step = 0.0
        if self._last is not None:
            per_step = (now - self._last[1]) / max(1, step - self._last[0])
        signum, every = agree(self.request, self.device, check_every(per_step))
        self.next_step, self._last = step + every, (step, now)
        return signum


def keep_preempted_exit(finish: bool = False) -> None:
    """Once the checkpoint is on disk, this rank's exit is 75 whatever ends it now: srun's
    ``--kill-on-bad-exit`` SIGTERMs a step's other tasks as soon as one rank exits 75, and
    the 143 a slower rank then returned (still printing its summary on a loaded host) made
    the batch script see a failure instead of a preemption: no requeue. ``finish`` (rank 0,
    which still requeues the job and prints where it stopped): SIGTERM is ignored instead,
    so that line is not lost when another rank exits first (it was, once in two CI runs);
    rank 0 exits 75 by itself a moment later (srun's SIGKILL after KillWait still ends a
    rank stuck there). Repeats of the warning are ignored. Main thread only (elsewhere
    nothing is installed)."""
    if threading.current_thread() is not threading.main_thread():
        return

    def leave(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(int(ExitCode.PREEMPTED))

    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN if finish else leave)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)


class Preempted(Exception):
    """Raised by the loop after the agreed step's checkpoint is on disk: every rank leaves
    the group, then exits ``ExitCode.PREEMPTED``."""

    def __init__(self, signum: int, step: int, total_steps: int, checkpoint: str) -> None:
        super().__init__(f"preempted at step {step}")
        self.signum, self.step = signum, step
        self.total_steps, self.checkpoint = total_steps, checkpoint


@dataclass(frozen=True)
class Requeue:
    """What ``scontrol requeue`` did: ``ok``, and its one-line answer or why it did not run."""

    job_id: str
    ok: bool
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "ok": self.ok, "detail": self.detail}


def slurm_job(environ: Mapping[str, str]) -> str | None:
    """The SLURM job to requeue: ``SLURM_JOB_ID`` (an array task's own id), else None."""
    job = environ.get("SLURM_JOB_ID", "").strip()
    return job if job.isdigit() else None


def restart_count(environ: Mapping[str, str]) -> int:
    """How many times the scheduler restarted this job: ``SLURM_RESTART_COUNT`` (set from
    the first requeue on), or ``DDPNET_RESTART_COUNT`` (what a ``--local`` parent passes its
    ranks, which see no SLURM variables); 0 when neither is a number."""
    for key in ("SLURM_RESTART_COUNT", "DDPNET_RESTART_COUNT"):
        value = environ.get(key, "").strip()
        if value.isdigit():
            return int(value)
    return 0


def requeue(job_id: str) -> Requeue:
    """``scontrol requeue JOB``: the job goes back to pending and starts again from the top
    of its batch script (it must allow it: ``#SBATCH --requeue``); SLURM ends what still runs
    of this run (SIGTERM, SIGKILL after KillWait), so call it once the checkpoint is safe."""
    from ddpnet.launch import scontrol

    answer = scontrol.requeue(job_id)
    return Requeue(job_id, answer.ok, answer.detail)


def requeue_if_asked(asked: bool, environ: Mapping[str, str] | None = None) -> Requeue | None:
    """Requeue this SLURM job when the user asked and one runs us; else None."""
    job = slurm_job(os.environ if environ is None else environ)
    if not asked or job is None:
        return None
    if threading.current_thread() is threading.main_thread():
        # the run is over: the SIGTERM SLURM sends for the requeue must not cut its report
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return requeue(job)

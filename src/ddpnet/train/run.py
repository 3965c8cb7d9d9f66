"""``ddpnet train``: :func:`run` is one rank's whole run (validate, join the group, train,
leave the group) or, with ``--local N``, N such ranks on this machine through the one spawner
(``ddpnet.local.LocalRanks``). Importing this module does not import torch."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from ddpnet.errors import ConfigError
from ddpnet.exitcodes import ExitCode
from ddpnet.paths import dir_creatable
from ddpnet.train import hugepages
from ddpnet.train.config import TrainConfig, TrainOptions, device_kind, sized, validate
from ddpnet.train.report import Reporter
from ddpnet.train.result import TrainResult

if TYPE_CHECKING:
    from ddpnet.local import LocalResult
    from ddpnet.monitor.recorder import Recorder
    from ddpnet.train.dist import Dist
    from ddpnet.train.preempt import Preempted, Requeue
    from ddpnet.train.summary import StepCallback, Summary


def run(options: TrainOptions) -> TrainResult:
    """Validate, then run this rank, or ``--local N`` ranks and wait for them."""
    # before anything imports torch: it reads the variable once, at its first allocation
    os.environ.update(hugepages.default_env(os.environ))
    if options.local is not None:
        from ddpnet.local import check_world

        check_world(options.local)  # before torch is imported or anything spawns
    # a path costs a stat; validate may import torch (seconds) to ask about CUDA
    _checkpoint_dir_usable(options.config.checkpoint_dir)
    cfg = validate(options.config, cuda_available=_cuda_available)
    if options.open_sizes:  # the device's defaults (knowing it imports torch: after the flags)
        device = device_kind(cfg.device, cuda_available=_cuda_available())
        cfg = validate(sized(cfg, options.open_sizes, device), cuda_available=_cuda_available)
    if options.local is not None:
        return TrainResult(run_local(options.local, cfg, as_json=options.as_json))
    return run_rank(cfg, as_json=options.as_json)


def _checkpoint_dir_usable(path: str | None) -> None:
    """Refuse a checkpoint directory that cannot be made before training, not at the first
    checkpoint."""
    problem = dir_creatable(path) if path else None
    if problem is not None:
        raise ConfigError(f"--checkpoint-dir {path}: {problem}",
                          "give a directory this user can create or write, e.g. "
                          "--checkpoint-dir ./ckpt")


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def worker_argv(cfg: TrainConfig, as_json: bool) -> list[str]:
    """The command of one ``--local`` rank (``ddpnet.train.__main__``)."""
    argv = [sys.executable, "-m", "ddpnet.train", json.dumps(cfg.to_dict())]
    return [*argv, "--json"] if as_json else argv


def run_local(n: int, cfg: TrainConfig, *, as_json: bool) -> int:
    """``n`` ranks on 127.0.0.1 until all finish; the first failure's code (or 128+N for a
    signal, forwarded to every rank). Rank 0's output is this process's; the others' is
    prefixed ``[rank K]`` on stderr. GLOO_SOCKET_IFNAME is not pinned: each rank's
    ``ddpnet.init()`` selects loopback itself, as before."""
    from ddpnet.local import LocalRanks
    from ddpnet.train.preempt import restart_count

    # the ranks see no SLURM variables (local_environ drops them): pass the restart count
    environ = {**os.environ, "DDPNET_RESTART_COUNT": str(restart_count(os.environ))}
    with LocalRanks(worker_argv(cfg, as_json), n, pin_loopback=False,
                    environ=environ) as ranks:
        code = local_code(ranks.wait())
    if code == ExitCode.PREEMPTED:
        _requeue_and_say(cfg.requeue_on_signal)
    return code


def local_code(result: LocalResult) -> int:
    """The ``--local`` parent's exit: 75 when every rank stopped for a preemption (a signal
    forwarded to them would otherwise read as 128+N), else the spawner's code."""
    if result.exits and all(e.code == ExitCode.PREEMPTED for e in result.exits):
        return int(ExitCode.PREEMPTED)
    return result.code


def _requeue_and_say(asked: bool) -> Requeue | None:
    """``scontrol requeue`` this SLURM job when asked; one line on stderr says what it did."""
    from ddpnet.train.preempt import requeue_if_asked

    outcome = requeue_if_asked(asked)
    if outcome is not None:
        verdict = "requeued" if outcome.ok else "could not requeue"
        sys.stderr.write(f"ddpnet: {verdict} job {outcome.job_id}: {outcome.detail}\n")
        sys.stderr.flush()
    return outcome


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
    import logging

    from ddpnet.output import exit_now

    logging.shutdown()
    exit_now(code)


def run_rank(cfg: TrainConfig, *, as_json: bool,
             callbacks: Sequence[StepCallback] = ()) -> TrainResult:
    """Run this rank (called on every rank by any launcher); rank 0's result has the summary."""
    import torch

    from ddpnet.train.dist import init_distributed
    from ddpnet.train.preempt import Preempted

    validate(cfg, cuda_available=torch.cuda.is_available())
    d = init_distributed(cfg.device, timeout_s=cfg.pg_timeout_s, metrics_port=cfg.metrics_port)
    human = sys.stderr if as_json else sys.stdout
    reporter = Reporter(human) if d.rank == 0 else None

    def note(message: str) -> None:
        if d.rank == 0:
            human.write(f"note: {message}\n")

    try:
        summary, telemetry = _train_rank(cfg, d, [*callbacks, *([reporter] if reporter else [])],
                                         note)
    except Preempted as stopped:
        return preempted_result(cfg, d.rank, stopped)
    finally:
        if reporter is not None:
            reporter.close()
    if d.rank != 0:
        return TrainResult(0, d.rank)
    return TrainResult(0, 0, summary, None if telemetry is None else tuple(telemetry))


def _train_rank(cfg: TrainConfig, d: Dist, callbacks: Sequence[StepCallback],
                note: Callable[[str], None]
                ) -> tuple[Summary, list[dict[str, Any]] | None]:
    """Train with telemetry and, with a checkpoint directory, the preemption handlers
    (SIGUSR1/SIGTERM stop every rank at one step: ``Preempted``); leave the group."""
    from ddpnet.train.dist import shutdown
    from ddpnet.train.loop import train
    from ddpnet.train.preempt import Preempted, StopRequest, keep_preempted_exit

    recorder = start_telemetry(cfg, d)
    telemetry: list[dict[str, Any]] | None = None
    stop = StopRequest().install() if cfg.checkpoint_dir else None
    preempted = False
    try:
        summary = train(cfg, d, callbacks=callbacks, note=note, stop=stop)
        if recorder is not None:
            telemetry = gather_telemetry(d, recorder.stop())
    except Preempted:
        preempted = True
        raise
    finally:
        if recorder is not None:
            recorder.stop()
        if stop is not None:
            stop.restore()
        if preempted:  # before leaving the group: the first rank out exits 75, and srun's
            # --kill-on-bad-exit SIGTERMs the others at once (rank 0, still to say where it
            # stopped and to requeue, lost that line when the signal came in between)
            keep_preempted_exit(finish=d.rank == 0)
        shutdown()  # together; after a preemption the checkpoint is already on disk
    return summary, telemetry


def preempted_result(cfg: TrainConfig, rank: int, stopped: Preempted) -> TrainResult:
    """Exit 75 on every rank; rank 0 says where it stopped and requeues the job if asked
    (after ``shutdown``: every rank has left the group and the checkpoint is on disk; the
    exit was kept against srun's SIGTERM before that, in :func:`_train_rank`)."""
    import signal

    from ddpnet.train.preempt import restart_count

    if rank != 0:
        return TrainResult(int(ExitCode.PREEMPTED), rank)
    outcome = _requeue_and_say(cfg.requeue_on_signal)
    return TrainResult(int(ExitCode.PREEMPTED), 0, preempted={
        "signal": signal.Signals(stopped.signum).name, "step": stopped.step,
        "total_steps": stopped.total_steps, "checkpoint": stopped.checkpoint,
        "restart": restart_count(os.environ),
        "requeue": None if outcome is None else outcome.to_dict()})


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

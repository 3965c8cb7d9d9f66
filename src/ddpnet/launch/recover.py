"""``python -m ddpnet.launch.recover``: what the batch script of ``ddpnet sbatch --requeue``
runs beside its step (edge). It waits for the watch's verdict (``report.json`` in this run's
watch directory), asks :mod:`ddpnet.launch.blame` which node it blames and
:func:`ddpnet.launch.recovery.decide` what to do, writes each action to the job's record
(``recovery.json``) and the job's log, then drains the node (or, without operator rights,
excludes it from the job) and requeues the job, which resumes from its newest checkpoint on
the other nodes. A verdict that blames no node, a used-up budget, a second failure on another
node or too few nodes left stops: the step ends with the watch's exit code and the record
holds every verdict so far.

It does not wait for the step to end first: a rank cut off from the others keeps its node's
srun task alive until SLURM declares the node dead (minutes); the requeue ends it at once,
and the watcher then ends the old srun, whose late cancel of step 0 would hit the next run's.

With spare nodes (``ddpnet sbatch --spare-nodes N``: the allocation holds N nodes more than
the step uses, ``#SBATCH --no-kill``) the job need not requeue: the blamed node is drained
(an unreachable one also set DOWN, which ends the step's part there at once and, with
``--no-kill``, leaves the allocation alive) and the watcher exits :data:`RESTART_STEP`; the
script starts the step again on the allocation's other nodes (``python -m
ddpnet.launch.stepnodes``), from the newest checkpoint. Once no spare is left it requeues.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import signal
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ddpnet.errors import DdpnetError
from ddpnet.launch import scontrol
from ddpnet.launch.blame import Blame, blame
from ddpnet.launch.recovery import (
    DEFAULT_MAX_RECOVERIES,
    RECORD_NAME,
    Decision,
    Event,
    Record,
    decide,
    step_nodes,
)
from ddpnet.launch.requeue import RESTART_STEP
from ddpnet.subproc import pid_alive

#: how often the watcher looks for the verdict and whether the step still runs
POLL_S = 0.5
#: the variable the script exports: where the record and each run's watch directory live
JOB_DIR_VARIABLE = "DDPNET_JOB_DIR"
#: the script's count of step restarts inside this run's allocation (``--spare-nodes``)
STEP_RESTART_VARIABLE = "DDPNET_STEP_RESTART"


@dataclass(frozen=True)
class Job:
    """This SLURM job as its script sees it: ``nodes`` its allocation, ``needed`` how many
    it holds; ``step_nodes`` the nodes its step runs on when fewer (spare nodes), else ()."""

    job_id: str
    run: int
    nodes: tuple[str, ...]
    needed: int
    partition: str
    step_nodes: tuple[str, ...] = ()

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Job:
        from ddpnet.env.hostlist import expand

        nodelist = environ.get("SLURM_JOB_NODELIST", "")
        nodes = expand(nodelist, "SLURM_JOB_NODELIST") if nodelist else ()
        count = environ.get("SLURM_JOB_NUM_NODES", "") or environ.get("SLURM_NNODES", "")
        restarts = environ.get("SLURM_RESTART_COUNT", "0")
        return cls(environ.get("SLURM_JOB_ID", ""),
                   int(restarts) if restarts.isdigit() else 0, nodes,
                   int(count) if count.isdigit() else len(nodes),
                   environ.get("SLURM_JOB_PARTITION", ""))


# ---- the record on disk ---------------------------------------------------------------------

def record_path(job_dir: Path) -> Path:
    return job_dir / RECORD_NAME


def read_record(path: Path, job: str = "", max_recoveries: int = DEFAULT_MAX_RECOVERIES
                ) -> Record:
    """The record at ``path``, an empty one when there is none yet; ValueError when it is
    unreadable (no action may be taken without the history: it could loop)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return Record(job, (), max_recoveries)
    try:
        data = json.loads(text)
        return Record.from_dict(data)
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path} is not a ddpnet recovery record: {exc}") from None


def write_record(path: Path, record: Record) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(record.to_dict(), indent=1))
    tmp.replace(path)  # a reader never sees half a record


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """One writer at a time (the watcher, a rank recording its resume)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def append(path: Path, *events: Event) -> Record:
    """Add ``events`` to the record at ``path`` (locked); the record as written."""
    with locked(path):
        record = read_record(path).add(*events)
        write_record(path, record)
    return record


def note_resumed(environ: Mapping[str, str], step: int) -> None:
    """Record that a restarted run resumed at ``step`` (``ddpnet train``'s rank 0, when the
    job keeps a record); never fails the caller."""
    job_dir = environ.get(JOB_DIR_VARIABLE, "")
    restarts = environ.get("SLURM_RESTART_COUNT", "0")
    steps = environ.get(STEP_RESTART_VARIABLE, "0")
    run = int(restarts) if restarts.isdigit() else 0
    step_restart = int(steps) if steps.isdigit() else 0
    if not job_dir or not (run or step_restart):
        return
    where = f" (step restart {step_restart} in the allocation)" if step_restart else ""
    path = record_path(Path(job_dir))
    with contextlib.suppress(OSError, ValueError):
        if path.exists():
            append(path, Event("resumed", run, time.time(), step=step,
                               detail=f"training resumed from the checkpoint of step {step}"
                                      f"{where}"))


# ---- acting on a verdict --------------------------------------------------------------------

def say(line: str) -> None:
    print(f"ddpnet: recover: {line}", flush=True)


def read_report(path: Path, since: float) -> dict[str, Any] | None:
    """The hub's report when written at or after ``since`` (an older one is another run's),
    else None; a half-written one counts as not yet there."""
    try:
        if path.stat().st_mtime < since:
            return None
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def handle(report: Mapping[str, Any], job: Job, path: Path, max_recoveries: int,
           since: float = 0.0, step_pid: int = 0) -> tuple[Decision, bool]:
    """Decide on ``report`` once per step (started at ``since``), record it and carry it
    out; the decision, and whether the step restarts inside the allocation (else the job
    requeued or stopped). Requeueing ends this run: what is recorded is written before;
    ``step_pid`` (the run's srun) is ended once the job is requeued (:func:`_end_old_srun`)."""
    verdict = blame(report)
    with locked(path):
        record = _own_record(path, job, max_recoveries)
        if record.acted_in(job.run, since):
            say(f"run {job.run}'s verdict was already handled: {path}")
            return Decision(why="this run's verdict was already handled"), False
        decision, inside = _decide(record, verdict, job)
        record = record.add(Event("verdict", job.run, time.time(), verdict.host,
                                  verdict=verdict, step=verdict.step))
        write_record(path, record)
    say(f"verdict: {verdict.kind}: {verdict.summary}")
    if not decision.restart:
        _stop(path, job, decision.why, decision.history)
        return decision, False
    if inside:
        return decision, _restart_inside(path, job, decision.node, verdict, record)
    if _take_out(path, job, decision.node, verdict, record):
        _end_old_srun(step_pid)
    return decision, False


def _decide(record: Record, verdict: Blame, job: Job) -> tuple[Decision, bool]:
    """With spare nodes: a restart inside the allocation (its usable nodes the pool) when
    enough are left; else (or without spares) a requeue on the partition's nodes."""
    if not verdict.blames:
        return decide(record, verdict, job.nodes, (), job.needed), False
    usable = scontrol.usable_nodes(job.partition)
    if job.step_nodes:
        pool = [n for n in job.nodes if n in usable]
        inside = decide(record, verdict, job.step_nodes, pool, len(job.step_nodes))
        if not inside.too_few:
            return inside, inside.restart
        say(f"no spare node left in the allocation ({inside.why}): requeueing instead")
    return decide(record, verdict, job.step_nodes or job.nodes, usable, job.needed), False


def _restart_inside(path: Path, job: Job, node: str, verdict: Blame, record: Record) -> bool:
    """Drain ``node`` (or leave it out of the allocation's next step when the drain is
    refused); an unreachable one is set DOWN so that srun ends the step now (``--no-kill``
    keeps the allocation). True: the script starts the step again without it."""
    drained = scontrol.drain(node, verdict.reason)
    if drained.ok:
        append(path, Event("drain", job.run, time.time(), node, verdict.reason))
        say(f"drained {node}: {verdict.reason}")
        if verdict.unreachable:
            _down(path, job, node, verdict.reason, "unreachable: set DOWN so srun ends the "
                  "step now (the allocation stays: --no-kill)")
    else:
        append(path, Event("exclude", job.run, time.time(), node,
                           f"drain refused ({drained.detail}); left out of the next step"))
        say(f"cannot drain {node} ({drained.detail}): the next step leaves it out")
    left = step_nodes(job.nodes, (*record.taken_out, node), len(job.step_nodes))
    append(path, Event("restart", job.run, time.time(), node,
                       f"step restarted in the allocation on {','.join(left)} without "
                       f"{node}, from its newest checkpoint"))
    say(f"restarting the step on {','.join(left)} (without {node}) from the newest "
        "checkpoint: no requeue")
    return True


def _own_record(path: Path, job: Job, max_recoveries: int) -> Record:
    """This job's record; another job's (a DDPNET_JOB_DIR used again) is kept aside as
    ``recovery-<its job>.json`` and this job starts a fresh one."""
    record = read_record(path, job.job_id, max_recoveries)
    if job.job_id and record.job and record.job != job.job_id and path.exists():
        path.replace(path.with_name(f"recovery-{record.job}.json"))
        record = Record(job.job_id, ())
    return Record(job.job_id or record.job, record.events, max_recoveries)


def _stop(path: Path, job: Job, why: str, history: tuple[str, ...]) -> None:
    append(path, Event("stop", job.run, time.time(), detail=why))
    say(f"no restart: {why}")
    for line in history:
        say(f"earlier: {line}")
    say(f"history: {path} (ddpnet diagnose --job-dir {path.parent})")


def _take_out(path: Path, job: Job, node: str, verdict: Blame, record: Record) -> bool:
    """Drain ``node`` with the verdict as its reason (or exclude it) and requeue the job;
    True once it is requeued."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the requeue ends this run: finish first
    drained = scontrol.drain(node, verdict.reason)
    if drained.ok:
        append(path, Event("drain", job.run, time.time(), node, verdict.reason),
               Event("requeue", job.run, time.time(), detail=f"job {job.job_id} requeued "
                     f"without {node}, resuming from its newest checkpoint"))
        say(f"drained {node}: {verdict.reason}")
        answer = scontrol.requeue(job.job_id)
        if answer.ok:
            say(f"requeued job {job.job_id}: it resumes from its newest checkpoint without "
                f"{node}")
            if verdict.unreachable:
                _down(path, job, node, verdict.reason)
            return True
        _stop(path, job, f"scontrol requeue {job.job_id} failed: {answer.detail}", ())
        return False
    excluded = (*record.taken_out, node)
    say(f"cannot drain {node} ({drained.detail}): requeueing job {job.job_id} with "
        f"ExcNodeList={','.join(excluded)} instead")
    append(path, Event("exclude", job.run, time.time(), node,
                       f"drain refused ({drained.detail}); ExcNodeList={','.join(excluded)}"),
           Event("requeue", job.run, time.time(), detail=f"job {job.job_id} requeued "
                 f"excluding {','.join(excluded)}"))
    answers = scontrol.requeue_excluding(job.job_id, excluded)
    failed = next((a for a in answers if not a.ok), None)
    if failed is not None:
        _stop(path, job, f"excluding {node} failed: {failed.detail}", ())
    return failed is None


def _end_old_srun(step_pid: int) -> None:
    """SIGKILL the requeued run's srun. The requeue sends it SIGTERM; it then waits KillWait
    + 2 s for its step and, when that has not ended (a task on a cut-off node), cancels the
    step by its id, ``<job>.0``, which by then may be the requeued run's own first step: a
    job starts again once its credential expired (``AuthInfo cred_expire``), which may be
    sooner, and an srun whose batch shell the requeue killed first is no longer the batch
    step's under ``proctrack/linuxproc``, so its SIGKILL after KillWait misses it. The
    requeue has ended the old step on every node already; srun has nothing left to do."""
    if step_pid <= 0:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(step_pid, signal.SIGKILL)
        say(f"ended the old run's srun (pid {step_pid}): the requeue ended its step, and its "
            "late cancel of step 0 would hit the next run's")


def _down(path: Path, job: Job, node: str, reason: str,
          done: str = "unreachable: set DOWN so the requeued job need not wait for it") -> None:
    """The node answers on nothing: set it DOWN (drained it stays) so that SLURM ends the
    old run at once instead of waiting SlurmdTimeout for it, and the job starts again."""
    answer = scontrol.down(node, reason)
    detail = done if answer.ok else f"scontrol State=DOWN refused: {answer.detail}"
    append(path, Event("down", job.run, time.time(), node, detail))
    say(f"{node}: {detail}")


def watch(step_pid: int, watch_dir: Path, job_dir: Path, job: Job,
          max_recoveries: int, since: float) -> int:
    """Act on this run's verdict (a report written at or after ``since``, the run's start)
    as soon as it is written, while the step runs, and once more after it ended."""
    report = watch_dir / "report.json"
    path = record_path(job_dir)
    while True:
        running = pid_alive(step_pid)
        found = read_report(report, since)
        if found is not None:
            _, inside = handle(found, job, path, max_recoveries, since, step_pid)
            return RESTART_STEP if inside else 0
        if not running:
            return 0
        time.sleep(POLL_S)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddpnet.launch.recover")
    parser.add_argument("--job-dir", type=Path, required=True)
    parser.add_argument("--watch-dir", type=Path, required=True)
    parser.add_argument("--step-pid", type=int, required=True)
    parser.add_argument("--max-recoveries", type=int, default=DEFAULT_MAX_RECOVERIES)
    parser.add_argument("--since", type=float, default=0.0,
                        help="the step's start (seconds since the epoch)")
    parser.add_argument("--step-nodes", default="",
                        help="with spare nodes: the comma-separated nodes the step runs on")
    args = parser.parse_args(argv)
    if os.environ.get("DDPNET_WATCH_ACTION", "exit").strip() == "warn":
        say("DDPNET_WATCH_ACTION=warn: a verdict does not end the job, so none is acted on")
        return 0
    try:
        job = Job.from_environ(os.environ)
        if args.step_nodes:
            job = replace(job, step_nodes=tuple(n for n in args.step_nodes.split(",") if n))
        return watch(args.step_pid, args.watch_dir, args.job_dir, job, args.max_recoveries,
                     args.since)
    except (DdpnetError, ValueError, OSError) as exc:
        sys.stderr.write(f"ddpnet: recover: error: {exc}\n"
                         f"hint: no node was drained and nothing requeued; read "
                         f"{args.watch_dir}/report.json and act by hand\n")
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

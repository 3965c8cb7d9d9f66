"""SLURM tasks started by ``srun`` (one process per task), and the batch step.

What SLURM 22.05 really exports (checked on a live slurmctld/slurmd in tests/launch):
an ``srun`` task has SLURM_STEP_ID, SLURM_PROCID, SLURM_NTASKS, SLURM_STEP_NUM_TASKS,
SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE. The batch script itself has SLURM_JOB_ID,
SLURM_PROCID=0, SLURM_NODEID=0 and the job's node list, but no SLURM_STEP_ID (and
SLURM_NTASKS only when the job asked for tasks). The batch step is one process on the first
node, not the job's ranks: it resolves as a one-process SLURM launch (world size 1, so it never
waits for ranks that do not exist) that still derives its port from the job id, so two jobs
sharing a node do not collide on 29500. It is the launching script: with the job's node list
it carries the job it launches (hosts, tasks per node from SLURM_TASKS_PER_NODE, else 1), whose
ranks ``srun --ntasks-per-node 1`` starts on every node.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ddpnet.env.base import (
    Launcher,
    ReadContext,
    Sourced,
    env_int,
    first_int,
    job_script,
    put,
    put_master,
)
from ddpnet.env.hostlist import expand
from ddpnet.errors import ConfigError

#: the most nodes a task count list may describe (python-hostlist's limit on a node list)
MAX_NODES = 100_000
_STEP_VARS = ("SLURM_STEP_ID", "SLURM_STEPID")
#: how a few SLURM versions name the batch step when they export its id at all
_BATCH_STEP_IDS = ("batch", "4294967294", "4294967291")


def parse_tasks_per_node(text: str, source: str) -> tuple[int, ...]:
    """SLURM's compressed counts, ``2(x3),1`` -> (2, 2, 2, 1); each count >= 1, at most
    :data:`MAX_NODES` nodes (a huge repeat must not build a huge list)."""
    counts: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            value, repeat = part.rstrip(")").split("(x") if "(x" in part else (part, "1")
            count, times = int(value), int(repeat)
        except ValueError:
            raise ConfigError(
                f"{source}={text!r} is not a SLURM task count list",
                "expected a form like 2(x3),1; is the variable overwritten by a script?",
            ) from None
        if count < 1 or times < 1 or len(counts) + times > MAX_NODES:
            raise ConfigError(
                f"{source}={text!r}: {part!r} is not 1 or more tasks on 1 to {MAX_NODES} nodes",
                "expected a form like 2(x3),1; is the variable overwritten by a script?",
            )
        counts.extend([count] * times)
    return tuple(counts)


def is_step(environ: Mapping[str, str]) -> bool:
    """True in an ``srun`` task, False in the batch script (or outside SLURM)."""
    if "SLURM_PROCID" not in environ or "SLURM_NTASKS" not in environ:
        return False
    step = next((environ[v] for v in _STEP_VARS if v in environ), None)
    return step is not None and step not in _BATCH_STEP_IDS


def batch_nodes(environ: Mapping[str, str]) -> int | None:
    """The job's node count when this process is the batch step, else None."""
    if "SLURM_PROCID" not in environ or "SLURM_JOB_ID" not in environ or is_step(environ):
        return None
    found = first_int(environ, "SLURM_JOB_NUM_NODES", "SLURM_NNODES", minimum=1)
    return found[0] if found else 1


def _read_batch(environ: Mapping[str, str], ctx: ReadContext) -> dict[str, Sourced]:
    source = "SLURM batch step"
    out: dict[str, Sourced] = {
        "rank": (0, source), "world_size": (1, source), "local_rank": (0, source),
        "local_world_size": (1, source), "node_rank": (0, source), "num_nodes": (1, source),
    }
    put_master(out, environ)
    if environ.get("SLURM_JOB_ID"):
        out["job_id"] = (environ["SLURM_JOB_ID"], "SLURM_JOB_ID")
        try:  # the job view is extra: a batch step resolves as one process whatever it says
            hosts = SlurmLauncher.job_hosts(environ, ctx)
        except ConfigError:
            hosts = None
        if hosts is not None:
            out["job_script"] = job_script("slurm", environ["SLURM_JOB_ID"],
                                           _batch_slots(environ, hosts[0]), hosts[1], ctx)
            out["note"] = (f"SLURM batch step: the launching script of a {len(hosts[0])}-node "
                           "job, not a rank; start the ranks with srun (one ddpnet launch or "
                           "torchrun per node)", hosts[1])
    return out


def _batch_slots(environ: Mapping[str, str], hosts: tuple[str, ...]
                 ) -> tuple[tuple[str, int], ...]:
    """The job's tasks per node (SLURM_TASKS_PER_NODE, set when the job asked for tasks),
    else one per node."""
    text = environ.get("SLURM_TASKS_PER_NODE", "")
    try:
        counts = parse_tasks_per_node(text, "SLURM_TASKS_PER_NODE") if text else ()
    except ConfigError:
        counts = ()
    if len(counts) != len(hosts):
        counts = (1,) * len(hosts)
    return tuple(zip(hosts, counts, strict=True))


class SlurmLauncher(Launcher):
    name: ClassVar[str] = "slurm"
    markers: ClassVar[tuple[str, ...]] = ("SLURM_PROCID", "SLURM_STEP_ID")

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        if "SLURM_PROCID" not in environ:
            return False
        return is_step(environ) or "SLURM_JOB_ID" in environ

    @classmethod
    def job_hosts(cls, environ: Mapping[str, str], ctx: ReadContext) -> Sourced | None:
        for var in ("SLURM_JOB_NODELIST", "SLURM_NODELIST"):
            if environ.get(var):
                return expand(environ[var], var), var
        return None

    def read(self, environ: Mapping[str, str], ctx: ReadContext) -> dict[str, Sourced]:
        if not is_step(environ):
            return _read_batch(environ, ctx)
        out: dict[str, Sourced] = {}
        put(out, "rank", env_int(environ, "SLURM_PROCID"))
        put(out, "world_size", first_int(environ, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS",
                                         minimum=1))
        put(out, "local_rank", env_int(environ, "SLURM_LOCALID"))
        put(out, "node_rank", env_int(environ, "SLURM_NODEID"))
        put(out, "num_nodes", first_int(environ, "SLURM_STEP_NUM_NODES", "SLURM_NNODES",
                                        "SLURM_JOB_NUM_NODES", minimum=1))
        for var in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"):
            if environ.get(var):
                out["hosts"] = (expand(environ[var], var), var)
                break
        for var in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
            if environ.get(var) and "node_rank" in out:
                counts = parse_tasks_per_node(environ[var], var)
                node = out["node_rank"][0]
                if node < len(counts):
                    out["local_world_size"] = (counts[node], var)
                break
        put_master(out, environ)
        if environ.get("SLURM_JOB_ID"):
            out["job_id"] = (environ["SLURM_JOB_ID"], "SLURM_JOB_ID")
        return out

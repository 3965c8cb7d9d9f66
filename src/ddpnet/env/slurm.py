"""SLURM tasks started by ``srun`` (one process per task).

A batch script itself (no ``srun``) also sees SLURM_PROCID=0, but it is one process, not the
job's ranks: only a job *step* (SLURM_STEP_ID set, not the ``batch`` step) counts as a
SLURM launch, which saves users from a world size that never assembles.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ddpnet.env.base import Launcher, ReadContext, Sourced, env_int, first_int, put, put_master
from ddpnet.env.hostlist import expand
from ddpnet.errors import ConfigError

_STEP_VARS = ("SLURM_STEP_ID", "SLURM_STEPID")


def parse_tasks_per_node(text: str, source: str) -> tuple[int, ...]:
    """SLURM's compressed counts, ``2(x3),1`` -> (2, 2, 2, 1)."""
    counts: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            if "(x" in part:
                value, repeat = part.rstrip(")").split("(x")
                counts.extend([int(value)] * int(repeat))
            else:
                counts.append(int(part))
        except ValueError:
            raise ConfigError(
                f"{source}={text!r} is not a SLURM task count list",
                "expected a form like 2(x3),1; is the variable overwritten by a script?",
            ) from None
    return tuple(counts)


class SlurmLauncher(Launcher):
    name: ClassVar[str] = "slurm"
    markers: ClassVar[tuple[str, ...]] = ("SLURM_PROCID", "SLURM_STEP_ID")

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        if "SLURM_PROCID" not in environ or "SLURM_NTASKS" not in environ:
            return False
        step = next((environ[v] for v in _STEP_VARS if v in environ), None)
        return step is not None and step != "batch" and step != "4294967294"

    def read(self, environ: Mapping[str, str], ctx: ReadContext) -> dict[str, Sourced]:
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

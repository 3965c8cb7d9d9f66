"""PBS Professional, OpenPBS and Torque.

The MOM sets in every task of a job (openpbs/openpbs ``src/resmom/start_exec.c``,
``variables_else``): ``PBS_JOBID``, ``PBS_NODEFILE``, ``PBS_NODENUM`` (this node's index in
the job, 0 on the first), ``PBS_TASKNUM`` (the task id: 1 for the job script, higher for tasks
spawned through the TM interface, e.g. by ``pbsdsh``; OpenPBS writes spawned ids in hex),
plus ``PBS_JOBNAME``, ``PBS_QUEUE``, ``PBS_ENVIRONMENT``. Torque's ``pbsdsh`` adds
``PBS_VNODENUM``, the line of the node file the task runs for.

``PBS_NODEFILE`` (``generate_pbs_nodefile``) holds one host name per line, once per
vnode/MPI slot, first node first: ``n1 n1 n2 n2`` for two slots on two hosts.

The job script itself is one process on the first node (like SLURM's batch step): task 1 on
node 0. It resolves as a one-process job, with the allocation in a note. Anything else (a
higher task number, or any task on another node: task ids restart there) is a spawned task.
A task spawned by ``pbsdsh -u`` (one per node) is rank PBS_NODENUM of one process per host;
with PBS_VNODENUM (Torque's ``pbsdsh``, one per slot) it is that slot. ``mpirun`` inside the
job is detected as MPI, which wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ddpnet.env.base import (
    Launcher,
    ReadContext,
    Sourced,
    count_slots,
    env_int,
    file_text,
    job_script,
    put_master,
)
from ddpnet.env.hostlist import compress, valid_host
from ddpnet.errors import ConfigError

_FILE_VAR = "PBS_NODEFILE"


def parse_nodefile(text: str, source: str = _FILE_VAR) -> tuple[str, ...]:
    """One host per slot, in order; blank lines skipped. A line with spaces or an empty file
    is not a node file."""
    lines = tuple(line.strip() for line in text.splitlines() if line.strip())
    if not lines:
        raise ConfigError(f"{source} is empty: the job has no hosts",
                          "PBS writes one host per slot there; is the job still running?")
    for number, line in enumerate(lines, 1):
        if not valid_host(line):
            raise ConfigError(
                f"{source} line {number} {line[:60]!r} is not a host name",
                "a PBS node file has one host name per line (once per slot); do not "
                "point PBS_NODEFILE at another format",
            )
    return lines


def unique_hosts(slots: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(slots))


def task_number(environ: Mapping[str, str]) -> int:
    """``PBS_TASKNUM`` (decimal for the job script, hex in OpenPBS's spawned tasks), 1 when
    unset."""
    text = environ.get("PBS_TASKNUM", "1").strip()
    try:
        return int(text, 16)
    except ValueError:
        raise ConfigError(f"PBS_TASKNUM={text!r} is not a task number",
                          "PBS sets it for every task; do not overwrite it") from None


def _read_slot(environ: Mapping[str, str], slots: tuple[str, ...]) -> dict[str, Sourced]:
    """A task started for one slot of the node file (Torque's pbsdsh: PBS_VNODENUM)."""
    vnode = env_int(environ, "PBS_VNODENUM")
    assert vnode is not None
    if vnode[0] >= len(slots):
        raise ConfigError(
            f"PBS_VNODENUM={vnode[0]} but {_FILE_VAR} has {len(slots)} slots",
            "PBS_VNODENUM numbers the node file's lines from 0; is PBS_NODEFILE another job's?",
        )
    hosts, host = unique_hosts(slots), slots[vnode[0]]
    mine = [i for i, h in enumerate(slots) if h == host]
    return {"rank": vnode, "world_size": (len(slots), _FILE_VAR),
            "local_rank": (mine.index(vnode[0]), _FILE_VAR),
            "local_world_size": (len(mine), _FILE_VAR),
            "node_rank": (hosts.index(host), _FILE_VAR)}


def _read_node(environ: Mapping[str, str], slots: tuple[str, ...]) -> dict[str, Sourced]:
    """A task started once per node (``pbsdsh -u``): rank PBS_NODENUM of one per host."""
    hosts = unique_hosts(slots)
    node = env_int(environ, "PBS_NODENUM") or (0, "default")
    if node[0] >= len(hosts):
        raise ConfigError(f"PBS_NODENUM={node[0]} but {_FILE_VAR} lists {len(hosts)} hosts",
                          "PBS_NODENUM numbers the job's hosts from 0; is PBS_NODEFILE "
                          "another job's?")
    return {"rank": node, "world_size": (len(hosts), _FILE_VAR), "node_rank": node,
            "local_rank": (0, "pbsdsh -u"), "local_world_size": (1, "pbsdsh -u")}


def _read_script(environ: Mapping[str, str], slots: tuple[str, ...],
                 ctx: ReadContext) -> dict[str, Sourced]:
    """The job script: one process that launches the job (its own values are a world of one,
    so an init() in it does not wait for ranks), with the job it launches."""
    source = "PBS job script"
    hosts = unique_hosts(slots)
    return {"rank": (0, source), "world_size": (1, source), "local_rank": (0, source),
            "local_world_size": (1, source), "node_rank": (0, source),
            "num_nodes": (1, source),
            "job_script": job_script("pbs", environ["PBS_JOBID"], count_slots(slots),
                                     _FILE_VAR, ctx),
            "note": (f"PBS job script: the launching script of a job of {len(slots)} slots on "
                     f"{len(hosts)} hosts {compress(hosts)} ({_FILE_VAR}), not a rank; start "
                     "the ranks with mpirun, or with pbsdsh -u and torchrun / ddpnet launch "
                     "on each host", _FILE_VAR)}


class PbsLauncher(Launcher):
    name: ClassVar[str] = "pbs"
    markers: ClassVar[tuple[str, ...]] = ("PBS_JOBID", _FILE_VAR)

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        return "PBS_JOBID" in environ and _FILE_VAR in environ

    @classmethod
    def files(cls, environ: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        return ((_FILE_VAR, environ[_FILE_VAR]),) if environ.get(_FILE_VAR) else ()

    @classmethod
    def job_hosts(cls, environ: Mapping[str, str], ctx: ReadContext) -> Sourced | None:
        slots = parse_nodefile(file_text(environ, _FILE_VAR, ctx, "node file"))
        return unique_hosts(slots), _FILE_VAR

    def read(self, environ: Mapping[str, str], ctx: ReadContext) -> dict[str, Sourced]:
        slots = parse_nodefile(file_text(environ, _FILE_VAR, ctx, "node file"))
        node = env_int(environ, "PBS_NODENUM") or (0, "default")
        if task_number(environ) <= 1 and node[0] == 0:
            out = _read_script(environ, slots, ctx)
        else:
            reader = _read_slot if "PBS_VNODENUM" in environ else _read_node
            out = reader(environ, slots)
            out["hosts"] = (unique_hosts(slots), _FILE_VAR)
        put_master(out, environ)
        out["job_id"] = (environ["PBS_JOBID"], "PBS_JOBID")
        return out

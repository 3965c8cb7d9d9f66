"""The resolved distributed configuration of one process."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

#: keys of DistConfig that carry a source (where the value came from)
SOURCED_KEYS = (
    "launcher",
    "rank",
    "world_size",
    "local_rank",
    "local_world_size",
    "node_rank",
    "num_nodes",
    "master_addr",
    "master_port",
    "init_method",
    "hosts",
)


@dataclass(frozen=True)
class Ambiguity:
    """Another environment whose variables are also set and that does not run inside the
    chosen one by design (nor it inside that one): reported, never silently ignored."""

    launcher: str
    #: the other environment's marker variables as found, e.g. ``{"PBS_JOBID": "7.srv"}``
    markers: Mapping[str, str]
    #: the environment it conflicts with (the chosen one, or one above it in priority)
    conflicts_with: str

    def describe(self, chosen: str) -> str:
        """One line for people: what else matched, and what to do about it."""
        found = ", ".join(f"{k}={v}" for k, v in self.markers.items())
        return (f"ambiguous environment: {self.launcher} also matches ({found}) and is not "
                f"nested with {self.conflicts_with} by design; {chosen} was used (priority "
                f"order): unset the variables of the environment this job is not")

    def to_dict(self) -> dict[str, Any]:
        return {"launcher": self.launcher, "markers": dict(self.markers),
                "conflicts_with": self.conflicts_with}


#: how each batch system runs one command on every node of the job, from its job script:
#: ``{each}`` is the per-node loop over ``HOSTS`` with ``$i`` the node rank (pbsdsh and srun
#: start one task per node themselves, the node rank in their own variable)
FAN_OUT: Mapping[str, tuple[str, str]] = MappingProxyType({
    "pbs": ("pbsdsh -u -- bash -lc '{cmd}'", "$PBS_NODENUM"),
    "sge": ('i=0; for h in {hosts}; do qrsh -inherit "$h" {cmd} & i=$((i+1)); done; wait',
            "$i"),
    "lsf": ('i=0; for h in {hosts}; do blaunch "$h" {cmd} & i=$((i+1)); done; wait', "$i"),
    "slurm": ("srun --nodes {nodes} --ntasks-per-node 1 bash -c '{cmd}'", "$SLURM_NODEID"),
})


@dataclass(frozen=True)
class JobScript:
    """The batch job around a job script (PBS, Grid Engine, LSF) or SLURM's batch step. That
    process is the *launching script*, not a rank: it starts the ranks on the job's nodes.
    ``hosts`` in allocation order with their ``slots`` (``source``: where they were read);
    the master is the first host, the port derived from the job id (the same on every node).
    """

    scheduler: str
    job_id: str
    hosts: tuple[str, ...]
    slots: tuple[int, ...]
    master_port: int
    source: str

    @property
    def master_addr(self) -> str:
        return self.hosts[0]

    @property
    def nodes(self) -> int:
        return len(self.hosts)

    @property
    def nproc_per_node(self) -> int:
        """Slots per node; the smallest where they differ (torchrun's static rendezvous
        runs the same count on every node)."""
        return min(self.slots)

    def torchrun(self, node_rank: int | str, script: str = "YOUR_SCRIPT.py") -> str:
        """The torchrun command of one node (static rendezvous: rank 0 on the master)."""
        return (f"torchrun --nnodes {self.nodes} --nproc-per-node {self.nproc_per_node} "
                f"--node-rank {node_rank} --master-addr {self.master_addr} "
                f"--master-port {self.master_port} {script}")

    def node_commands(self) -> tuple[str, ...]:
        """One command per host, in node-rank order (run host i's on host i)."""
        return tuple(self.torchrun(i) for i in range(self.nodes))

    def fan_out(self) -> str:
        """One line for the job script that starts every node's torchrun through the
        scheduler's own task launcher (pbsdsh, qrsh -inherit, blaunch, srun)."""
        template, rank_var = FAN_OUT[self.scheduler]
        return template.format(cmd=self.torchrun(rank_var), hosts=" ".join(self.hosts),
                               nodes=self.nodes)

    def to_dict(self) -> dict[str, Any]:
        return {"scheduler": self.scheduler, "job_id": self.job_id, "hosts": list(self.hosts),
                "slots": list(self.slots), "nodes": self.nodes,
                "nproc_per_node": self.nproc_per_node, "master_addr": self.master_addr,
                "master_port": self.master_port, "source": self.source,
                "node_commands": list(self.node_commands()), "fan_out": self.fan_out()}


@dataclass(frozen=True)
class DistConfig:
    """Everything ``init_process_group`` needs, with the source of every value.

    ``sources`` maps each key of :data:`SOURCED_KEYS` to the environment variable or flag it
    came from, or ``default`` / ``derived``; ``notes`` records decisions a user should see
    (which launcher won and why, a derived port).
    """

    launcher: str
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    num_nodes: int
    master_addr: str
    master_port: int
    init_method: str
    hosts: tuple[str, ...] = ()
    job_id: str | None = None
    sources: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    notes: tuple[str, ...] = ()
    #: other environments that match too (see :class:`Ambiguity`); empty when unambiguous
    ambiguous: tuple[Ambiguity, ...] = ()
    #: this process is a batch job's launching script (not a rank): the job it launches
    job_script: JobScript | None = None

    @property
    def is_multi_node(self) -> bool:
        return self.num_nodes > 1

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (the schema of ``ddpnet env --json``)."""
        return {
            "launcher": self.launcher,
            "rank": self.rank,
            "world_size": self.world_size,
            "local_rank": self.local_rank,
            "local_world_size": self.local_world_size,
            "node_rank": self.node_rank,
            "num_nodes": self.num_nodes,
            "master_addr": self.master_addr,
            "master_port": self.master_port,
            "init_method": self.init_method,
            "hosts": list(self.hosts),
            "job_id": self.job_id,
            "sources": dict(self.sources),
            "notes": list(self.notes),
            "ambiguous": [a.to_dict() for a in self.ambiguous],
            "job_script": self.job_script.to_dict() if self.job_script else None,
        }

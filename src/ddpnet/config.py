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
        }

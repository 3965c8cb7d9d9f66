"""What ``ddpnet lab``'s subcommands return (:mod:`ddpnet.lab.ops`) and ``--json`` prints or
:mod:`ddpnet.lab.render` shows: their own module, so neither of those imports the other."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class UpResult:
    """The lab's status, whether this call built it, and how long that took."""

    status: Mapping[str, Any]
    created: bool
    seconds: float
    slurm: str | None = None
    exit_code: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {**self.status, "created": self.created, "seconds": round(self.seconds, 3)}


@dataclass(frozen=True)
class RunResult:
    """Each node's exit status (128+N for a signal N); the command's is the worst."""

    name: str
    codes: Mapping[str, int] = field(default_factory=dict)
    timed_out: tuple[str, ...] = ()

    @property
    def exit_code(self) -> int:
        return max(self.codes.values(), default=0)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "exit_codes": dict(self.codes),
                "timed_out": list(self.timed_out)}


@dataclass(frozen=True)
class FaultResult:
    """A fault injected on a node (its record and the node's faults), or faults cleared
    (``node`` is None for all nodes)."""

    name: str
    node: int | None
    node_name: str | None
    fault: Mapping[str, Any] | None = None
    faults: tuple[Mapping[str, Any], ...] = ()
    exit_code: int = 0

    def to_dict(self) -> dict[str, Any]:
        if self.fault is None:
            return {"name": self.name, "cleared": "all" if self.node is None else self.node}
        return {"name": self.name, "node": self.node, "fault": dict(self.fault),
                "faults": [dict(f) for f in self.faults]}


@dataclass(frozen=True)
class StatusResult:
    """``lab status``: the lab's nodes, addresses, shaping and faults."""

    status: Mapping[str, Any]
    exit_code: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.status)


@dataclass(frozen=True)
class DownResult:
    name: str
    exit_code: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "down": True}

"""The result rank 0 renders: verdict, root cause first, nodes, matrices, timings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ddpnet.check.causes import Cause, sort_causes


@dataclass(frozen=True)
class CheckReport:
    world_size: int
    master: str
    causes: tuple[Cause, ...]
    nodes: tuple[dict[str, Any], ...] = ()
    reachability: tuple[tuple[str, ...], ...] = ()
    bandwidth_gbps: tuple[tuple[float | None, ...], ...] = ()
    #: the mesh's round trips, ms: ``rtt_ms[i][j]`` rank i timed connecting to rank j
    rtt_ms: tuple[tuple[float | None, ...], ...] = ()
    allreduce: dict[str, Any] = field(default_factory=dict)
    bench: dict[str, Any] | None = None
    timings: dict[str, float] = field(default_factory=dict)
    stages: dict[str, str] = field(default_factory=dict)
    #: what the check deliberately did not judge, and why (e.g. same-host links)
    notes: tuple[str, ...] = ()
    #: the networks every host shares, compared (``check.networks``): empty with one
    networks: tuple[dict[str, Any], ...] = ()

    @property
    def sorted_causes(self) -> tuple[Cause, ...]:
        return sort_causes(self.causes)

    @property
    def verdict(self) -> str:
        return "fail" if any(c.severity == "fail" for c in self.causes) else "pass"

    @property
    def root(self) -> Cause | None:
        ordered = self.sorted_causes
        return ordered[0] if ordered else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "world_size": self.world_size,
            "master": self.master,
            "root_cause": self.root.to_dict() if self.root else None,
            "causes": [c.to_dict() for c in self.sorted_causes],
            "stages": dict(self.stages),
            "nodes": list(self.nodes),
            "reachability": [list(r) for r in self.reachability],
            "bandwidth_gbps": [list(r) for r in self.bandwidth_gbps],
            "rtt_ms": [list(r) for r in self.rtt_ms],
            "allreduce": dict(self.allreduce),
            "bench": self.bench,
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
            "notes": list(self.notes),
            "networks": list(self.networks),
        }

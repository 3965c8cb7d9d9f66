"""What one ``ddpnet check`` run is asked to do (frozen; the CLI builds it, workers get it as
JSON)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace

from ddpnet.errors import ConfigError

#: the bandwidth matrix is on by default up to this many ranks (N-1 rounds)
MATRIX_AUTO_MAX = 64
#: seconds: (lowest, highest) of each timing option (docs/check.md)
LIMITS = {"stage_timeout": (1.0, 3600.0), "join_timeout": (0.5, 3600.0),
          "connect_timeout": (0.1, 3600.0), "bw_seconds": (0.05, 60.0)}


@dataclass(frozen=True)
class CheckOptions:
    matrix: bool | None = None
    bench: bool = False
    #: budget of one waiting stage (facts, mesh, process group)
    stage_timeout: float = 20.0
    #: how long rank 0 waits for every rank to join
    join_timeout: float = 10.0
    connect_timeout: float = 3.0
    bw_seconds: float = 1.0
    fanout: int = 32
    #: ``--full-mesh``: probe every pair, also above ``mesh.SAMPLE_ABOVE`` ranks
    full_mesh: bool = False
    backend: str = "auto"
    #: ``--local N``: N ranks on this machine over loopback, rank 0 in this process
    local: int | None = None
    #: ``--report PATH``: the HTML report rank 0 writes
    report_path: str | None = None

    def __post_init__(self) -> None:
        for flag, value, (low, high) in (
                ("--timeout", self.stage_timeout, LIMITS["stage_timeout"]),
                ("--join-timeout", self.join_timeout, LIMITS["join_timeout"]),
                ("connect_timeout", self.connect_timeout, LIMITS["connect_timeout"]),
                ("--bw-seconds", self.bw_seconds, LIMITS["bw_seconds"])):
            if not low <= value <= high:  # nan fails too (click's FloatRange lets it through)
                raise ConfigError(f"{flag} {value:g} is outside {low:g}..{high:g} seconds",
                                  f"pass {flag} within {low:g}..{high:g}")

    def matrix_on(self, world: int) -> bool:
        return self.matrix if self.matrix is not None else world <= MATRIX_AUTO_MAX

    def for_worker(self) -> CheckOptions:
        """What a ``--local`` worker runs: one rank, rank 0's matrix decision, no report."""
        world = self.local or 1
        return replace(self, matrix=self.matrix_on(world), local=None, report_path=None)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> CheckOptions:
        return cls(**json.loads(text))

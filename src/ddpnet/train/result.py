"""How one process's part of a ``ddpnet train`` run ended (a pure record, no torch): what
``run`` returns and ``report`` prints. Its own module so that the two import it, not each
other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ddpnet.train.summary import Summary


@dataclass(frozen=True)
class TrainResult:
    """How this process's part of a run ended. Rank 0 of a run carries the summary (and
    every rank's telemetry with ``--monitor``); other ranks and the ``--local`` parent carry
    only the exit code. ``rank`` is None in the ``--local`` parent (it ran no group). A run
    stopped by a preemption signal carries ``preempted`` on rank 0 instead of a summary."""

    exit_code: int
    rank: int | None = None
    summary: Summary | None = None
    telemetry: tuple[dict[str, Any], ...] | None = None
    preempted: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        if self.preempted is not None:
            return {"preempted": self.preempted}
        out = self.summary.to_dict() if self.summary is not None else {}
        if self.telemetry is not None:
            out["telemetry"] = list(self.telemetry)
        return out

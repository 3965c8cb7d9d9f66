"""What ``ddpnet monitor`` returns (:mod:`ddpnet.monitor.run`) and ``--json`` prints or
:mod:`ddpnet.monitor.render` shows: its own module, so neither of those imports the other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ddpnet.monitor.rates import Sample


@dataclass(frozen=True)
class MonitorResult:
    """The samples taken, the interfaces shown and why, whether GPUs were sampled."""

    samples: tuple[Sample, ...]
    names: tuple[str, ...]
    source: str
    reason: str
    gpu: bool
    once: bool
    exit_code: int = 0

    @property
    def title(self) -> str:
        return f"ddpnet monitor ({self.reason})"

    def to_dict(self) -> dict[str, Any]:
        """``--once``: the sample itself plus ``selection``; else every sample."""
        meta = {"iface": {"names": list(self.names), "source": self.source,
                          "reason": self.reason}, "gpu": self.gpu}
        if self.once and self.samples:
            return {**self.samples[0].to_dict(), "selection": meta}
        return {"selection": meta, "samples": [s.to_dict() for s in self.samples]}

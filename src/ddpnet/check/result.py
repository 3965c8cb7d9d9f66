"""What one ``ddpnet check`` process ends with: rank 0's report, another rank's one line, or
this rank's own failure to join; with ``--local``, the workers' lines too."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ddpnet.check.causes import join_cause
from ddpnet.check.context import RankOutcome
from ddpnet.check.report import CheckReport
from ddpnet.errors import RendezvousError
from ddpnet.exitcodes import ExitCode
from ddpnet.local import RankExit


@dataclass(frozen=True)
class WorkerLine:
    """A ``--local`` worker's exit code and its one line."""

    rank: int
    code: int
    line: str

    @classmethod
    def of(cls, done: RankExit) -> WorkerLine:
        """The ``line`` of the worker's JSON, else the last line it wrote on stderr (pure)."""
        try:
            data = json.loads(done.stdout)
            line = str(data.get("line")) if isinstance(data, dict) else ""
        except ValueError:
            line = ""
        if not line:
            line = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return cls(done.rank, done.code, line)


@dataclass(frozen=True)
class CheckResult:
    rank: int
    host: str
    outcome: RankOutcome | None = None
    #: this rank could not even join (its own cause, named by itself)
    failure: RendezvousError | None = None
    workers: tuple[WorkerLine, ...] = ()
    report_path: str | None = None

    def __post_init__(self) -> None:
        if (self.outcome is None) == (self.failure is None):
            raise ValueError("a check result has either an outcome or a failure")

    @property
    def report(self) -> CheckReport | None:
        return self.outcome.report if self.outcome is not None else None

    @property
    def passed(self) -> bool:
        o = self.outcome
        if o is None:
            return False
        return o.report.verdict == "pass" if o.report is not None else o.ok

    @property
    def exit_code(self) -> int:
        if self.failure is not None:  # its own code: a bad address is bad input (2)
            return int(self.failure.exit_code)
        return int(ExitCode.OK if self.passed else ExitCode.CHECK_FAILED)

    def to_dict(self) -> dict[str, Any]:
        o = self.outcome
        if o is None:
            assert self.failure is not None  # __post_init__
            return failure_dict(self.failure, self.rank, self.host)
        if o.report is not None:
            return o.report.to_dict()
        return {"rank": o.rank, "host": o.host, "ok": o.ok, "line": o.line}


def failure_dict(exc: RendezvousError, rank: int, host: str) -> dict[str, Any]:
    """A rank that could not join, as JSON: its own cause (pure)."""
    return {"verdict": "fail", "rank": rank, "host": host,
            "causes": [join_cause(exc.cause, exc.message, exc.hint, host, rank,
                                  exc.detail).to_dict()],
            "line": f"rank {rank} {host}: {exc.cause}: {exc.message}"}

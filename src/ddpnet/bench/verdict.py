"""What a ``ddpnet bench`` run ends with (pure): the problems a result has against the
thresholds the user set, the exit code, and how a ``--local N`` run of ranks ended."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ddpnet.bench.config import BenchConfig
from ddpnet.bench.result import BenchResult
from ddpnet.errors import CheckFailed
from ddpnet.exitcodes import ExitCode
from ddpnet.local import LocalResult, RankExit


@dataclass(frozen=True)
class Problem:
    """One failed threshold: an error line and its hint."""

    message: str
    hint: str


@dataclass(frozen=True)
class BenchOutcome:
    """What ``ddpnet.bench.command.run`` returns. ``result`` is set only where this process
    reports (rank 0 of a run; never the parent of ``--local N``, whose rank 0 printed);
    ``problems`` are printed as errors with it; ``notes`` are lines for stderr (a failing
    rank's first error line)."""

    exit_code: int
    result: BenchResult | None = None
    problems: tuple[Problem, ...] = ()
    notes: tuple[str, ...] = ()
    #: the head and rows were printed as the sweep went: only the tail is left to print
    streamed: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The ``ddpnet bench --json`` object (empty where this process does not report)."""
        return self.result.to_dict() if self.result is not None else {}


def _wrong_data(result: BenchResult) -> Problem:
    bad = sorted({r.collective for r in result.rows if r.wrong})
    return Problem(f"--check: {result.wrong} wrong element(s) in {', '.join(bad)} "
                   f"({result.backend}, {result.world_size} ranks)",
                   "a collective returned wrong data: check the backend build and the "
                   "nodes' torch/NCCL versions (ddpnet doctor)")


def _too_slow(result: BenchResult, min_busbw: float) -> Problem | None:
    low = result.below(min_busbw)
    if not low:
        return None
    worst = min(low, key=lambda r: r.busbw_gbps)
    return Problem(f"busbw below --min-busbw {min_busbw:g} Gb/s: "
                   + ", ".join(f"{r.collective} {r.busbw_gbps:.3f}" for r in low),
                   f"{worst.collective} peaks at {worst.busbw_gbps:.3f} Gb/s; compare with "
                   "the link line above, then see ddpnet doctor / ddpnet tune")


def problems(result: BenchResult, cfg: BenchConfig) -> tuple[Problem, ...]:
    """Wrong elements under ``--check``, collectives whose best busbw is under
    ``--min-busbw``; the same on every rank (the result is)."""
    found = []
    if cfg.check and result.wrong:
        found.append(_wrong_data(result))
    if cfg.min_busbw_gbps is not None:
        slow = _too_slow(result, cfg.min_busbw_gbps)
        if slow is not None:
            found.append(slow)
    return tuple(found)


def exit_code(found: tuple[Problem, ...]) -> int:
    return int(ExitCode.CHECK_FAILED if found else ExitCode.OK)


def first_error_line(text: str) -> str:
    """The ``ddpnet: error:`` line of a rank's stderr, else its first non-blank line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return next((line for line in lines if line.startswith("ddpnet: error:")),
                lines[0] if lines else "")


def _rank0_quiet(exits: tuple[RankExit, ...]) -> bool:
    """Rank 0 succeeded or was stopped by us: it printed no error of its own."""
    return all(e.code == 0 or e.stopped for e in exits if e.rank == 0)


def local_outcome(ended: LocalResult, world: int, timeout: float) -> BenchOutcome:
    """How ``--local N`` ended: the ranks' code; a failing rank's first error line when rank
    0 did not report one; a CheckFailed when the ranks ran past ``--timeout``."""
    if ended.timed_out:
        raise CheckFailed(f"--local {world}: ranks did not finish within {timeout:g}s",
                          "raise --timeout, or shrink --max-bytes/--iters")
    failed = ended.first_failure
    notes: tuple[str, ...] = ()
    if not ended.signals and failed is not None and _rank0_quiet(ended.exits):
        line = first_error_line(failed.stderr)
        notes = (f"rank {failed.rank}: {line}",) if line else ()
    return BenchOutcome(ended.code, notes=notes)

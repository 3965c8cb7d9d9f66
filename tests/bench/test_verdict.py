"""The verdict (pure): thresholds as problems and an exit code, and how a --local run of ranks
ends (a failing rank's first error line, signals, a timeout as CheckFailed)."""

from __future__ import annotations

import pytest

from ddpnet.bench.config import BenchConfig
from ddpnet.bench.result import BenchResult, LinkRate, make_row
from ddpnet.bench.verdict import (
    BenchOutcome,
    exit_code,
    first_error_line,
    local_outcome,
    problems,
)
from ddpnet.errors import CheckFailed
from ddpnet.local import LocalResult, RankExit


def result(wrong: int | None = 0) -> BenchResult:
    rows = (
        make_row("all_reduce", 1 << 20, 1 << 18, "float32", "sum", True, [0.01], 1.0, 1.0, 0),
        make_row("broadcast", 1 << 20, 1 << 18, "float32", None, True, [0.02], 1.0, 1.0,
                 wrong),
    )
    return BenchResult("gloo", 2, "cpu", LinkRate(1.0, "tcp"), rows)


def test_no_thresholds_no_problems() -> None:
    assert problems(result(wrong=5), BenchConfig()) == ()  # wrong counts only with --check
    assert exit_code(()) == 0


def test_check_reports_wrong_elements() -> None:
    [found] = problems(result(wrong=5), BenchConfig(check=True))
    assert found.message == "--check: 5 wrong element(s) in broadcast (gloo, 2 ranks)"
    assert "ddpnet doctor" in found.hint
    assert exit_code((found,)) == 1
    assert problems(result(wrong=0), BenchConfig(check=True)) == ()


def test_min_busbw_names_the_slow_collectives() -> None:
    # all_reduce: 1 MiB in 10 ms = 0.839 Gb/s; broadcast in 20 ms = 0.419 Gb/s
    [found] = problems(result(), BenchConfig(min_busbw_gbps=0.5))
    assert found.message == "busbw below --min-busbw 0.5 Gb/s: broadcast 0.419"
    assert found.hint.startswith("broadcast peaks at 0.419 Gb/s")
    assert problems(result(), BenchConfig(min_busbw_gbps=0.4)) == ()
    both = problems(result(wrong=1), BenchConfig(check=True, min_busbw_gbps=10))
    assert [p.message.split(":")[0] for p in both] == ["--check", "busbw below --min-busbw 10 Gb/s"]
    assert "all_reduce 0.839, broadcast 0.419" in both[1].message


def test_outcome_to_dict_only_where_it_reports() -> None:
    assert BenchOutcome(1).to_dict() == {}
    assert BenchOutcome(0, result()).to_dict() == result().to_dict()


def test_first_error_line() -> None:
    text = "[W warning from gloo]\nddpnet: error: rank 1 failed\nhint: fix it\n"
    assert first_error_line(text) == "ddpnet: error: rank 1 failed"
    assert first_error_line("\n  Traceback (most recent call last):\n  x\n") == (
        "Traceback (most recent call last):")
    assert first_error_line("") == ""


def ended(*exits: RankExit, first: int | None = None, timed_out: bool = False,
          signals: tuple[int, ...] = ()) -> LocalResult:
    failure = next((e for e in exits if e.rank == first), None)
    return LocalResult(exits, failure, timed_out, signals)


def test_local_all_ranks_ok() -> None:
    outcome = local_outcome(ended(RankExit(0, 0, False), RankExit(1, 0, False)), 2, 60)
    assert outcome == BenchOutcome(0)


def test_local_failing_rank_line_when_rank0_was_stopped() -> None:
    run = ended(RankExit(0, 143, True), RankExit(1, 1, False, stderr="ddpnet: error: no peer\n"
                                                "hint: h\n"), first=1)
    outcome = local_outcome(run, 2, 60)
    assert outcome.exit_code == 1 and outcome.result is None
    assert outcome.notes == ("rank 1: ddpnet: error: no peer",)


def test_local_rank0_failed_and_printed_its_own_error() -> None:
    run = ended(RankExit(0, 1, False), RankExit(1, 1, False, stderr="ddpnet: error: x\n"),
                first=0)
    assert local_outcome(run, 2, 60) == BenchOutcome(1)
    later = ended(RankExit(0, 1, False), RankExit(1, 2, False, stderr="boom\n"), first=1)
    assert local_outcome(later, 2, 60) == BenchOutcome(2)  # rank 0 reported for itself


def test_local_signal_is_128_plus_n_without_notes() -> None:
    run = ended(RankExit(0, 143, False), RankExit(1, 143, False, stderr="x\n"), first=0,
                signals=(15,))
    assert local_outcome(run, 2, 60) == BenchOutcome(143)


def test_local_timeout_is_check_failed() -> None:
    run = ended(RankExit(0, 143, True), RankExit(1, 143, True), timed_out=True)
    with pytest.raises(CheckFailed) as err:
        local_outcome(run, 2, 2.5)
    assert err.value.message == "--local 2: ranks did not finish within 2.5s"
    assert "raise --timeout" in err.value.hint

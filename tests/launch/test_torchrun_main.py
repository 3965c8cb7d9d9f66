"""The job's exit code from torchrun's failures: the worst rank is the first to fail, a rank's
own code before a signal torchrun sent at the same second, then the lowest rank."""

from __future__ import annotations

import sys

import pytest

from ddpnet.launch.torchrun_main import Failure, JoinedLines, summary, worst


@pytest.mark.parametrize("failures,rank,code", [
    ([Failure(1, 7, 100.0)], 1, 7),
    ([Failure(0, -15, 100.0), Failure(1, 7, 100.0)], 1, 7),  # torchrun's SIGTERM: not the cause
    ([Failure(3, 2, 99.0), Failure(0, 5, 100.0)], 3, 2),  # first to fail
    ([Failure(2, 9, 100.0), Failure(1, 4, 100.0)], 1, 4),  # same second: lowest rank
    ([Failure(0, -9, 100.0)], 0, 137),  # killed by SIGKILL (the OOM killer): 128+9
])
def test_worst_rank_and_its_code(failures: list[Failure], rank: int, code: int) -> None:
    first = worst(failures)
    assert (first.rank, first.code) == (rank, code)


def test_summary_is_one_line_naming_the_rank() -> None:
    assert summary([Failure(1, 7, 1.0)]) == "ddpnet: rank 1 exited 7; launch exits 7"
    text = summary([Failure(0, -9, 1.0), Failure(1, -15, 2.0), Failure(2, 1, 2.0)])
    assert text == ("ddpnet: rank 0 was killed by SIGKILL (exit 137) (2 other ranks failed "
                    "too); launch exits 137")


def test_joined_lines_never_put_two_ranks_pieces_on_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    """torchrun's tee hands on half lines (``header + readline()``); they are joined per
    rank and each whole line is relayed once under its prefix."""
    joined = JoinedLines(sys.stdout, stderr=False)
    joined.write("\x1erank 0\x1f<r0")
    joined.write("\x1erank 1\x1f<r1")
    joined.write("\x1erank 1\x1f 0>\n")
    joined.write("torchrun's own line\n")
    joined.write("\x1erank 0\x1f 0>\nsecond\nthi")
    joined.close()
    assert capsys.readouterr().out.splitlines() == [
        "[rank 1] <r1 0>", "torchrun's own line", "[rank 0] <r0 0>", "[rank 0] second",
        "[rank 0] thi"]

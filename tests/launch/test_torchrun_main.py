"""The job's exit code from torchrun's failures: the worst rank is the first to fail, a rank's
own code before a signal torchrun sent at the same second, then the lowest rank."""

from __future__ import annotations

import pytest

from ddpnet.launch.torchrun_main import Failure, summary, worst


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

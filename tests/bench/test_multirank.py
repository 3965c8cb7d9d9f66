"""Every collective on real gloo ranks (2 and 4 spawned processes) with the result check:
wrong == 0, and a deliberately corrupted expected value is caught."""

from __future__ import annotations

from typing import Any

import pytest

from ddpnet.bench import BenchConfig, BenchResult
from ddpnet.bench.config import ALL_COLLECTIVES
from tests.bench import corrupt
from tests.bench.spawn import run_ranks

pytestmark = pytest.mark.slow

#: sizes that are not multiples of the world size exercise the count rounding
SMALL = {"min_bytes": 1000, "max_bytes": 64000, "factor": 64, "iters": 2, "warmup": 1,
         "check": True, "baseline": "tcp", "baseline_seconds": 0.5}


@pytest.fixture(scope="module")
def four_ranks() -> list[dict[str, Any]]:
    return run_ranks(4, [
        ("all", BenchConfig(**SMALL), None),  # type: ignore[arg-type]
        ("fp16_max", BenchConfig(**{**SMALL, "dtype": "float16", "op": "max",  # type: ignore[arg-type]
                                    "baseline": "none", "max_bytes": 8000}), None),
        ("bf16_prod", BenchConfig(**{**SMALL, "dtype": "bfloat16", "op": "prod",  # type: ignore[arg-type]
                                     "baseline": "none", "max_bytes": 8000,
                                     "collectives": ("all_reduce", "reduce_scatter",
                                                     "reduce")}), None),
        ("corrupt", BenchConfig(**{**SMALL, "collectives": ("all_reduce",),  # type: ignore[arg-type]
                                   "baseline": "none", "max_bytes": 8000}),
         corrupt.registry),
    ])


def _rows_ok(result: BenchResult, world: int) -> None:
    assert result.world_size == world and result.backend == "gloo"
    for row in result.rows:
        assert row.wrong == 0, row
        assert row.time_us > 0 and row.min_us <= row.time_us <= row.max_us
        assert row.busbw_gbps > 0


def test_every_collective_correct_on_four_ranks(four_ranks: list[dict[str, Any]]) -> None:
    result: BenchResult = four_ranks[0]["all"]
    _rows_ok(result, 4)
    assert result.skipped == ()
    seen = {(r.collective, r.inplace) for r in result.rows}
    assert seen == {("all_reduce", True), ("all_gather", False), ("all_gather", True),
                    ("reduce_scatter", False), ("reduce_scatter", True),
                    ("broadcast", True), ("reduce", True), ("all_to_all", False),
                    ("send_recv", False)}
    assert {r.collective for r in result.rows} == set(ALL_COLLECTIVES)
    gathers = [r for r in result.rows if r.collective == "all_gather"]
    # 1000 B = 250 floats, rounded down to 62 per rank: 992 B gathered
    assert {r.bytes for r in gathers} == {992, 64000}
    # the link baseline ran in the same run, and every row carries its efficiency
    assert result.link.method == "tcp" and result.link.gbps
    assert all(r.link_efficiency is not None for r in result.rows)


def test_all_ranks_agree(four_ranks: list[dict[str, Any]]) -> None:
    first = four_ranks[0]["all"].to_dict()
    for rank in four_ranks[1:]:
        assert rank["all"].to_dict() == first


def test_low_precision_and_other_ops(four_ranks: list[dict[str, Any]]) -> None:
    for name in ("fp16_max", "bf16_prod"):
        result = four_ranks[0][name]
        _rows_ok(result, 4)
        assert result.rows and result.link.method == "none"
    assert {r.op for r in four_ranks[0]["bf16_prod"].rows} == {"prod"}
    # ops apply to reductions only
    assert {r.op for r in four_ranks[0]["fp16_max"].rows
            if r.collective in ("broadcast", "all_gather")} == {None}


def test_corrupted_expected_value_is_caught(four_ranks: list[dict[str, Any]]) -> None:
    rows = four_ranks[0]["corrupt"].rows
    assert rows
    # element 0 is wrong on each of the 4 ranks, for every size
    assert all(r.wrong == 4 for r in rows), [r.wrong for r in rows]


def test_two_ranks_every_collective() -> None:
    [result0, result1] = [r["all"] for r in run_ranks(2, [
        ("all", BenchConfig(**{**SMALL, "baseline": "none", "mode": "outofplace"}), None),  # type: ignore[arg-type]
    ])]
    _rows_ok(result0, 2)
    assert result0.to_dict() == result1.to_dict()
    # out-of-place only: in-place-only collectives are skipped with the reason
    skipped = {s.collective: s.reason for s in result0.skipped}
    assert set(skipped) == {"all_reduce", "broadcast", "reduce"}
    assert "no outofplace variant" in skipped["all_reduce"]
    assert {r.inplace for r in result0.rows} == {False}

"""ddpnet's PowerSGD: the bucket layout (pure), and the hook on two real gloo ranks checked
step by step against the algorithm written out plainly (``powersgd_worker.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ddpnet.train.comm import allreduce_bytes, powersgd_impl
from ddpnet.train.powersgd import MatrixSlot, VectorSlot, plan_bucket
from tests.conftest import clean_environ

WORKER = str(Path(__file__).with_name("powersgd_worker.py"))
ROOT = str(Path(__file__).resolve().parents[2])


def test_layout_packs_factors_then_uncompressed_tensors() -> None:
    layout = plan_bucket([(100, 50), (50,), (3, 400), (8, 2, 5, 5), (20, 20)], rank=4)
    # (3, 400): rank clipped to 3, (403)*3*2 > 1200, sent whole; (20, 20): 40*4*2 = 320 < 400
    assert layout.matrices == (
        MatrixSlot(0, 100, 50, 4, p_offset=0, q_offset=0, e_offset=0),
        MatrixSlot(4, 20, 20, 4, p_offset=400, q_offset=200, e_offset=5000),
    )
    assert layout.vectors == (VectorSlot(1, 480, 50), VectorSlot(2, 530, 1200),
                              VectorSlot(3, 1730, 400))
    assert (layout.p_numel, layout.q_numel, layout.e_numel) == (2130, 280, 5400)
    assert layout.numel_sent == 2410


def test_a_bucket_of_matrices_costs_what_the_summary_reports() -> None:
    shapes = [(2500, 2500), (2500,), (10, 2500), (2500, 64)]
    per_bucket = 4 * plan_bucket(shapes, 4).numel_sent
    assert allreduce_bytes(shapes, "powersgd", powersgd_rank=4) == per_bucket


def test_rank_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        plan_bucket([(4, 4)], 0)


def test_gloo_runs_ours_nccl_runs_torchs() -> None:
    assert powersgd_impl("gloo") == "ddpnet"
    assert powersgd_impl("nccl") == "torch"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, float]]:
    store = tmp_path_factory.mktemp("psgd") / "store"
    procs = [subprocess.Popen([sys.executable, WORKER, str(rank), str(store)],
                              env=clean_environ({"PYTHONPATH": ROOT}), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for rank in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    got: dict[str, dict[str, float]] = json.loads(outs[0][0])
    return got


def test_low_rank_steps_match_the_algorithm(report: dict[str, dict[str, float]]) -> None:
    r = report["low_rank"]
    assert r["compressed"] == 3 and r["iter"] == 4
    assert r["vs_reference"] < 1e-4
    assert r["vs_plain_mean"] > 0.1  # it really compressed: not the plain average


def test_error_feedback_loses_nothing(report: dict[str, dict[str, float]]) -> None:
    assert report["low_rank"]["feedback_gap"] < 1e-4


def test_full_rank_is_exact(report: dict[str, dict[str, float]]) -> None:
    r = report["full_rank"]
    assert r["compressed"] == 4
    # exact up to rounding, which the random Q's conditioning amplifies (values are ~N(0, 1))
    assert r["vs_reference"] < 1e-4 and r["vs_plain_mean"] < 1e-3


def test_warm_up_steps_are_plain_averages(report: dict[str, dict[str, float]]) -> None:
    r = report["warm_up"]
    assert r["iter"] == 4 and r["vs_reference"] < 1e-4
    assert r["vs_plain_mean"] > 0.1  # steps 3 and 4 compressed

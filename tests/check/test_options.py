"""CheckOptions: what a --local worker is handed."""

from __future__ import annotations

from ddpnet.check.options import MATRIX_AUTO_MAX, CheckOptions


def test_json_round_trip() -> None:
    opts = CheckOptions(matrix=False, bench=True, stage_timeout=5.0, local=3,
                        report_path="/tmp/r.html")
    assert CheckOptions.from_json(opts.to_json()) == opts


def test_worker_gets_rank_0s_matrix_decision_and_no_report() -> None:
    worker = CheckOptions(local=4, report_path="r.html", bw_seconds=0.3).for_worker()
    assert worker.matrix is True and worker.local is None and worker.report_path is None
    assert worker.bw_seconds == 0.3
    big = CheckOptions(local=MATRIX_AUTO_MAX + 1).for_worker()
    assert big.matrix is False
    assert CheckOptions(local=2, matrix=False).for_worker().matrix is False

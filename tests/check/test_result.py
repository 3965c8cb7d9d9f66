"""CheckResult: exit codes, the three JSON shapes, and the --local workers' lines."""

from __future__ import annotations

import json

import pytest

from ddpnet.check.causes import Cause
from ddpnet.check.context import RankOutcome
from ddpnet.check.report import CheckReport
from ddpnet.check.result import CheckResult, WorkerLine
from ddpnet.errors import RendezvousError
from ddpnet.local import RankExit


def test_worker_line_from_json_or_the_last_stderr_line() -> None:
    out = json.dumps({"rank": 1, "line": "rank 1 box: ok (cluster verdict pass)"})
    assert WorkerLine.of(RankExit(1, 0, False, out, "noise\n")) == WorkerLine(
        1, 0, "rank 1 box: ok (cluster verdict pass)")
    crashed = RankExit(2, 1, False, "", "Traceback ...\nImportError: no torch\n")
    assert WorkerLine.of(crashed).line == "ImportError: no torch"
    assert WorkerLine.of(RankExit(3, 143, True, "[1, 2]", "")).line == "no output"


def test_a_failure_to_join_is_its_own_cause() -> None:
    exc = RendezvousError("master-port-refused", "nothing listens", "start rank 0",
                          host="n1", rank=1)
    result = CheckResult(1, "n1", failure=exc)
    assert result.exit_code == 1 and result.report is None
    data = result.to_dict()
    assert data["verdict"] == "fail" and data["line"] == (
        "rank 1 n1: master-port-refused: nothing listens")
    (cause,) = data["causes"]
    assert {k: cause[k] for k in ("id", "hosts", "ranks", "detail", "fix")} == {
        "id": "master-port-refused", "hosts": ["n1"], "ranks": [1],
        "detail": "nothing listens", "fix": "start rank 0"}
    # the same evidence fields as every cause of a report
    assert cause["evidence"] == ["rank 1 on n1: nothing listens"]
    assert cause["see_for_yourself"] == "nc -zv -w 3 $MASTER_ADDR $MASTER_PORT"


def test_worker_and_report_shapes_and_codes() -> None:
    ok = CheckResult(1, "n1", RankOutcome(1, "n1", True, "rank 1 n1: ok"))
    assert ok.exit_code == 0
    assert ok.to_dict() == {"rank": 1, "host": "n1", "ok": True, "line": "rank 1 n1: ok"}
    assert CheckResult(1, "n1", RankOutcome(1, "n1", False, "x")).exit_code == 1
    failing = CheckReport(2, "n0:29500", (Cause("mtu-mismatch", "d", "f", ("n1",), (1,)),))
    result = CheckResult(0, "n0", RankOutcome(0, "n0", False, "x", failing))
    assert result.exit_code == 1 and result.to_dict() == failing.to_dict()
    passing = CheckReport(2, "n0:29500", ())
    assert CheckResult(0, "n0", RankOutcome(0, "n0", True, "x", passing)).exit_code == 0


def test_exactly_one_of_outcome_and_failure() -> None:
    with pytest.raises(ValueError):
        CheckResult(0, "n0")

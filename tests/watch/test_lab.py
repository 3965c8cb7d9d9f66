"""The watch across real network namespaces: three lab nodes, one rank each (one shared lab);
a fault on rank 2 is named with its node's hostname while every rank exits."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddpnet.lab import Lab
from tests.lab_util import fresh_lab, requires_netns
from tests.watch.endings import ended_by

pytestmark = requires_netns

SCENARIO = str(Path(__file__).with_name("scenario.py"))
SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with fresh_lab("wa", fork=True, nodes=3) as lab:
        yield lab


def _run(lab: Lab, mode: str, tmp_path: Path) -> list[tuple[int, str]]:
    results = lab.run([sys.executable, SCENARIO, mode], timeout=180,
                      env={"PYTHONPATH": SRC, "WATCH_TIMEOUT": "5", "FAULT_RANK": "2",
                           "FAULT_STEP": "10", "DDPNET_WATCH_DIR": str(tmp_path),
                           "OMP_NUM_THREADS": "1"})
    assert (tmp_path / "report.json").exists(), [r.stderr[-800:] for r in results]
    return [(r.returncode, r.stderr) for r in results]


def test_a_late_rank_is_named_with_its_node(lab: Lab, tmp_path: Path) -> None:
    results = _run(lab, "sleepdata", tmp_path)
    report, late = results[0][1], lab.nodes[2].hostname
    assert "ddpnet watch: rank-not-arriving" in report, report[-3000:]
    assert f"rank 2 ({late}) has not arrived: in 'data'" in report
    assert [code for code, _ in results] == [4, 4, 4], [err[-500:] for _, err in results]


def test_a_killed_rank_is_named_gone_with_its_node(lab: Lab, tmp_path: Path) -> None:
    results = _run(lab, "kill", tmp_path)
    report, gone = results[0][1], lab.nodes[2].hostname
    assert "ddpnet watch: rank-gone" in report and f"rank 2 ({gone}) is gone" in report, \
        report[-3000:]
    # 4: the verdict, also where gloo saw the peer go first and raised into the loop (the
    # exception hook waits for the verdict, as in tests/watch/test_live.py)
    assert [code for code, _ in results][:2] == [4, 4], [err[-500:] for _, err in results]
    assert results[2][0] == -9


def test_a_skipped_collective_is_named_with_the_call_site(lab: Lab, tmp_path: Path) -> None:
    results = _run(lab, "skip", tmp_path)
    report = results[0][1]
    assert "ddpnet watch: collective-mismatch" in report, report[-3000:]
    assert "scenario.py:" in report and lab.nodes[2].hostname in report, report[-3000:]
    # every rank ended, each by the verdict (4, also after gloo raised first) or by gloo's
    # abort of the rank that received the other collective's bytes (-6), saying which
    for rank, (code, err) in enumerate(results):
        ended_by(rank, code, err, "collective-mismatch")

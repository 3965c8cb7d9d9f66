"""The watch across real network namespaces: three lab nodes, one rank each; rank 2 sleeps in
its data loader and is named with its node's hostname while every rank exits 4."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.lab_util import fresh_lab, requires_netns

pytestmark = requires_netns

SCENARIO = str(Path(__file__).with_name("scenario.py"))


def test_a_late_rank_is_named_with_its_node(tmp_path: Path) -> None:
    src = str(Path(__file__).resolve().parents[2] / "src")
    with fresh_lab("wa", nodes=3) as lab:
        results = lab.run([sys.executable, SCENARIO, "sleepdata"], timeout=180,
                          env={"PYTHONPATH": src, "WATCH_TIMEOUT": "5", "FAULT_RANK": "2",
                               "FAULT_STEP": "10", "DDPNET_WATCH_DIR": str(tmp_path),
                               "OMP_NUM_THREADS": "1"})
        late = lab.nodes[2].hostname
    report = results[0].stderr
    assert "ddpnet watch: rank-not-arriving" in report, report[-3000:]
    assert f"rank 2 ({late}) has not arrived: in 'data'" in report
    assert [r.returncode for r in results] == [4, 4, 4], [r.stderr[-500:] for r in results]
    assert (tmp_path / "report.json").exists()

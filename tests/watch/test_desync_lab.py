"""Collectives that part without a hang, across real network namespaces: three lab nodes, one
rank each (one shared lab), default watch settings. Rank 2 skips a same-sized all_reduce, calls
one with another dtype, or makes one more after the loop: named with its rank, host and call
site (and the step) within 15 s of the fault, and every rank exits 4."""

from __future__ import annotations

import json
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
#: the issue's bound from the fault to the verdict
NAMED_WITHIN_S = 15.0


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with fresh_lab("wd", fork=True, nodes=3) as lab:
        yield lab


def _run(lab: Lab, mode: str, tmp_path: Path,
         steps: int = 300) -> tuple[list[tuple[int, str]], dict[str, object]]:
    """The scenario on every node at default watch settings; each node's (code, stderr) and
    the report, after checking it came within NAMED_WITHIN_S of the fault."""
    results = lab.run([sys.executable, SCENARIO, mode], timeout=150,
                      env={"PYTHONPATH": SRC, "WATCH_TIMEOUT": "", "FAULT_RANK": "2",
                           "FAULT_STEP": "10", "STEPS": str(steps), "DDPNET_WATCH_DIR": str(tmp_path),
                           "OMP_NUM_THREADS": "1"})
    path = tmp_path / "report.json"
    assert path.exists(), [r.stderr[-800:] for r in results]
    fault = next(float(line.split()[2]) for r in results for line in r.stdout.splitlines()
                 if line.startswith("fault "))
    assert path.stat().st_mtime - fault < NAMED_WITHIN_S, results[0].stderr[-2000:]
    return [(r.returncode, r.stderr) for r in results], json.loads(path.read_text())


def test_a_skipped_collective_is_named_while_nothing_hangs(lab: Lab, tmp_path: Path) -> None:
    """Rank 2 skips its all_reduce of 68 floats in step 10: its next one (DDP's bucket, also
    68 floats) pairs with the others' metric and nothing hangs or aborts."""
    results, report = _run(lab, "desync", tmp_path)
    text, host = results[0][1], lab.nodes[2].hostname
    assert "ddpnet watch: collective-mismatch (collectives parted" in text, text[-3000:]
    assert f"rank 2 ({host}" in text and "skipped 1 collective(s) in step 10" in text
    assert "all_reduce float32[68] at scenario.py:" in text
    assert report["diagnosis"]["ranks"] == [2]  # type: ignore[index]
    assert [code for code, _ in results] == [4, 4, 4], [err[-500:] for _, err in results]


def test_an_extra_collective_at_the_end_is_named_and_every_rank_exits(
        lab: Lab, tmp_path: Path) -> None:
    """Rank 2 calls one more all_reduce after the loop: ranks 0 and 1 said goodbye, the hub
    holds their goodbye and names rank 2; all three exit 4."""
    # 300 steps: the heartbeat once sent a state per ack (a storm that backlogged the hub),
    # so the longer the loop, the later the goodbyes were read (~21 s after 300 steps)
    results, _report = _run(lab, "extra", tmp_path)
    text, host = results[0][1], lab.nodes[2].hostname
    assert "an extra collective at the end: rank 2 (" + host in text, text[-3000:]
    assert "at scenario.py:" in text and "finished with seq" in text
    assert [code for code, _ in results] == [4, 4, 4], [err[-500:] for _, err in results]


def test_another_dtype_is_named_with_both_calls(lab: Lab, tmp_path: Path) -> None:
    """Rank 2 calls all_reduce on float32[2] where the others reduce float64[1] (8 bytes
    each): named with both calls and rank 2's host; every rank ends (gloo may abort the rank
    that receives the other layout: -6)."""
    results, report = _run(lab, "dtype", tmp_path)
    text, host = results[0][1], lab.nodes[2].hostname
    assert "ddpnet watch: collective-mismatch" in text, text[-3000:]
    assert "float32[2]" in text and "float64[1]" in text and host in text
    assert 2 in report["diagnosis"]["ranks"]  # type: ignore[index]
    for rank, (code, err) in enumerate(results):
        ended_by(rank, code, err, "collective-mismatch")

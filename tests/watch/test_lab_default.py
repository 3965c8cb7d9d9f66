"""Hangs named in seconds at default settings, and every rank out (issue 27): three lab nodes
run the scenario's DDP loop on ``ddpnet.init()`` with no ``watch_timeout`` (one shared lab).

Each fault is named with its rank and host within a fixed bound (``lab_watch.BOUND_S``; a
20 ms step learns the 5 s floor, ~6 s to a verdict quiet), every live rank exits 4 (a stopped one right after it is resumed, the
cut-off one by itself), and a healthy run whose rank 0 spends 20 s in a phase-marked
checkpoint raises no alarm. Before issue 27 a stopped rank was named after 69 s, a rank stuck
in its data loader after 61 s, and a cut-off rank never exited."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ddpnet.diagnose.run import from_dumps
from ddpnet.lab import Lab
from tests.lab_util import fresh_lab, requires_netns
from tests.watch.lab_watch import BOUND_S, Watcher, assert_named_in_time, report

pytestmark = requires_netns

SCENARIO = str(Path(__file__).with_name("scenario.py"))
SRC = str(Path(__file__).resolve().parents[2] / "src")
#: the fault comes once the job has run a few seconds (the first steps have their allowance)
FAULT_STEP = "150"
_ports = iter(range(29611, 29700, 3))


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with fresh_lab("wq", fork=True, nodes=3) as lab:
        yield lab


def run(lab: Lab, mode: str, directory: Path, watcher: Watcher,
        **env: str) -> list[Any]:
    results = lab.run([sys.executable, SCENARIO, mode], timeout=240, master_port=next(_ports),
                      env={"PYTHONPATH": SRC, "WATCH_TIMEOUT": "", "FAULT_RANK": "2",
                           "FAULT_STEP": FAULT_STEP, "STEPS": "100000",
                           "DDPNET_WATCH_DIR": str(directory),
                           "OMP_NUM_THREADS": "1", **env},
                      on_line=watcher.on_line)
    return list(results)


def codes(results: list[Any]) -> list[int]:
    return [r.returncode for r in results]


def test_a_stopped_rank_is_named_in_seconds_and_exits_once_resumed(lab: Lab,
                                                                   tmp_path: Path) -> None:
    watcher = Watcher(lab)
    timer = threading.Timer(90, watcher.resume_if_never_named)
    timer.start()
    try:
        results = run(lab, "stop", tmp_path, watcher)
    finally:
        timer.cancel()
    text, host = results[0].stderr, lab.nodes[2].hostname
    assert "ddpnet watch: rank-gone" in text and f"rank 2 ({host}) is gone" in text, \
        watcher.lines[-40:]
    assert "process stopped" in text, text[-3000:]
    assert_named_in_time(tmp_path, watcher, "stopped")
    assert codes(results) == [4, 4, 4], [r.stderr[-800:] for r in results]
    assert watcher.resumed is not None and 2 in watcher.exits, \
        "\n".join([*watcher.lines[-20:], results[2].stderr[-2000:]])
    after = watcher.exits[2] - watcher.resumed
    print(f"stopped rank exits {after:.1f} s after SIGCONT")
    assert after < 3.0, after
    assert report(tmp_path, watcher)["threshold"]["source"] == "learned", report(tmp_path, watcher)["threshold"]


def test_a_rank_stuck_in_its_data_loader_is_named_in_seconds(lab: Lab, tmp_path: Path) -> None:
    watcher = Watcher(lab)
    results = run(lab, "sleepdata", tmp_path, watcher)
    text, host = results[0].stderr, lab.nodes[2].hostname
    assert "ddpnet watch: rank-not-arriving" in text, text[-3000:]
    assert f"rank 2 ({host}) has not arrived: in 'data'" in text, text[-3000:]
    # asleep, it never worked: no probe round (a straggler's, on a loaded host) may make it
    # look busy and hold the verdict (the watch's probes and sink are not its work)
    found = report(tmp_path, watcher)
    assert not [w for w in found["warnings"] if w["kind"] == "working"], found["warnings"]
    assert any("has not worked for" in e for e in found["diagnosis"]["evidence"]), found
    assert_named_in_time(tmp_path, watcher, "data loader")
    assert codes(results) == [4, 4, 4], [r.stderr[-800:] for r in results]


def test_a_killed_rank_is_named_in_seconds(lab: Lab, tmp_path: Path) -> None:
    watcher = Watcher(lab)
    results = run(lab, "kill", tmp_path, watcher)
    text, host = results[0].stderr, lab.nodes[2].hostname
    assert "ddpnet watch: rank-gone" in text and f"rank 2 ({host}) is gone" in text, text[-3000:]
    assert_named_in_time(tmp_path, watcher, "killed")
    assert codes(results) == [4, 4, -9], [r.stderr[-800:] for r in results]


def test_a_link_down_is_named_and_the_cut_off_rank_leaves_by_itself(lab: Lab,
                                                                     tmp_path: Path) -> None:
    watcher = Watcher(lab, link_down=1, cut_at_step=6, cut_when_learned=True)
    try:
        results = run(lab, "ok", tmp_path, watcher, STEPS="100000")
    finally:
        lab.clear(1)
    text, host = results[0].stderr, lab.nodes[1].hostname
    assert "ddpnet watch: network" in text and f"link down: rank 1 ({host}, " in text, \
        (watcher.fault_at, watcher.steps, text[-3000:])
    assert_named_in_time(tmp_path, watcher, "link down")
    cut = results[1].stderr
    assert f"network: cut off: rank 1 ({host}, " in cut, cut[-2000:]
    assert "eth0 is DOWN" in cut and "reaches neither the watch hub" in cut, cut[-2000:]
    assert watcher.fault_at is not None and 1 in watcher.exits
    alone = watcher.exits[1] - watcher.fault_at
    print(f"cut-off rank exits by itself {alone:.1f} s after the fault")
    assert alone < BOUND_S, (alone, cut[-2000:])
    assert codes(results) == [4, 4, 4], [r.stderr[-800:] for r in results]
    # rank 0 and its hub are gone: diagnose answers from what the job left
    found = from_dumps(tmp_path)
    assert found.diagnosis.kind == "network" and "link down: rank 1" in found.diagnosis.summary
    assert any("cut off: rank 1" in line for line in found.diagnosis.evidence), found.diagnosis


def test_a_healthy_run_with_a_20_s_checkpoint_raises_no_alarm(lab: Lab, tmp_path: Path) -> None:
    watcher = Watcher(lab)
    results = run(lab, "ckpt", tmp_path, watcher, STEPS="260", CKPT_EVERY="150", CKPT_S="20")
    assert codes(results) == [0, 0, 0], [r.stderr[-800:] for r in results]
    assert "ddpnet watch:" not in results[0].stderr, results[0].stderr[-2000:]
    assert not (tmp_path / "report.json").exists()
    shown = [line for line in results[0].stdout.splitlines() if line.startswith("threshold ")]
    assert shown, results[0].stdout[-1000:]
    before = json.loads(shown[0].split(" ", 2)[2])
    # the checkpoint lasted 4x the threshold the job had learned
    assert before["source"] == "learned" and before["seconds"] <= 10, before
    assert "saved 150" in results[0].stdout


def test_when_the_hubs_node_goes_down_the_others_leave_by_themselves(lab: Lab,
                                                                     tmp_path: Path) -> None:
    """Node 0 (rank 0 and the hub) loses its link: ranks 1 and 2 still reach each other but
    hear the hub no more, name its node and exit 4 on their own."""
    watcher = Watcher(lab, link_down=0, cut_at_step=6, cut_when_learned=True)
    try:
        results = run(lab, "ok", tmp_path, watcher, STEPS="100000")
    finally:
        lab.clear(0)
    assert watcher.fault_at is not None
    text = results[0].stderr
    assert f"link down: the hub's node {lab.nodes[0].hostname} (rank(s) 0, eth0 " in text, \
        text[-2000:]
    for rank in (1, 2):
        err = results[rank].stderr
        assert f"network: rank {rank} ({lab.nodes[rank].hostname}, " in err, err[-2000:]
        assert "the hub's node (rank 0's, MASTER_ADDR) or its link is down" in err, err[-2000:]
        assert f"while peer rank(s) {3 - rank} answer" in err, err[-2000:]
        alone = watcher.exits[rank] - watcher.fault_at
        print(f"rank {rank} exits by itself {alone:.1f} s after its hub's node went down")
        assert alone < BOUND_S, (alone, err[-2000:])
    assert codes(results) == [4, 4, 4], [r.stderr[-800:] for r in results]

"""The watch on an unchanged script (issue 38): ``tests/watch/tutorial.py`` (its own
``init_process_group("gloo")``, a DistributedSampler DataLoader, DDP, SGD and one metric
all_reduce a step; no ddpnet import, no marks) on three lab nodes, started by ``ddpnet launch``
(torchrun, one rank a node) and by ``ddpnet exec``, with no watch settings at all.

Each fault is named with its rank and host within a fixed bound of the fault
(``lab_watch.BOUND_S``, never read from the run), and every rank exits within 15 s of the
verdict (a stopped one right after it is resumed, the cut-off
one by itself); a healthy run whose rank 0 spends 25 s writing a checkpoint and 20 s
evaluating, both unmarked, exits 0 with no verdict. One shared lab; every fault under both
launchers (the issue's bar), and a cut in the warm-up under exec.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ddpnet.lab import Lab
from tests.lab_util import fresh_lab, requires_netns
from tests.watch.endings import ended_by
from tests.watch.lab_watch import (
    LEAVE_S,
    PREFIX,
    Watcher,
    assert_named_in_time,
    named_after,
    report,
)

pytestmark = requires_netns

TUTORIAL = str(Path(__file__).with_name("tutorial.py"))
SRC = str(Path(__file__).resolve().parents[2] / "src")
#: the faulty rank (node 2: not the hub's)
FAULTY = 2
LAUNCHERS: dict[str, list[str]] = {
    "launch": [sys.executable, "-m", "ddpnet", "launch", "--nproc-per-node", "1", "--",
               TUTORIAL],
    "exec": [sys.executable, "-m", "ddpnet", "exec", "--", TUTORIAL],
}
#: a cut in the warm-up is named by the hub's stale_after (10 s there), then its probes'
#: round (up to 8 s): fixed, not the warm-up's 60 s threshold
WARMUP_CUT_S = 20.0
_ports = iter(range(29711, 29800, 3))


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with fresh_lab("wa", nodes=3) as lab:
        yield lab


def run(lab: Lab, launcher: str, fault: str, directory: Path, watcher: Watcher,
        **env: str) -> list[Any]:
    results = lab.run(LAUNCHERS[launcher], timeout=240, master_port=next(_ports),
                      env={"PYTHONPATH": SRC, "FAULT": fault, "FAULT_RANK": str(FAULTY),
                           "FAULT_STEP": "40", "STEPS": "100000",
                           "DDPNET_WATCH_DIR": str(directory), "OMP_NUM_THREADS": "1", **env},
                      on_line=watcher.on_line)
    return list(results)


def verdict(directory: Path, watcher: Watcher) -> tuple[str, str]:
    """The report's kind and its summary with its evidence, one text."""
    found = report(directory, watcher)
    diagnosis = found["diagnosis"]
    return found["kind"], "\n".join([diagnosis["summary"], *diagnosis["evidence"]])


def stderr(results: list[Any], node: int) -> str:
    return "\n".join(PREFIX.sub("", line) for line in results[node].stderr.splitlines())


def all_out(results: list[Any], directory: Path, watcher: Watcher,
            codes: list[int] | str, late: tuple[int, ...] = ()) -> None:
    """Every rank exited with ``codes`` (or, given the verdict's kind instead, each ended by
    the watch naming it or by gloo's abort, each with its own line: ``endings.ended_by``)
    within LEAVE_S of the verdict (``late``: a stopped rank, timed from its SIGCONT)."""
    if isinstance(codes, str):
        for rank, r in enumerate(results):
            ended_by(rank, r.returncode, stderr(results, rank), codes)
    else:
        assert [r.returncode for r in results] == codes, \
            ([r.returncode for r in results], [r.stderr[-800:] for r in results])
    verdict = (directory / "report.json").stat().st_mtime
    for rank, at in watcher.exits.items():
        start = watcher.resumed if rank in late and watcher.resumed else verdict
        assert at - start < LEAVE_S, (rank, at - start, watcher.tail())


@pytest.mark.parametrize("launcher", ["launch", "exec"])
def test_a_stopped_rank_is_named_and_every_rank_leaves(lab: Lab, tmp_path: Path,
                                                       launcher: str) -> None:
    watcher = Watcher(lab)
    timer = threading.Timer(120, watcher.resume_if_never_named)
    timer.start()
    try:
        results = run(lab, launcher, "stop", tmp_path, watcher)
    finally:
        timer.cancel()
    kind, text = verdict(tmp_path, watcher)
    assert kind == "rank-gone" and f"rank {FAULTY} ({lab.nodes[FAULTY].hostname}) is gone" \
        in text and "process stopped" in text, (text, watcher.tail())
    assert_named_in_time(tmp_path, watcher, "stopped")
    all_out(results, tmp_path, watcher, [4, 4, 4], late=(FAULTY,))


@pytest.mark.parametrize("launcher", ["launch", "exec"])
def test_a_killed_rank_is_named(lab: Lab, tmp_path: Path, launcher: str) -> None:
    watcher = Watcher(lab)
    # KILL_AFTER_S: the others are inside the step's collective when it dies
    results = run(lab, launcher, "kill", tmp_path, watcher, KILL_AFTER_S="1")
    kind, text = verdict(tmp_path, watcher)
    assert kind == "rank-gone" and f"rank {FAULTY} ({lab.nodes[FAULTY].hostname}) is gone" \
        in text, (text, watcher.tail())
    assert_named_in_time(tmp_path, watcher, "killed")
    # exec replaces itself with the rank (killed: -9); launch exits 128+9 for it
    all_out(results, tmp_path, watcher, [4, 4, -9 if launcher == "exec" else 137])


@pytest.mark.parametrize(("launcher", "cut_at"), [("launch", 40), ("exec", 40), ("exec", 1)])
def test_a_link_down_is_named_and_the_cut_off_rank_leaves(lab: Lab, tmp_path: Path,
                                                          launcher: str, cut_at: int) -> None:
    """At step 40 the job has learned its threshold; at step 1 it has not (the warm-up's
    60 s): the hub names a rank it stopped hearing at ``stale_after``, the cut-off rank
    looks after ``cutoff.EARLY_S`` and, reaching nothing, leaves."""
    watcher = Watcher(lab, link_down=1, cut_at_step=cut_at)
    try:
        results = run(lab, launcher, "none", tmp_path, watcher)
    finally:
        lab.clear(1)
    kind, text = verdict(tmp_path, watcher)
    host = lab.nodes[1].hostname
    assert kind == "network" and f"link down: rank 1 ({host}, " in text, (text, watcher.tail())
    if cut_at < 40:  # in the warm-up: the hub's stale_after (10 s) and the probes' round
        assert named_after(tmp_path, watcher) < WARMUP_CUT_S, watcher.tail()
    else:  # the learned threshold's stale_after
        assert_named_in_time(tmp_path, watcher, "link down")
    cut = stderr(results, 1)
    assert f"network: cut off: rank 1 ({host}, " in cut, cut[-2000:]
    assert watcher.fault_at is not None and 1 in watcher.exits, watcher.tail()
    all_out(results, tmp_path, watcher, [4, 4, 4])


@pytest.mark.parametrize("launcher", ["launch", "exec"])
def test_a_data_loader_stall_at_step_40_is_named(lab: Lab, tmp_path: Path,
                                                  launcher: str) -> None:
    watcher = Watcher(lab)
    results = run(lab, launcher, "sleepdata", tmp_path, watcher)
    kind, text = verdict(tmp_path, watcher)
    assert kind == "rank-not-arriving", (text, watcher.tail())
    assert f"rank {FAULTY} ({lab.nodes[FAULTY].hostname}) has not arrived: in 'data'" in text, \
        text
    assert_named_in_time(tmp_path, watcher, "data loader")
    all_out(results, tmp_path, watcher, [4, 4, 4])


@pytest.mark.parametrize("launcher", ["launch", "exec"])
def test_a_skipped_metric_all_reduce_is_named(lab: Lab, tmp_path: Path, launcher: str) -> None:
    watcher = Watcher(lab)
    results = run(lab, launcher, "skipmetric", tmp_path, watcher)
    kind, text = verdict(tmp_path, watcher)
    # the metric is a scalar: rank 2's next collective is DDP's gradient bucket, where the
    # others reduce the metric (the same size would be a silent desync: test_infer)
    assert kind == "collective-mismatch", (text, watcher.tail())
    assert f"rank {FAULTY} ({lab.nodes[FAULTY].hostname}, " in text, text
    assert "all_reduce float32 seq" in text and "at tutorial.py:" in text, text
    assert_named_in_time(tmp_path, watcher, "skipped metric")
    # gloo aborts a rank that receives another size (SIGABRT: 134 under launch) at once;
    # each rank ended by that abort or by the verdict, each saying so
    all_out(results, tmp_path, watcher, "collective-mismatch")


@pytest.mark.parametrize("launcher", ["launch", "exec"])
def test_an_unmarked_checkpoint_and_evaluation_raise_no_alarm(lab: Lab, tmp_path: Path,
                                                              launcher: str) -> None:
    """Rank 0 writes for 25 s at step 40 and evaluates for 20 s at step 80 while the others
    wait in the next all_reduce: working, not hung."""
    watcher = Watcher(lab)
    results = run(lab, launcher, "checkpoint,eval", tmp_path, watcher, FAULT_RANK="0",
                  STEPS="120", EVAL_STEP="80")
    assert [r.returncode for r in results] == [0, 0, 0], [r.stderr[-1500:] for r in results]
    text = stderr(results, 0)
    assert "ddpnet watch:" not in text.replace("ddpnet: watch: warning", ""), text[-3000:]
    assert not (tmp_path / "report.json").exists(), watcher.tail()
    # held because rank 0 was seen working, once per stall: the save by its bytes (an
    # I/O-bound write, tutorial.checkpoint), the evaluation by its CPU
    held = [line for line in text.splitlines() if "warning: working: rank 0 (" in line]
    assert len(held) == 2 and "wrote " in held[0] and "in evaluate" in held[1], text[-3000:]

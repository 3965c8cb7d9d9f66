"""The trainer matrix's lab runs (issue 55), shared by one module per trainer
(``test_trainer_*_lab.py``: xdist runs them side by side). Each trainer script in
``tests/watch/trainers/`` is the framework's own code, unchanged, started on two lab nodes by
``ddpnet launch`` (torchrun, one rank a node) with no watch settings at all:

- healthy, with validation and rank-0 checkpoints: every rank exits 0, no verdict, and the
  trained model's loss is the same, bit for bit, as the same job's with ``DDPNET_WATCH=0``;
- a rank stopped (SIGSTOP), a rank killed, node 1's link down, started by ``ddpnet exec``
  (the rank itself, no torchrun agent): the verdict names the rank and its host, and every
  rank is out.

The bounds are fixed (never read from the run under test): named within NAMED_S of the fault,
every rank out within OUT_S of the verdict (a stopped one from its SIGCONT). How fast the
watch names a fault is measured by benchmarks/watch_detect.py, not asserted here.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ddpnet.lab import Lab
from tests.lab_util import fresh_lab
from tests.watch.lab_watch import PREFIX, Watcher, report

TRAINERS = Path(__file__).with_name("trainers")
SRC = str(Path(__file__).resolve().parents[2] / "src")
#: the faulty rank: node 1 (not the hub's)
FAULTY = 1
#: generous, fixed: a loaded 2-core CI learns a longer threshold than an idle machine
NAMED_S = 60.0
#: the fault comes this long after the first step: every rank's watch has connected to the
#: hub (a fault before that is a rank the hub never heard: named, but with no host)
FAULT_AFTER_S = 6.0
OUT_S = 30.0
LOSS = re.compile(r"^loss (\S+)$")


class Cutter(Watcher):
    """Cuts the link of rank 1's node (:meth:`cut_node`) when rank 0 says ``fault cut`` (its
    step count and time reached)."""

    def cut_node(self) -> int:
        return 1

    def on_line(self, node: Any, stream: str, raw: str) -> None:
        super().on_line(node, stream, raw)
        if PREFIX.sub("", raw).startswith("fault cut ") and not self.cutting:
            self.cutting, self.link_down = True, self.cut_node()
            threading.Thread(target=self.cut, daemon=True).start()


def launch(script: str, launcher: str = "launch") -> list[str]:
    """``ddpnet launch`` (torchrun, one rank a node) or ``ddpnet exec`` (the rank itself)."""
    options = ["--nproc-per-node", "1"] if launcher == "launch" else []
    return [sys.executable, "-m", "ddpnet", launcher, *options, "--", str(TRAINERS / script)]


def run(lab: Lab, script: str, port: int, directory: Path, watcher: Watcher,
        launcher: str = "launch", **env: str) -> list[Any]:
    results = lab.run(launch(script, launcher), timeout=240, master_port=port,
                      env={"PYTHONPATH": SRC, "DDPNET_WATCH_DIR": str(directory),
                           "CKPT_DIR": str(directory / "ckpt"), "OMP_NUM_THREADS": "1",
                           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
                           **env},
                      on_line=watcher.on_line)
    return list(results)


def lines(results: list[Any], node: int) -> list[str]:
    return [PREFIX.sub("", line) for line in results[node].stdout.splitlines()]


#: torch 2.13's abort at interpreter exit (watch/dying.py: settle): a finished rank, gloo's worker
#: thread freeing the last collective's tensors as Python finalizes
EXIT_ABORT = "terminate called without an active exception"


def ended(result: Any, watched: bool) -> int:
    """A rank's exit code, 0 for the unwatched baseline's rank that finished (``done``) and
    then hit torch's own exit abort: the baseline is torch as it is; the watched run settles
    at exit (``watch/dying.py``) and must end 0."""
    finished = any(line.endswith("done") for line in result.stdout.splitlines())
    if not watched and finished and result.returncode in (-6, 134) and \
            EXIT_ABORT in result.stderr:
        return 0
    return int(result.returncode)


def healthy(lab: Lab, script: str, port: int, tmp: Path) -> None:
    """Watched (under ``ddpnet launch``) and unwatched (the baseline, under ``ddpnet exec``:
    no agent to pay for): both end 0 (the baseline's finished rank may meet torch's exit abort:
:func:`ended`), validate and save, and reach the same loss."""
    losses = []
    for watch in ("1", "0"):
        watcher = Watcher(lab)
        directory = tmp / f"watch{watch}"
        results = run(lab, script, port + int(watch), directory, watcher,
                      "launch" if watch == "1" else "exec", FAULT="none", DDPNET_WATCH=watch)
        assert [ended(r, watched=watch == "1") for r in results] == [0, 0], \
            [r.stderr[-2000:] for r in results]
        assert not (directory / "report.json").exists(), watcher.tail()
        for node in range(len(results)):
            out = lines(results, node)
            assert any(line.startswith(f"watched {watch == '1'} rank {node} ")
                       for line in out), out[:20]
            assert any(line.startswith("validated ") for line in out), out[-20:]
            losses.append([m.group(1) for m in map(LOSS.match, out) if m])
        assert any(line.startswith("saved ") for line in lines(results, 0))
        stderr = "\n".join(r.stderr for r in results)
        assert "ddpnet: warning" not in stderr, stderr[-3000:]
    assert len(losses) == 4 and all(len(found) == 1 for found in losses), losses
    assert len({found[0] for found in losses}) == 1, losses  # bit for bit: repr of a float


def preempted(lab: Lab, script: str, port: int, tmp: Path, handled: str) -> None:
    """Every rank SIGTERMed at once (a scheduler's preemption) while the framework's own
    handler owns SIGTERM: the job ends as it does unwatched, with ``handled`` (the framework's
    line for it) on every rank."""
    outcomes = []
    for watch in ("1", "0"):
        watcher = Watcher(lab)
        results = run(lab, script, port + int(watch), tmp / f"watch{watch}", watcher,
                      FAULT="term", FAULT_RANK="-1", FAULT_STEP="15", STEPS="400",
                      STEP_S="0.01", DDPNET_WATCH=watch)
        for node in range(len(results)):
            assert handled in lines(results, node), (watch, node, watcher.tail())
        outcomes.append([r.returncode for r in results])
        assert not (tmp / f"watch{watch}" / "report.json").exists(), watcher.tail()
    assert outcomes[0] == outcomes[1], outcomes


def faulty(lab: Lab, script: str, port: int, tmp: Path, fault: str) -> None:
    """``fault`` (stop, kill or link-down) on rank 1: named with rank and host, all out."""
    watcher = Cutter(lab, resume_after=frozenset({0}))
    timer = threading.Timer(150, watcher.resume_if_never_named)
    timer.start()
    cut = fault == "link-down"
    try:
        # under ddpnet exec (healthy runs use ddpnet launch): no torchrun agent to pay for
        results = run(lab, script, port, tmp, watcher, "exec", STEPS="2000", STEP_S="0.03",
                      FAULT_STEP="40", FAULT_AFTER_S=str(FAULT_AFTER_S),
                      FAULT="cut" if cut else fault, FAULT_RANK="0" if cut else str(FAULTY))
    finally:
        timer.cancel()
        if fault == "link-down":
            lab.clear(1)
    found = report(tmp, watcher)
    text = "\n".join([found["diagnosis"]["summary"], *found["diagnosis"]["evidence"]])
    host = lab.nodes[FAULTY].hostname
    if fault == "link-down":
        assert found["kind"] == "network" and f"link down: rank 1 ({host}, " in text, \
            (text, watcher.tail())
    else:
        assert found["kind"] == "rank-gone" and f"rank 1 ({host}) is gone" in text, \
            (text, watcher.tail())
    assert watcher.fault_at is not None, watcher.tail()
    verdict_at = (tmp / "report.json").stat().st_mtime
    assert verdict_at - watcher.fault_at < NAMED_S, (verdict_at - watcher.fault_at,
                                                     watcher.tail())
    # every rank out: the watch's exit (4) on each, the killed one by its SIGKILL (exec
    # replaced itself with the rank: -9)
    codes = [r.returncode for r in results]
    assert codes == [4, -9 if fault == "kill" else 4], (codes, watcher.tail(),
                                                         [r.stderr[-1500:] for r in results])
    for node, at in watcher.exits.items():
        start = watcher.resumed if node == FAULTY and fault == "stop" else verdict_at
        assert start is not None and at - start < OUT_S, (node, watcher.tail())


FAULTS = ("stop", "kill", "link-down")


def matrix(script: str, prefix: str, port: int
           ) -> tuple[Callable[..., Any], Callable[..., None], Callable[..., None]]:
    """One trainer's lab fixture and tests, for its module to bind as ``lab``,
    ``test_healthy...`` and ``test_a_fault...`` (ports from ``port``: 2 healthy, 3 faults)."""

    @pytest.fixture(scope="module")
    def lab() -> Iterator[Lab]:
        with fresh_lab(prefix, nodes=2) as lab:
            yield lab

    def test_healthy_with_validation_and_checkpoints_same_loss_unwatched(
            lab: Lab, tmp_path: Path) -> None:
        healthy(lab, script, port, tmp_path)

    @pytest.mark.parametrize("fault", FAULTS)
    def test_a_fault_is_named_with_rank_and_host_and_every_rank_is_out(
            lab: Lab, tmp_path: Path, fault: str) -> None:
        faulty(lab, script, port + 2 + FAULTS.index(fault), tmp_path, fault)

    return (lab, test_healthy_with_validation_and_checkpoints_same_loss_unwatched,
            test_a_fault_is_named_with_rank_and_host_and_every_rank_is_out)

"""What the watch's lab tests share (test_lab_default: a ``ddpnet.init()`` script;
test_attach_lab: an unchanged one): a follower of the ranks' lines that times the fault, cuts
a link on cue and resumes a stopped rank, the hub's report, and the bounds on the time to the
verdict and on a cut-off rank's own exit.

The bound is the issue's 15 s where the job's learned threshold allows it; on a loaded
machine the job's steps are slower, the threshold it learns is longer, and the verdict is
rightly later: the bound is then that threshold plus the probes' wait and a heartbeat,
read from the same run's report (a bound from the measured load, not a luckier machine)."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddpnet.lab import Lab, LabNode
from ddpnet.watch.hub import PROBE_WAIT_S
from ddpnet.watch.threshold import FLOOR_S

#: named within this many seconds of the fault (the issues' bound, at a learned 5-10 s)
NAMED_S = 15.0
#: from a threshold's expiry to the report: the hub's heartbeat view lags up to 2 beats
BEATS_S = 2.0
#: torchrun's prefix on each rank's lines
PREFIX = re.compile(r"^\[rank \d+\] ")


@dataclass
class Watcher:
    """Follows the ranks' lines (torchrun's ``[rank N]`` prefix taken off): the fault's time
    and pid, each rank's exit line; SIGCONT for a stopped rank once ranks 0 and 1 are out;
    the link of node ``link_down`` cut once node 0 stepped ``cut_at_step`` times (and, with
    ``cut_when_learned``, every node's step line says its threshold is learned: before, a
    cut-off rank waits its warm-up allowance)."""

    lab: Lab
    link_down: int | None = None
    cut_at_step: int = 40
    cut_when_learned: bool = False
    fault_at: float | None = None
    fault_pid: int = 0
    #: the fault stopped its rank (SIGSTOP): resumed once the others are out
    stopped: bool = False
    steps: int = 0
    exits: dict[int, float] = field(default_factory=dict)
    resumed: float | None = None
    lines: list[str] = field(default_factory=list)
    #: each node's threshold source on its last step line (scenario.py prints it)
    sources: dict[int, str] = field(default_factory=dict)
    cutting: bool = False
    #: the nodes whose ranks must be out before a stopped rank is resumed
    resume_after: frozenset[int] = frozenset({0, 1})

    def on_line(self, node: LabNode, stream: str, raw: str) -> None:
        now, line = time.time(), PREFIX.sub("", raw)
        self.lines.append(f"{node.index} {stream} {line}")
        if line.startswith("fault ") and len(line.split()) >= 4:
            self.fault_at, self.fault_pid = float(line.split()[2]), int(line.split()[3])
            self.stopped = line.split()[1] == "stop"
        if line.startswith("step "):
            self.on_step(node.index, line)
        if line.startswith(f"ddpnet: watch: rank {node.index} exits"):
            self.exits[node.index] = now
            if self.stopped and self.resume_after <= set(self.exits) and \
                    self.resumed is None:
                self.resume()

    def on_step(self, index: int, line: str) -> None:
        self.steps += index == 0
        self.sources[index] = line.split()[-1]
        learned = len(self.sources) == len(self.lab.nodes) and \
            set(self.sources.values()) == {"learned"}
        if self.link_down is not None and self.steps >= self.cut_at_step and \
                (learned or not self.cut_when_learned) and not self.cutting:
            self.cutting = True
            threading.Thread(target=self.cut, daemon=True).start()

    def cut(self) -> None:
        assert self.link_down is not None
        self.lab.fault("link-down", self.link_down)
        self.fault_at = time.time()

    def resume(self) -> None:
        self.resumed = time.time()
        os.kill(self.fault_pid, signal.SIGCONT)

    def resume_if_never_named(self) -> None:
        """A timer's fallback: the verdict never came; do not leave the rank stopped."""
        if self.stopped and self.resumed is None:
            self.resume()

    def tail(self) -> list[str]:
        return self.lines[-40:]


def report(directory: Path, watcher: Watcher) -> dict[str, Any]:
    """The hub's report (rank 0's stderr may lose it: torchrun ends rank 0 as it dies)."""
    assert (directory / "report.json").exists(), watcher.tail()
    data: dict[str, Any] = json.loads((directory / "report.json").read_text())
    return data


def named_after(directory: Path, watcher: Watcher) -> float:
    """Seconds from the fault to the hub's report."""
    assert watcher.fault_at is not None, watcher.tail()
    assert (directory / "report.json").exists(), watcher.tail()
    return (directory / "report.json").stat().st_mtime - watcher.fault_at


def named_bound(directory: Path, watcher: Watcher) -> float:
    """The time-to-verdict bound for this run: NAMED_S, or the threshold the job judged
    by plus the probes' wait and two heartbeats when its load made that longer."""
    threshold = float(report(directory, watcher)["threshold"]["seconds"])
    return max(NAMED_S, threshold + PROBE_WAIT_S + BEATS_S)


def alone_bound(directory: Path, watcher: Watcher) -> float:
    """How soon a rank that hears nobody leaves by itself: NAMED_S at the floor threshold
    (it judges at threshold + ``cutoff.MARGIN_S``, then connects for ``cutoff.CONNECT_S``:
    ~10 s at 5 s), later by as much as the threshold it judges by (the hub's learned one, in
    the report) is above the floor when its load made the job learn a longer one."""
    threshold = float(report(directory, watcher)["threshold"]["seconds"])
    return NAMED_S + max(0.0, threshold - FLOOR_S)


def assert_named_in_time(directory: Path, watcher: Watcher, what: str) -> float:
    took, bound = named_after(directory, watcher), named_bound(directory, watcher)
    print(f"time to verdict: {what} {took:.1f} s (bound {bound:.1f} s)")
    found = report(directory, watcher)
    # late: the trigger says whether the stall was seen late or held (working ranks), the
    # warnings what held it, most_behind whether the hub itself ran behind
    assert took < bound, (what, took, bound, found["threshold"], found["trigger"],
                          found["warnings"], found["hub_most_behind_s"], watcher.tail())
    return took

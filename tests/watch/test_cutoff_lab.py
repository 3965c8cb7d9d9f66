"""Every rank out within seconds of the verdict, the cut-off one included, under ``ddpnet
train`` (issue 38): three lab nodes train with the watch at default settings and node 1's
link goes down 20 s after the start, whatever the job is doing then (its warm-up, a step,
the eval of a log step: ``ddpnet train`` marks 'warmup' and 'eval', long phases). A large eval
set makes a cut inside an eval likely: there it used to leave the cut-off rank (or the
others) under eval's 120 s allowance.

Before, the cut-off rank judged itself by the hub's last threshold, raised to the 120 s
allowance whenever some rank was in 'eval' (every 10 steps): ranks 0 and 2 named the link in
8 s and rank 1 left after 126 s; or, cut while they were in eval, ranks 0 and 2 waited in
eval's all_reduce under its allowance and were told 123 s after the cut. Now a cut-off rank
judges itself by the learned base the hub's ack carries (or its own gaps), raised only by
its own long phase while it does that phase's work, and a long phase holds the hub only
while a rank in it works (not inside a collective, still publishing)."""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from pathlib import Path

from ddpnet.lab import LabNode
from ddpnet.watch.analyze import STALE_AFTER_S
from ddpnet.watch.hubstore import PROBE_WAIT_S
from tests.lab_util import fresh_lab, requires_netns
from tests.watch.lab_watch import BEATS_S

pytestmark = requires_netns

#: the link goes down this long after the ranks start (the issue's)
CUT_AFTER_S = 20.0
#: every rank out within this many seconds of the verdict (the issue's bound)
WITHIN_S = 15.0
#: the cut named within: the hub's silence bound, then its probes of the silent rank, and
#: two heartbeats; 15 s on an idle machine, 16.3 s once on a loaded one (the design's own
#: 10 + 8 s), far below the warm-up's 60 s allowance this test guards against
NAMED_WITHIN_S = STALE_AFTER_S + PROBE_WAIT_S + BEATS_S


class Exits:
    """When each rank said it exits (its watch line on stderr)."""

    def __init__(self) -> None:
        self.at: dict[int, float] = {}
        self.lines: list[str] = []
        self.start = time.time()
        #: seconds from the start to rank 0's log steps
        self.steps: list[str] = []

    def on_line(self, node: LabNode, stream: str, line: str) -> None:
        self.lines.append(f"{node.index} {stream} {line}")
        if node.index == 0 and stream == "stdout" and line.startswith("step "):
            self.steps.append(f"{line.split()[1]} at {time.time() - self.start:.1f} s")
        if stream == "stderr" and line.startswith(f"ddpnet: watch: rank {node.index} exits"):
            self.at.setdefault(node.index, time.time())


def test_under_ddpnet_train_the_cut_off_rank_leaves_within_seconds_of_the_verdict(
        tmp_path: Path) -> None:
    src = str(Path(__file__).resolve().parents[2] / "src")
    exits = Exits()
    with fresh_lab("wcut", fork=True, nodes=3) as lab:
        cut: list[float] = []

        def cut_link() -> None:
            lab.fault("link-down", 1)
            cut.append(time.time())

        timer = threading.Timer(CUT_AFTER_S, cut_link)
        timer.start()
        try:
            results = lab.run(
                [sys.executable, "-m", "ddpnet", "train", "--width", "256", "--depth", "2",
                 "--batch-size", "16", "--samples", "65536", "--eval-samples", "24576",
                 "--max-steps", "100000", "--log-every", "10"],
                timeout=200, on_line=exits.on_line,
                env={"PYTHONPATH": src, "DDPNET_WATCH_DIR": str(tmp_path),
                     "OMP_NUM_THREADS": "1"})
        finally:
            timer.cancel()
            lab.clear(1)
        host = lab.nodes[1].hostname
    assert cut, "the job ended before the link was cut"
    report = results[0].stderr
    assert "ddpnet watch: network" in report and f"rank 1 ({host}, " in report, \
        exits.lines[-40:]
    verdict = (tmp_path / "report.json").stat().st_mtime
    alone = results[1].stderr
    assert "network: cut off: rank 1" in alone, alone[-2000:]
    assert [r.returncode for r in results] == [4, 4, 4], [r.stderr[-800:] for r in results]
    print(f"verdict {verdict - cut[0]:.1f} s after the cut; exits after it: "
          + ", ".join(f"rank {r} {t - verdict:+.1f} s" for r, t in sorted(exits.at.items())))
    assert set(exits.at) == {0, 1, 2}, exits.lines[-40:]
    # named within seconds, not at a phase's allowance (before, ranks 0 and 2 sat in eval's
    # all_reduce and the verdict came 123 s after the cut) nor the warm-up's 60 s when the
    # cut came before every rank had learned (the hub stopped hearing rank 1: stale_after)
    threshold = json.loads((tmp_path / "report.json").read_text())["threshold"]
    print(f"the hub's threshold: {threshold}; rank 0's log steps: {exits.steps[:6]}")
    assert threshold["source"] in ("learned", "warm-up"), threshold
    assert verdict - cut[0] < NAMED_WITHIN_S, (verdict - cut[0], threshold)
    # every rank out within seconds of the verdict, the cut-off one by itself
    assert all(t - verdict < WITHIN_S for t in exits.at.values()), (exits.at, verdict)
    # the cut-off rank judged itself by the learned threshold, not a phase's allowance
    judged = re.search(r"judged by its threshold ([0-9.]+) s \((\S+?):", alone)
    assert judged is not None, alone[-2000:]
    assert judged[2] in ("learned", "warm-up"), judged[0]
    # in the warm-up it looks after cutoff.EARLY_S and, reaching nothing, leaves at once
    assert exits.at[1] - cut[0] < 2 * WITHIN_S, alone[-2000:]

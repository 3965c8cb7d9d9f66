"""``ddpnet launch --max-restarts`` leaves the blamed node out of torchrun's next rendezvous
(issue 40), on three lab nodes with an unchanged tutorial-shaped script (one rank a node,
c10d rendezvous at node 0, ``--nnodes 2:3``).

Node 2's rank freezes (SIGSTOP) at step 40. The watch names it; the ranks of nodes 0 and 1
obey and exit 4; their agents read the verdict from their ranks' dumps, write the blamed host
into the rendezvous store and let torchrun restart; node 2's agent, whose rank wrote nothing
(it is stopped), reads it there, kills its rank and leaves the rendezvous without closing it
(exit 4 with the verdict). The restarted group is two ranks on nodes 0 and 1, and finishes
(exit 0).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddpnet.lab import Lab
from tests.lab_util import fresh_lab, requires_netns

pytestmark = requires_netns

TUTORIAL = str(Path(__file__).parents[1] / "watch" / "tutorial.py")
SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with fresh_lab("el", nodes=3) as lab:
        yield lab


@pytest.mark.timeout(420)  # the run's own bound (240 s) says more than pytest's
def test_a_frozen_ranks_node_leaves_and_the_others_finish_without_it(lab: Lab,
                                                                      tmp_path: Path) -> None:
    blamed = lab.nodes[2].hostname
    argv = [sys.executable, "-m", "ddpnet", "launch", "--nnodes", "2:3", "--nproc-per-node",
            "1", "--max-restarts", "1", "--", TUTORIAL]
    results = lab.run(argv, timeout=240, master_port=29841,
                      env={"PYTHONPATH": SRC, "FAULT": "stop", "FAULT_HOST": blamed,
                           "FAULT_STEP": "40", "STEPS": "120", "OMP_NUM_THREADS": "1",
                           "DDPNET_WATCH_DIR": str(tmp_path)})
    codes = [r.returncode for r in results]
    logs = "\n\n".join(f"node {i} (exit {r.returncode}):\n{r.stderr[-2500:]}"
                       for i, r in enumerate(results))
    assert codes == [0, 0, 4], logs
    left = results[2].stderr
    assert f"ddpnet: launch on {blamed}: rank-gone: " in left and \
        "blame this one: it leaves the job" in left, logs
    for node in (0, 1):
        out, err = results[node].stdout, results[node].stderr
        assert f"{blamed} is blamed: the job restarts without it on 2 nodes" in err, logs
        # the first attempt had 3 ranks, the restarted one 2, which finished
        assert " of 3" in out and " of 2" in out and "done" in out, out[-1500:]
        record = json.loads((tmp_path / f"recovery-{lab.nodes[node].hostname}.json")
                            .read_text())
        assert [(e["what"], e["node"]) for e in record["events"]] == \
            [("verdict", blamed), ("exclude", blamed)]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["diagnosis"]["kind"] == "rank-gone" and blamed in report["diagnosis"]["hosts"]

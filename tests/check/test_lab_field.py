"""Field failures (issue 18) reproduced on a real 3-node lab: each is named by ``check`` on
the node(s) at fault, with the evidence and a fix, and never passes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ddpnet.lab import Lab
from tests.check.labcheck import RankRun, run_check
from tests.lab_util import fresh_lab, requires_netns

pytestmark = [requires_netns, pytest.mark.root, pytest.mark.slow]

FAST = ["--join-timeout", "10", "--timeout", "20", "--no-matrix"]


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with fresh_lab("fld", nodes=3) as lab:
        yield lab


@pytest.fixture
def clean(lab: Lab) -> Iterator[Lab]:
    lab.clear()
    yield lab
    lab.clear()


def _diag(runs: dict[int, RankRun]) -> str:
    return "\n".join(f"--- node {i} rc={r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}"
                     for i, r in runs.items())


def _own(run: RankRun) -> dict[str, Any]:
    cause: dict[str, Any] = run.json()["causes"][0]
    return cause


@pytest.mark.parametrize(("master", "drop"), [
    ("localhost", ()),                          # NNODES says 3 nodes
    ("127.0.0.1", ("NNODES", "NODE_RANK")),     # only LOCAL_WORLD_SIZE=1 < WORLD_SIZE=3 says so
])
def test_single_node_config_copied_to_a_cluster(clean: Lab, master: str,
                                                drop: tuple[str, ...]) -> None:
    runs = run_check(clean, FAST, per_node={i: {"MASTER_ADDR": master} for i in range(3)},
                     drop=drop, timeout=60)
    for node, run in runs.items():
        assert run.returncode == 1, _diag(runs)
        own = _own(run)
        assert own["id"] == "master-loopback", _diag(runs)
        assert own["hosts"] == [clean.nodes[node].hostname]
        assert "WORLD_SIZE=3" in own["detail"] and "export MASTER_ADDR=" in own["fix"]
        assert run.seconds < 8, _diag(runs)  # before anything waits
    # node 0 is rank 0's host: its fix names its own cluster address
    assert clean.nodes[0].address in _own(runs[0])["fix"]

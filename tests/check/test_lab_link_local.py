"""Issue 42: a MASTER_ADDR copied bare from ``ip addr`` as an IPv6 link-local address (no
``%eth0`` zone). Plain torch is shown first to time out on every rank; then ``check`` names
it on every rank (rank 0 used to crash with a traceback) before anything dials it, and the
zoned form it proposes is shown to work, for plain torch and for check itself."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from ddpnet.lab import Lab
from tests.check.labcheck import RankRun, run_check
from tests.check.test_lab_plain import PLAIN
from tests.lab_util import fresh_lab, requires_netns

pytestmark = [requires_netns, pytest.mark.root, pytest.mark.slow]

FAST = ["--join-timeout", "10", "--timeout", "20", "--no-matrix"]


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with fresh_lab("llz", nodes=2) as lab:
        yield lab


def _link_local(lab: Lab, node: int) -> str:
    """The node's fe80:: address on eth0 (the kernel gives every veth one)."""
    out = lab.run(["ip", "-6", "-br", "addr", "show", "dev", "eth0", "scope", "link"],
                  nodes=[node], timeout=10)[0].stdout.split()
    assert len(out) >= 3 and out[2].startswith("fe80:"), out
    return out[2].split("/")[0]


def _diag(runs: dict[int, RankRun]) -> str:
    return "\n".join(f"--- node {i} rc={r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}"
                     for i, r in runs.items())


def test_zone_less_link_local_master_is_named_on_every_rank(lab: Lab) -> None:
    ll = _link_local(lab, 0)
    # plain torch first: every rank's store client retries EINVAL until its timeout
    broken = lab.run([sys.executable, "-c", PLAIN], timeout=60,
                     env={"MASTER_ADDR": ll, "MASTER_PORT": "29541", "PYTHONWARNINGS": "ignore"})
    assert all(r.returncode == 1 and "timed out" in r.stdout for r in broken), \
        [(r.stdout, r.stderr[-300:]) for r in broken]
    runs = run_check(lab, FAST, per_node={i: {"MASTER_ADDR": ll} for i in range(2)},
                     timeout=60)
    for node, run in runs.items():
        assert run.returncode == 2 and "Traceback" not in run.stderr, _diag(runs)
        (cause,) = run.json()["causes"]
        assert cause["id"] == "master-link-local" and cause["ranks"] == [node], cause
        assert cause["hosts"] == [lab.nodes[node].hostname]
        assert f"export MASTER_ADDR={ll}%eth0" in cause["fix"], cause["fix"]
        assert "link-local interfaces here: eth0" in cause["evidence"][0]
    own = runs[0].json()["causes"][0]
    assert "this node's own address on eth0" in own["detail"]
    assert f"MASTER_ADDR={lab.nodes[0].address}" in own["fix"]  # the global one instead
    assert "another node's address" in runs[1].json()["causes"][0]["detail"]
    print(f"time to verdict: {max(r.seconds for r in runs.values()):.1f} s")


def test_the_zoned_form_works_for_torch_and_for_check(lab: Lab) -> None:
    zoned = f"{_link_local(lab, 0)}%eth0"
    fixed = lab.run([sys.executable, "-c", PLAIN], timeout=60,
                    env={"MASTER_ADDR": zoned, "MASTER_PORT": "29542",
                         "PYTHONWARNINGS": "ignore"})
    assert all(r.returncode == 0 and "ok 2" in r.stdout for r in fixed), \
        [(r.stdout, r.stderr[-300:]) for r in fixed]
    runs = run_check(lab, FAST, per_node={i: {"MASTER_ADDR": zoned} for i in range(2)},
                     timeout=90)
    assert all(r.returncode == 0 for r in runs.values()), _diag(runs)
    report = runs[0].json()
    assert report["verdict"] == "pass" and report["allreduce"]["ok"], _diag(runs)
    # the ranks' own traffic goes by eth0's routable address, which peers dial zone-less
    assert [n["address"] for n in report["nodes"]] == [n.address for n in lab.nodes]

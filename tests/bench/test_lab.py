"""On a 4-node lab shaped to 1 Gbit/s, ``ddpnet bench`` run by each node (one rank per node)
measures all_reduce at 64 MiB within 25% of the shaped rate, next to the iperf3 baseline.
A sanity bound, not the performance target (benchmarks/allreduce_vs_link.py)."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable

import pytest

from ddpnet.lab import Lab
from tests.lab_util import requires_netns

# all_reduce against the shaped rate: a rate the CPU must keep up with, measured alone
pytestmark = [requires_netns, pytest.mark.root, pytest.mark.slow, pytest.mark.solo]


@pytest.mark.skipif(shutil.which("iperf3") is None, reason="iperf3 not installed")
def test_all_reduce_64m_near_shaped_rate(make_lab: Callable[..., Lab]) -> None:
    lab = make_lab("bn", nodes=4, rate="1gbit")
    results = lab.run(
        [sys.executable, "-m", "ddpnet", "bench", "--collectives", "all_reduce",
         "-b", "64M", "-e", "64M", "--iters", "3", "--warmup", "1", "--check",
         "--baseline", "iperf3", "--baseline-time", "2", "--json"],
        timeout=240,
    )
    for r in results:
        assert r.returncode == 0, (r.node, r.stderr[-2000:])
    doc = json.loads(results[0].stdout)
    assert all(not r.stdout.strip() for r in results[1:])  # only rank 0 prints
    assert doc["world_size"] == 4 and doc["backend"] == "gloo"
    link = doc["link"]
    assert link["method"] == "iperf3" and link["interface"] == "eth0"
    assert len(link["pairs"]) == 4  # a ring over the 4 nodes
    # never above the shaped 1 Gb/s (the shaping is what is measured); below it by the CPU
    # four nodes' streams get on 2 cores: iperf3's ring read 0.59 in a run alone on a clean
    # clone, so the lower bounds only rule out a link at a fraction of the rate, and the
    # all_reduce is judged against the link measured in the same run
    assert 0.4 <= link["gbps"] <= 1.25, link
    [row] = doc["rows"]
    assert row["bytes"] == 64 << 20 and row["wrong"] == 0
    assert 0.4 <= row["busbw_gbps"] <= 1.25, row
    assert row["busbw_gbps"] >= 0.6 * link["gbps"], (row, link)
    assert row["link_efficiency"] == pytest.approx(row["busbw_gbps"] / link["gbps"], rel=1e-3)

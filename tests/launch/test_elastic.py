"""What a node's torchrun agent does about a verdict (``launch.elastic.choose``): restart
without the blamed node, leave when it is this one, stop when no node is to blame, a second
failure came, too few nodes would be left, or the blamed node runs the rendezvous store."""

from __future__ import annotations

import pytest

from ddpnet.launch.blame import Blame
from ddpnet.launch.elastic import choose

N2 = Blame("rank-gone", "rank 2 (n2) is gone: process stopped", host="n2",
           reason="ddpnet: rank-gone: ...", step=40)


def test_no_verdict_leaves_the_restart_to_torchrun() -> None:
    assert choose(None, "n0", {}, 3, 2, False).action == "torch"


def test_another_node_blamed_restarts_without_it() -> None:
    gate = choose(N2, "n0", {}, 3, 2, False)
    assert gate.action == "restart" and gate.verdict == N2
    assert gate.line == ("ddpnet: launch on n0: rank-gone: rank 2 (n2) is gone: process "
                         "stopped: n2 is blamed: the job restarts without it on 2 nodes")


def test_the_blamed_node_leaves_by_its_short_name_too() -> None:
    for me in ("n2", "n2.cluster"):
        gate = choose(N2, me, {}, 3, 2, False)
        assert gate.action == "leave" and "this node is blamed: it leaves" in gate.line


def test_the_blamed_node_that_runs_the_store_stops_the_job() -> None:
    gate = choose(N2, "n2", {}, 3, 2, True)
    assert gate.action == "stop" and "rendezvous store" in gate.line and "hint:" in gate.line


def test_a_verdict_that_blames_no_node_stops_with_its_reason() -> None:
    bug = Blame("collective-mismatch", "rank 1 called all_gather",
                why="a collective-mismatch is the program's bug")
    gate = choose(bug, "n0", {}, 3, 2, False)
    assert gate.action == "stop" and gate.line.endswith("no restart: a collective-mismatch "
                                                        "is the program's bug")


@pytest.mark.parametrize("nodes, min_nodes", [(3, 3), (2, 2)])
def test_a_fixed_node_count_stops_with_the_elastic_hint(nodes: int, min_nodes: int) -> None:
    gate = choose(N2, "n0", {}, nodes, min_nodes, False)
    assert gate.action == "stop"
    assert f"launch with --nnodes {nodes - 1}:{nodes}" in gate.line


def test_a_node_blamed_again_or_a_second_failure_stops() -> None:
    again = choose(N2, "n0", {"n2": N2}, 2, 1, False)
    assert again.action == "stop" and "blamed again" in again.line
    n1 = Blame("rank-gone", "rank 1 (n1) is gone", host="n1", reason="r", step=40)
    second = choose(n1, "n0", {"n2": N2}, 2, 1, False)
    assert second.action == "stop" and "a second failure" in second.line
    later = choose(Blame("rank-gone", "rank 1 (n1) is gone", host="n1", reason="r", step=90),
                   "n0", {"n2": N2}, 3, 1, False)
    assert later.action == "restart"

"""Nodes behind a router (issue 18, kinds 4 and 7) through the real ``ddpnet check``: workers
behind a NAT, rank 0 behind a port forward, and a routed two-subnet cluster that must pass."""

from __future__ import annotations

from typing import Any

import pytest

from tests.check.labcheck import UNWAITED, UNWAITED_S, RankRun, run_check
from tests.lab_util import fresh_lab, requires_netns

pytestmark = [requires_netns, pytest.mark.root, pytest.mark.slow]

FAST = UNWAITED  # the NAT is named at once: no rank may wait a window


def _diag(runs: dict[int, RankRun]) -> str:
    return "\n".join(f"--- node {i} rc={r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}"
                     for i, r in runs.items())


def _cause(report: dict[str, Any], cause_id: str) -> dict[str, Any]:
    found = [c for c in report["causes"] if c["id"] == cause_id]
    assert found, (cause_id, report["causes"])
    return found[0]


def test_workers_behind_a_nat_are_named_with_both_addresses() -> None:
    # nodes 1 and 2 behind a masquerading router, 0 (rank 0) and 3 outside: 1 and 2 reach
    # the store, advertise 198.19.1.x, which 0 and 3 have no route to
    with fresh_lab("cnat", nodes=4, behind=(1, 2)) as lab:
        runs = run_check(lab, FAST, timeout=90)
        outer = lab.plan.router.outer  # type: ignore[union-attr]
        names = [n.hostname for n in lab.nodes]
    report = runs[0].json()
    assert runs[0].returncode == 1 and report["verdict"] == "fail", _diag(runs)
    cause = report["root_cause"]
    assert cause["id"] == "behind-nat" and cause["ranks"] == [1, 2], report["causes"]
    assert names[1] in cause["hosts"][0] and names[2] in cause["hosts"][1]
    assert "rank 1 on" in cause["detail"] and " advertises 198.19.1.3:" in cause["detail"]
    assert f"arrive at ranks 0, 3 from {outer}, an address it does not have" in cause["detail"]
    assert "rank(s) 0 (no-route), 3 (no-route) cannot reach 198.19.1.4" in cause["detail"]
    assert "no NAT between ranks" in cause["fix"] and "onto 198.18.0.0/24" in cause["fix"]
    # said once: not also as a firewall or an interface choice
    assert {c["id"] for c in report["causes"]} == {"behind-nat"}, report["causes"]
    for node in (1, 2, 3):
        assert runs[node].returncode == 1 and "behind-nat" in runs[node].stdout, _diag(runs)
    assert report["timings"]["total"] < UNWAITED_S, report["timings"]


def test_rank_0_behind_a_port_forward_is_advertised_unreachable() -> None:
    # rank 0 behind the router, MASTER_PORT forwarded from the router's outer address: the
    # workers join the store there, but rank 0 advertises its inner address
    with fresh_lab("cfwd", nodes=3, behind=(0,), forwards=((29510, 0),)) as lab:
        outer = lab.plan.router.outer  # type: ignore[union-attr]
        runs = run_check(lab, FAST, per_node={1: {"MASTER_ADDR": outer},
                                              2: {"MASTER_ADDR": outer}}, timeout=90)
        inner, name0 = lab.master_addr, lab.nodes[0].hostname
    report = runs[0].json()
    assert runs[0].returncode == 1 and report["verdict"] == "fail", _diag(runs)
    cause = report["root_cause"]
    assert cause["id"] == "advertised-unreachable" and cause["ranks"] == [0], report["causes"]
    assert name0 in cause["hosts"][0] and inner == "198.19.1.2"
    assert f"advertises {inner}:" in cause["detail"]
    assert f"rank(s) 1, 2 reached the store at {outer} (not an address of rank 0: a port " \
        "forward or NAT in front of it) and cannot reach 198.19.1.2 (1 no-route, 2 no-route)" \
        in cause["detail"]
    assert f"not only through the forward at {outer}" in cause["fix"]
    assert {c["id"] for c in report["causes"]} == {"advertised-unreachable"}, report["causes"]
    for node in (1, 2):  # no traceback on the workers: each prints the verdict
        assert runs[node].returncode == 1 and "advertised-unreachable" in runs[node].stdout, \
            _diag(runs)
    assert report["timings"]["total"] < UNWAITED_S, report["timings"]


def test_a_worker_natted_on_rank_0s_side_is_named_from_the_outside_peers_view() -> None:
    # ranks 0 and 1 behind the router, rank 2 outside reaching the store by the port
    # forward: rank 1's probes reach rank 0 from its own address; only rank 2 sees the NAT
    with fresh_lab("cnat2", nodes=3, behind=(0, 1), forwards=((29510, 0),)) as lab:
        outer = lab.plan.router.outer  # type: ignore[union-attr]
        runs = run_check(lab, FAST, per_node={2: {"MASTER_ADDR": outer}}, timeout=90)
        names = [n.hostname for n in lab.nodes]
    report = runs[0].json()
    assert runs[0].returncode == 1 and report["verdict"] == "fail", _diag(runs)
    by_id = {c["id"]: c for c in report["causes"]}
    assert set(by_id) == {"advertised-unreachable", "behind-nat"}, report["causes"]
    assert by_id["advertised-unreachable"]["ranks"] == [0]
    nat = by_id["behind-nat"]
    assert nat["ranks"] == [1] and names[1] in nat["hosts"][0], nat
    assert f"arrive at rank 2 from {outer}, an address it does not have" in nat["detail"]
    assert "rank(s) 2 (no-route) cannot reach 198.19.1.3" in nat["detail"]
    for node in (1, 2):
        assert runs[node].returncode == 1, _diag(runs)
    assert report["timings"]["total"] < UNWAITED_S, report["timings"]


def test_routed_two_subnet_cluster_passes() -> None:
    # the same router, forwarding only: node 2 in another subnet, routed both ways
    with fresh_lab("crtd", nodes=3, behind=(2,), router="routed") as lab:
        runs = run_check(lab, FAST, timeout=90)
    report = runs[0].json()
    assert runs[0].returncode == 0 and report["verdict"] == "pass", _diag(runs)
    assert not [c for c in report["causes"] if c["severity"] == "fail"]
    assert report["stages"].get("facts") == "pass" and report["stages"]["reachability"] == "pass"
    # the other subnet is said, as a warning
    assert _cause(report, "interface-mismatch")["severity"] == "warn"
    for node in (1, 2):
        assert runs[node].returncode == 0, _diag(runs)

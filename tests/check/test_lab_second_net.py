"""Issue 18 kinds 6 and 8 on a real lab with two networks (``second_net``): node 1's second
NIC (eth1, 198.18.2.0/24) sorts before its eth0, so NCCL's prefix match ``eth`` (and NCCL's
own choice) binds the other network on that node only. ``check`` names rank 1 and the fix."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ddpnet.lab import Lab
from tests.check.labcheck import UNWAITED, UNWAITED_S, RankRun, run_check
from tests.lab_util import fresh_lab, requires_netns

pytestmark = [requires_netns, pytest.mark.root, pytest.mark.slow]

FAST = UNWAITED  # every rank joins: none may wait a window


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with fresh_lab("c2n", nodes=3, second_net="198.18.2.0/24", second_first=(1,)) as lab:
        yield lab


def _nccl(lab: Lab, value: str | None) -> dict[int, RankRun]:
    env = {} if value is None else {i: {"NCCL_SOCKET_IFNAME": value} for i in range(3)}
    return run_check(lab, FAST, per_node=env, timeout=60)


def _diag(runs: dict[int, RankRun]) -> str:
    return "\n".join(f"--- node {i} rc={r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}"
                     for i, r in runs.items())


def _about_nccl(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in report["causes"] if c["id"].startswith(("ifname-", "nccl-"))]


def test_prefix_eth_matching_eth1_first_on_one_node_is_named(lab: Lab) -> None:
    runs = _nccl(lab, "eth")
    report = runs[0].json()
    assert runs[0].returncode == 1, _diag(runs)
    [cause] = _about_nccl(report)
    n1 = lab.nodes[1]
    assert cause["id"] == "ifname-mismatch" and cause["severity"] == "fail", _diag(runs)
    assert report["root_cause"]["id"] == "ifname-mismatch"
    assert cause["ranks"] == [1] and n1.hostname in cause["hosts"][0]
    assert f"NCCL_SOCKET_IFNAME=eth picks eth1 {n1.second_address} (198.18.2.0/24, not the " \
        "cluster subnet 198.18.0.0/24" in cause["detail"]
    assert "kernel interface order: lo, eth1, eth0" in cause["detail"]
    assert "rank(s) 0,2: eth0 in 198.18.0.0/24" in cause["detail"]
    assert cause["fix"] == f"on {cause['hosts'][0]}: export NCCL_SOCKET_IFNAME==eth0"
    assert report["timings"]["total"] < UNWAITED_S


def test_exact_eth0_on_the_same_lab_passes_with_nothing_about_it(lab: Lab) -> None:
    runs = _nccl(lab, "=eth0")
    report = runs[0].json()
    assert all(r.returncode == 0 for r in runs.values()), _diag(runs)
    assert report["verdict"] == "pass" and _about_nccl(report) == [], report["causes"]


def test_nccls_own_choice_of_the_second_network_on_one_node_is_a_warning(lab: Lab) -> None:
    runs = _nccl(lab, None)
    report = runs[0].json()
    [cause] = _about_nccl(report)
    assert cause["id"] == "nccl-auto-interface" and cause["severity"] == "warn", _diag(runs)
    assert cause["ranks"] == [1] and f"eth1 {lab.nodes[1].second_address}" in cause["detail"]
    assert "export NCCL_SOCKET_IFNAME==eth0" in cause["fix"]
    assert report["verdict"] == "pass"  # ddpnet.init() pins NCCL itself: only slower/risky


def _networks_cause(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in report["causes"] if c["id"] == "slower-network-chosen"]


def test_the_job_on_the_slow_one_of_two_networks_is_named_with_the_fast_ones_address() -> None:
    # eth0 (MASTER_ADDR's network, as a management network) at 50 Mbit/s; every node's eth1
    # is unshaped: the job works, ten or more times slower than it could
    with fresh_lab("cslow", nodes=3, rate="50mbit", second_net="198.18.3.0/24") as lab:
        runs = run_check(lab, FAST, timeout=60)
        fast0 = lab.nodes[0].second_address
    report = runs[0].json()
    assert all(r.returncode == 0 for r in runs.values()), _diag(runs)
    [cause] = _networks_cause(report)
    assert cause["severity"] == "warn" and report["verdict"] == "pass", report["causes"]
    assert "the job's traffic goes over 198.18.0.0/24 (eth0" in cause["detail"]
    assert "every node also has 198.18.3.0/24 (eth1" in cause["detail"]
    assert "faster measured" in cause["detail"]
    assert f"set MASTER_ADDR to rank 0's address on it ({fast0})" in cause["fix"]
    assert "export GLOO_SOCKET_IFNAME=eth1 NCCL_SOCKET_IFNAME==eth1 on every node" in cause["fix"]
    assert report["stages"]["networks"] == "warn"
    assert [n["job"] for n in report["networks"]] == [True, False]
    assert report["timings"]["total"] < UNWAITED_S


def test_the_job_on_the_fast_one_of_two_networks_says_nothing() -> None:
    # the same two networks the other way round: eth1 is the slow one, eth0 the job's
    with fresh_lab("cfast", nodes=3, second_net="198.18.3.0/24", second_rate="50mbit") as lab:
        runs = run_check(lab, FAST, timeout=60)
    report = runs[0].json()
    assert all(r.returncode == 0 for r in runs.values()), _diag(runs)
    assert _networks_cause(report) == [] and report["verdict"] == "pass", report["causes"]
    assert report["stages"]["networks"] == "pass"
    assert any(n.startswith("networks: rank 1 streamed") for n in report["notes"]), report

"""``ddpnet check`` on a real 4-node lab (network namespaces, tc shaping, nftables): healthy,
and every cause injected with lab faults or per-node environments."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from ddpnet.lab import Lab
from tests.check.labcheck import UNWAITED, UNWAITED_S, RankRun, run_check
from tests.lab_util import fresh_lab, requires_netns

pytestmark = [requires_netns, pytest.mark.root, pytest.mark.slow]

FAST = ["--join-timeout", "10", "--timeout", "20"]


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with fresh_lab("ck", nodes=4, rate="1gbit") as lab:
        yield lab


def _cause(report: dict[str, Any], cause_id: str) -> dict[str, Any]:
    ids = [c["id"] for c in report["causes"]]
    assert cause_id in ids, (cause_id, report["causes"])
    return next(c for c in report["causes"] if c["id"] == cause_id)


def _host(lab: Lab, node: int) -> str:
    return lab.nodes[node].hostname


def _diag(runs: dict[int, RankRun]) -> str:
    return "\n".join(f"--- node {i} rc={r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}"
                     for i, r in runs.items())


# the matrix's streams share the 2 cores with the four ranks: measured alone
@pytest.mark.solo
def test_healthy_pass_with_matrix_at_the_shaped_rate(clean: Lab) -> None:
    runs = run_check(clean, [*FAST, "--matrix", "--bw-seconds", "1.5"])
    report = runs[0].json()
    assert runs[0].returncode == 0, _diag(runs)
    assert report["verdict"] == "pass" and report["causes"] == []
    assert all(r.returncode == 0 for r in runs.values()), _diag(runs)
    assert [n["host"] for n in report["nodes"]] == [n.hostname for n in clean.nodes]
    assert all(s == "ok" for i, row in enumerate(report["reachability"])
               for j, s in enumerate(row) if i != j)
    bw = report["bandwidth_gbps"]
    links = [bw[i][j] for i in range(4) for j in range(4) if i != j]
    assert all(v is not None for v in links), bw
    # never above the shaped 1 Gb/s: the shaping is what is measured. Below it by the CPU
    # the streams get (four ranks on 2 cores read 0.70-0.79 in a run alone): a bound from
    # the same run instead of a fixed one, every link within 25% of the fastest (a healthy
    # cluster has no slow link), and none as far off as a link at half the rate
    assert all(0.5 <= v <= 1.2 for v in links), bw
    assert min(links) >= 0.75 * max(links), bw
    assert report["allreduce"]["ok"] and report["allreduce"]["ranks_ok"] == 4


def test_missing_rank_named(clean: Lab) -> None:
    runs = run_check(clean, FAST, nodes=[0, 1, 2])
    assert runs[0].returncode == 1, _diag(runs)
    report = runs[0].json()
    cause = _cause(report, "missing-ranks")
    assert report["root_cause"]["id"] == "missing-ranks"
    assert cause["ranks"] == [3]
    assert _host(clean, 1) in cause["detail"] and _host(clean, 2) in cause["detail"]
    assert runs[1].returncode == 1 and "missing-ranks" in runs[1].json()["line"]


def test_duplicate_rank_named(clean: Lab) -> None:
    runs = run_check(clean, FAST, per_node={2: {"RANK": "1", "NODE_RANK": "1"}})
    assert runs[0].returncode == 1, _diag(runs)
    report = runs[0].json()
    cause = _cause(report, "duplicate-rank")
    assert report["root_cause"]["id"] == "duplicate-rank"
    assert cause["ranks"] == [1]
    assert any(_host(clean, 1) in h for h in cause["hosts"])
    assert any(_host(clean, 2) in h for h in cause["hosts"])
    assert _cause(report, "missing-ranks")["ranks"] == [2]


def test_world_size_mismatch_named(clean: Lab) -> None:
    runs = run_check(clean, FAST, per_node={3: {"WORLD_SIZE": "8"}})
    assert runs[0].returncode == 1, _diag(runs)
    report = runs[0].json()
    cause = _cause(report, "world-size-mismatch")
    assert report["root_cause"]["id"] == "world-size-mismatch"
    assert cause["ranks"] == [3] and _host(clean, 3) in cause["hosts"][0]
    assert "WORLD_SIZE=8" in cause["detail"]


def test_master_port_blocked_named_by_every_rank(clean: Lab) -> None:
    clean.fault("block-port", 0, port=29510)
    runs = run_check(clean, FAST)
    for node in (1, 2, 3):
        own = runs[node].json()
        assert runs[node].returncode == 1, _diag(runs)
        assert own["causes"][0]["id"] == "master-port-filtered", own
        assert own["causes"][0]["hosts"] == [_host(clean, node)]
    report = runs[0].json()
    assert runs[0].returncode == 1
    assert _cause(report, "missing-ranks")["ranks"] == [1, 2, 3]


def test_ephemeral_ports_blocked_on_one_node(clean: Lab) -> None:
    clean.fault("block-ephemeral", 2, port=29510)
    runs = run_check(clean, FAST)
    assert runs[0].returncode == 1, _diag(runs)
    report = runs[0].json()
    cause = _cause(report, "peer-port-blocked")
    assert report["root_cause"]["id"] == "peer-port-blocked"
    assert cause["ranks"] == [2] and _host(clean, 2) in cause["hosts"][0]
    assert [row[2] for i, row in enumerate(report["reachability"]) if i != 2] == ["filtered"] * 3


def test_mtu_mismatch_named(clean: Lab) -> None:
    clean.fault("mtu", 1, mtu=9000)
    runs = run_check(clean, [*FAST, "--no-matrix"])
    assert runs[0].returncode == 1, _diag(runs)
    report = runs[0].json()
    cause = _cause(report, "mtu-mismatch")
    assert cause["ranks"] == [1] and _host(clean, 1) in cause["hosts"][0]
    assert "mtu 1500" in cause["fix"]


def test_slow_node_named(clean: Lab) -> None:
    clean.fault("rate", 3, rate="100mbit")
    runs = run_check(clean, [*FAST, "--matrix"])
    assert runs[0].returncode == 1, _diag(runs)
    report = runs[0].json()
    cause = _cause(report, "slow-node")
    assert cause["ranks"] == [3] and _host(clean, 3) in cause["hosts"][0]
    bw = report["bandwidth_gbps"]
    assert all(bw[3][j] < 0.15 for j in range(3)), bw
    # a rate limit adds no round trip to an idle link: not high-latency (issue 57)
    assert not [c for c in report["causes"] if c["id"] == "high-latency"], report["causes"]


def test_a_delayed_node_is_high_latency_and_a_rate_limited_one_still_slow_node(
        clean: Lab) -> None:
    # one run, both faults (issue 57): node 2 behind a 40 ms delay (netem, else the lab's
    # delay line), node 3 shaped to 100 Mbit/s; the delay was named slow-node before
    clean.fault("delay", 2, ms=40)
    clean.fault("rate", 3, rate="100mbit")
    runs = run_check(clean, [*FAST, "--matrix"])
    assert runs[0].returncode == 1, _diag(runs)
    report = runs[0].json()
    latent = _cause(report, "high-latency")
    assert latent["ranks"] == [2] and _host(clean, 2) in latent["hosts"][0], latent
    assert any("ms round trip" in e for e in latent["evidence"]), latent
    assert "tc qdisc show dev eth0" in latent["fix"], latent
    # the shaped node keeps a normal round trip: slow-node, not high-latency
    assert _cause(report, "slow-node")["ranks"] == [3]
    assert [c["ranks"] for c in report["causes"] if c["id"] == "high-latency"] == [[2]]
    # the round trips shown: ~40 ms each way through node 2 (a busy delay line adds some);
    # elsewhere well under a millisecond, the faster way of each pair (a connect queued
    # behind a ring stream in the shaped node's 50 ms tbf queue: one way, not both)
    rtt = report["rtt_ms"]
    for i, j in itertools.combinations(range(4), 2):
        if 2 in (i, j):
            assert 35 <= rtt[i][j] <= 400 and 35 <= rtt[j][i] <= 400, rtt
        else:
            assert min(rtt[i][j], rtt[j][i]) < 10, rtt
    print(f"time to verdict: {max(r.seconds for r in runs.values()):.1f} s; "
          f"bandwidth {report['bandwidth_gbps']}; high-latency: {latent['detail']}")


def test_hostname_loopback_with_loopback_interface(clean: Lab) -> None:
    clean.fault("hostname-loopback", 1)
    runs = run_check(clean, FAST, per_node={1: {"GLOO_SOCKET_IFNAME": "lo"}})
    assert runs[0].returncode == 1, _diag(runs)
    report = runs[0].json()
    cause = _cause(report, "hostname-loopback")
    assert report["root_cause"]["id"] == "hostname-loopback"
    assert cause["ranks"] == [1] and _host(clean, 1) in cause["hosts"][0]


@pytest.mark.parametrize(("master", "cause_id"), [
    ("no-such-master.invalid", "master-unresolvable"),
    ("198.19.255.1", "master-no-route"),  # lab range, but no route from the node
])
def test_unreachable_master_named_by_the_rank_itself(clean: Lab, master: str,
                                                     cause_id: str) -> None:
    runs = run_check(clean, UNWAITED, nodes=[1], per_node={1: {"MASTER_ADDR": master}},
                     timeout=60)
    own = runs[1].json()
    assert runs[1].returncode == 1, _diag(runs)
    assert own["causes"][0]["id"] == cause_id, own
    assert own["causes"][0]["hosts"] == [_host(clean, 1)] and own["causes"][0]["fix"]
    assert runs[1].seconds < UNWAITED_S  # not a window waited


def test_interface_in_another_network_is_interface_mismatch(clean: Lab) -> None:
    clean.fault("extra-iface", 2)  # a docker0-like interface in a network no one routes
    runs = run_check(clean, FAST, per_node={2: {"GLOO_SOCKET_IFNAME": "docker0"}})
    assert runs[0].returncode == 1, _diag(runs)
    report = runs[0].json()
    assert report["root_cause"]["id"] == "interface-mismatch", report["causes"]
    cause = _cause(report, "interface-mismatch")
    assert cause["ranks"] == [2] and _host(clean, 2) in cause["hosts"][0]
    assert "docker0" in cause["detail"] and "198.18.0.0/24" in cause["fix"]


def test_hostnames_on_loopback_everywhere_pass_with_one_warning(clean: Lab) -> None:
    # a default Debian install on every node (127.0.1.1 <hostname>): check pins the interface,
    # so the fact is hostname-loopback, a warning, once: not also each doctor's names.hostname
    # as doctor-failed (one fact, one cause, one severity)
    for node in range(4):
        clean.fault("hostname-loopback", node)
    runs = run_check(clean, [*FAST, "--no-matrix"])
    report = runs[0].json()
    assert runs[0].returncode == 0 and report["verdict"] == "pass", _diag(runs)
    assert [c["id"] for c in report["causes"]] == ["hostname-loopback"], report["causes"]
    (cause,) = report["causes"]
    assert cause["severity"] == "warn" and cause["ranks"] == [0, 1, 2, 3]
    assert cause["evidence"] and cause["see_for_yourself"] == "getent ahosts $(hostname)"
    for node in report["nodes"]:  # the node table agrees with the cause
        assert node["doctor"]["judged"]["names.hostname"] == "hostname-loopback (warn)"
        assert "names.hostname" not in node["doctor"]["failed"]
    assert all(r.returncode == 0 for r in runs.values()), _diag(runs)
    print(f"time to verdict: {max(r.seconds for r in runs.values()):.1f} s")


def test_two_ranks_started_by_hand_on_one_machine_over_loopback_pass(clean: Lab) -> None:
    # the guides' single-machine test: MASTER_ADDR=127.0.0.1 WORLD_SIZE=2, two processes
    # started by hand (no NNODES, no LOCAL_WORLD_SIZE) on one Debian node: each doctor takes
    # it for a 2-node job on loopback, but check sees both ranks on one host, where it is right
    import subprocess
    import sys

    from tests.check.labcheck import node_env, wait_all

    clean.fault("hostname-loopback", 1)
    drop = ("NNODES", "NODE_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
    procs = {rank: clean.popen(1, [sys.executable, "-m", "ddpnet", "check", "--json", *FAST],
                               env=node_env(clean, 1, rank=rank, world=2, port=29517, drop=drop,
                                            extra={"MASTER_ADDR": "127.0.0.1"}),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in range(2)}
    runs = wait_all(procs, 90)
    report = runs[0].json()
    assert runs[0].returncode == 0 and report["verdict"] == "pass", _diag(runs)
    assert not [c for c in report["causes"] if c["id"] == "doctor-failed"], report["causes"]
    assert runs[1].returncode == 0, _diag(runs)
    print(f"time to verdict: {max(r.seconds for r in runs.values()):.1f} s")

"""Issue 29's path families on a real 3-node lab: each first breaks plain torch (a gloo
``init_process_group`` + ``all_reduce``, no interface variable: what a user's job does), then
``check`` names it on the right host with the kernel's evidence, then the fix it gives makes
both pass. Node 1 carries the fault: node 2's address is higher, so plain gloo dials node 1
(gloo's tcp ``Device::isInitiator``: the higher address connects, the lower listens)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from ddpnet.lab import Lab
from tests.check.labcheck import RankRun, run_check
from tests.lab_util import fresh_lab, requires_netns

pytestmark = [requires_netns, pytest.mark.root, pytest.mark.slow]

FAST = ["--join-timeout", "10", "--timeout", "20", "--no-matrix"]

#: a user's plain job: gloo on the hostname's address, one all_reduce; prints ok or why not
PLAIN = """
import datetime, sys, time, torch, torch.distributed as dist
t = time.monotonic()
try:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(sys.argv[1])))
    x = torch.ones(1); dist.all_reduce(x)
    print("ok" if x.item() == dist.get_world_size() else "wrong", flush=True)
except Exception as exc:
    print("fail %.1f %s" % (time.monotonic() - t, str(exc).splitlines()[0][:300]), flush=True)
    sys.exit(1)
"""


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with fresh_lab("pth", nodes=3) as lab:
        yield lab


def plain_torch(lab: Lab, timeout: float = 8, port: int = 29520) -> dict[int, str]:
    """Each node's first output line of the plain job ("" when it was killed), by node."""
    env = {"GLOO_SOCKET_IFNAME": "", "NCCL_SOCKET_IFNAME": "", "PYTHONWARNINGS": "ignore"}
    results = lab.run([sys.executable, "-c", PLAIN, str(timeout)], env=env,
                      timeout=timeout + 25, master_port=port)
    return {r.node.index: (r.stdout.strip().splitlines() or [""])[0] for r in results}


def _diag(runs: dict[int, RankRun]) -> str:
    return "\n".join(f"--- node {i} rc={r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}"
                     for i, r in runs.items())


def _check(lab: Lab) -> tuple[dict[int, RankRun], dict[str, Any]]:
    runs = run_check(lab, FAST, timeout=60)
    return runs, runs[0].json()


def _timed(report: dict[str, Any], runs: dict[int, RankRun], case: str) -> None:
    """Seconds from the last rank starting to rank 0's verdict, for the record."""
    print(f"time to verdict {case}: {runs[0].seconds:.1f} s "
          f"(check's own total {report['timings']['total']:.1f} s)")


def _passes(lab: Lab) -> None:
    runs, report = _check(lab)
    assert runs[0].returncode == 0 and report["verdict"] == "pass", _diag(runs)
    assert set(plain_torch(lab).values()) == {"ok"}


def test_second_nic_winning_the_route_with_strict_rp_filter_is_reverse_path_drop(
        clean: Lab) -> None:
    n1 = clean.nodes[1]
    clean.fault("twin-nic", 1, address="198.18.0.202/24")
    plain = plain_torch(clean)
    assert plain[2] != "ok", plain  # node 2 dials node 1's hostname address: dropped
    # the job pins eth0 on node 1 (the report): check's own mesh fails there
    pinned = {1: {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "eth0"}}
    runs = run_check(clean, FAST, per_node=pinned, timeout=60)
    report = runs[0].json()
    cause = report["root_cause"]
    assert runs[0].returncode == 1 and cause["id"] == "reverse-path-drop", _diag(runs)
    _timed(report, runs, "reverse-path-drop (pinned)")
    assert cause["ranks"] == [1] and n1.hostname in cause["hosts"][0]
    assert f"ip route get {n1.address} from" in cause["detail"] and "rp_filter=1" \
        in cause["detail"] and "route back leaves by eth1" in cause["detail"]
    assert not [c for c in report["causes"] if c["id"] in ("peer-port-blocked",
                                                           "nic-same-subnet")]
    assert any("firewall" in r for r in cause["ruled_out"]) and cause["confidence"] == "high"
    assert "gloo" in cause["detail"] and "NCCL" in cause["detail"]
    # unpinned, check binds eth1 (the route's) and works, but a plain job binds the
    # hostname's address on eth0: named as a warning, as hostname-loopback is
    runs, report = _check(clean)
    _timed(report, runs, "reverse-path-drop (plain job's binding)")
    warn = next(c for c in report["causes"] if c["id"] == "reverse-path-drop")
    assert warn["severity"] == "warn" and warn["ranks"] == [1], _diag(runs)
    assert f"binds {n1.address} on eth0" in warn["detail"] and "hostname" in warn["detail"]
    # the fix it gives: loose reverse-path filtering
    assert "net.ipv4.conf.all.rp_filter=2" in cause["fix"]
    clean.exec(1, ["sysctl", "-qw", "net.ipv4.conf.all.rp_filter=2",
                   "net.ipv4.conf.eth0.rp_filter=2"])
    runs = run_check(clean, FAST, per_node=pinned, timeout=60)
    assert runs[0].returncode == 0 and runs[0].json()["verdict"] == "pass", _diag(runs)
    assert set(plain_torch(clean).values()) == {"ok"}


def test_replies_by_another_nic_through_a_policy_rule_are_asymmetric_route(
        clean: Lab) -> None:
    n1 = clean.nodes[1]
    clean.fault("policy-route", 1)
    plain = plain_torch(clean)
    assert "ok" not in plain.values(), plain
    runs = run_check(clean, FAST, timeout=60)
    # node 1 cannot reach the master either: it names its own path at once, no firewall
    own = runs[1].json()["causes"][0]
    assert runs[1].returncode == 1 and own["id"] == "asymmetric-route", _diag(runs)
    print(f"time to verdict asymmetric-route (rank 1's own): {runs[1].seconds:.1f} s")
    assert own["hosts"] == [n1.hostname] and "leave by wan0 (routing table 100" \
        in own["detail"] and "no firewall needs opening" in own["fix"]
    assert runs[0].returncode == 1  # rank 0 never passes without it
    # the fix (routing the cluster by eth0 in that table) makes both work
    clean.exec(1, ["ip", "route", "add", "198.18.0.0/24", "dev", "eth0", "table", "100"])
    _passes(clean)


def test_a_firewall_that_rejects_fails_gloo_fast_one_that_drops_hangs_it(clean: Lab) -> None:
    clean.fault("block-ephemeral", 1, port=29510, reject=True)
    plain = plain_torch(clean, timeout=20)
    # node 2 dials node 1 (higher address): refused within seconds, not waited out
    assert plain[2].startswith("fail") and "refused" in plain[2].lower(), plain
    assert float(plain[2].split()[1]) < 15, plain
    runs, report = _check(clean)
    cause = report["root_cause"]
    assert runs[0].returncode == 1 and cause["id"] == "peer-port-blocked", _diag(runs)
    _timed(report, runs, "peer-port-blocked (reject)")
    assert cause["ranks"] == [1] and "(refused)" in cause["detail"]
    assert "rejected with a reset: plain gloo fails within seconds" in cause["detail"]
    assert "plain gloo breaks on its pairs with rank(s) 2" in cause["detail"]
    assert "firewall.ephemeral found a rule" in " ".join(cause["evidence"])
    clean.clear()
    clean.fault("block-ephemeral", 1, port=29510)  # drop: the same pairs hang instead
    runs, report = _check(clean)
    cause = report["root_cause"]
    assert cause["id"] == "peer-port-blocked" and "(filtered)" in cause["detail"], _diag(runs)
    assert "plain gloo's connect waits out the process group's timeout" in cause["detail"]
    _timed(report, runs, "peer-port-blocked (drop)")


def test_a_node_with_another_nodes_address_is_duplicate_address(clean: Lab) -> None:
    n1 = clean.nodes[1]
    clean.fault("address", 2, address=f"{n1.address}/24")
    plain = plain_torch(clean)
    assert "ok" not in plain.values(), plain
    runs = run_check(clean, FAST, timeout=60)
    assert all(r.returncode == 1 for r in runs.values()), _diag(runs)
    # the master's replies reach one of the two: the other names it, before any firewall
    named = [(i, r) for i, r in runs.items() if i > 0 and r.json().get("causes")
             and r.json()["causes"][0]["id"] == "duplicate-address"]
    assert named, _diag(runs)
    i, run = named[0]
    print(f"time to verdict duplicate-address (rank {i}'s own): {run.seconds:.1f} s")
    own = run.json()["causes"][0]
    assert f"answers ARP for this node's own address {n1.address}" in own["detail"]
    assert own["hosts"] == [clean.nodes[i].hostname] and "no firewall" in own["fix"]


#: a plain job's small all_reduces, timed: what loss does to a training step's collectives
STEPS = """
import sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
x = torch.ones(1024)
t = time.monotonic()
for _ in range(int(sys.argv[1])):
    dist.all_reduce(x)
took = time.monotonic() - t
dist.barrier()
dist.destroy_process_group()  # an orderly exit: no rank leaves while another still reads
print("%.3f" % took, flush=True)
"""


def _steps(lab: Lab, count: int = 300) -> float:
    env = {"GLOO_SOCKET_IFNAME": "", "PYTHONWARNINGS": "ignore"}
    results = lab.run([sys.executable, "-c", STEPS, str(count)], env=env, timeout=120,
                      master_port=29521)
    assert all(r.ok for r in results), [r.stderr[-500:] for r in results]
    return max(float(r.stdout.split()[-1]) for r in results)


# 300 all_reduces timed healthy and lossy: with tests beside it the healthy run was CPU-bound
# and 5% loss read 1.2x slower instead of 1.5x (a rate measured): alone
@pytest.mark.solo
def test_a_few_percent_of_loss_on_one_node_is_named_with_the_loss_measured(
        clean: Lab) -> None:
    healthy = _steps(clean)
    clean.fault("loss", 2, percent=5)
    lossy = _steps(clean)
    # the same collectives, slower: a lost segment of a small all_reduce waits for a
    # retransmission timer. How many of the run's segments the 5 % takes varies from run to
    # run: a bound of 1.5x failed once alone on the machine (3.23 -> 4.52 s, 1.4x); 1.1x is
    # above two healthy runs' difference and below a run where the loss bit at all. The
    # verdict's evidence is the loss the check measured (below), not this ratio
    assert lossy > 1.1 * healthy, (healthy, lossy)
    runs, report = _check(clean)
    cause = report["root_cause"]
    assert runs[0].returncode == 1 and cause["id"] == "packet-loss", _diag(runs)
    _timed(report, runs, "packet-loss")
    print(f"300 all_reduces: {healthy:.2f} s healthy, {lossy:.2f} s with 5 % loss on node 2")
    assert cause["ranks"] == [2] and clean.nodes[2].hostname in cause["hosts"][0]
    measured = float(cause["detail"].split("%")[0])
    assert 3 <= measured <= 8, cause["detail"]
    assert "TCP" in cause["detail"] and "ethtool -S" in cause["fix"]
    clean.clear(2)  # the fix: the drops gone, nothing named
    runs, report = _check(clean)
    assert runs[0].returncode == 0 and not report["causes"], _diag(runs)

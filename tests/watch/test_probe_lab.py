"""watch.probe across real lab nodes, and watch.network naming what it found: each node runs
its listeners (a side channel, a "backend" port, a ProbeSink); nodes 0 and 1 probe every peer
while node 2's link is down, node 1's firewall drops the backend port, node 2's rate is cut,
or two nodes use a jumbo MTU the switch does not carry."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from ddpnet.lab import Lab
from ddpnet.watch import network
from ddpnet.watch.state import CollectiveRecord, LinkProbe, RankState, Snapshot
from tests.lab_util import fresh_lab, requires_netns

pytestmark = requires_netns

SIDE, BACKEND, SINK = 29601, 29602, 29603
PORTS = {"side": SIDE, "backend": BACKEND, "sink": SINK}
TIMEOUT = 2.0

LISTEN = f"""
import sys, time
from ddpnet.net.ports import listen_socket
from ddpnet.watch.probe import ProbeSink
keep = [listen_socket("", {SIDE}), listen_socket("", {BACKEND}), ProbeSink("", {SINK})]
print("ready", flush=True)
time.sleep(600)
"""

PROBE = """
import json, sys
from dataclasses import asdict
from ddpnet.watch.probe import probe_pairs
from ddpnet.watch.state import RankState
states = {int(r): RankState.from_dict(s) for r, s in json.loads(sys.argv[1]).items()}
found = probe_pairs(states, int(sys.argv[2]), timeout=float(sys.argv[3]))
print(json.dumps([asdict(p) for p in found]))
"""


def states_of(lab: Lab, published: float = 0.0) -> dict[int, RankState]:
    """Three ranks, one per node, all inside all_reduce #9 (what the watchdog would see)."""
    flight = (CollectiveRecord(seq=9, op="all_reduce", started=100.0),)
    return {n.index: RankState(rank=n.index, world_size=3, host=n.hostname, pid=1,
                               interface=n.ifname, address=n.address, recent=flight,
                               published=published, extra={"ports": PORTS})
            for n in lab.nodes}


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with fresh_lab("whn", nodes=3) as lab:
        for node in range(3):
            proc = lab.popen(node, [sys.executable, "-c", LISTEN], stdout=subprocess.PIPE,
                             text=True)
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield lab


@pytest.fixture
def clean(lab: Lab) -> Iterator[Lab]:
    lab.clear()
    yield lab
    lab.clear()


def probe_from(lab: Lab, node: int) -> list[LinkProbe]:
    states = json.dumps({r: s.to_dict() for r, s in states_of(lab).items()})
    done = lab.exec(node, [sys.executable, "-c", PROBE, states, str(node), str(TIMEOUT)],
                    timeout=60)
    assert done.returncode == 0, done.stderr
    return [LinkProbe(**p) for p in json.loads(done.stdout)]


def probe_all(lab: Lab) -> tuple[LinkProbe, ...]:
    """What nodes 0 and 1 find (node 2's own results are the ones a downed link would lose)."""
    with ThreadPoolExecutor(2) as pool:
        rows = list(pool.map(lambda n: probe_from(lab, n), (0, 1)))
    return tuple(p for row in rows for p in row)


def diagnose(lab: Lab, probes: tuple[LinkProbe, ...], published: float = 0.0) -> Any:
    return network.detect(Snapshot(3, 130.0, states_of(lab, published), probes=probes))


def gso(lab: Lab, node: int, segs: int) -> None:
    done = lab.exec(node, ["ip", "link", "set", "dev", lab.node(node).ifname, "gso_max_segs",
                           str(segs)])
    assert done.returncode == 0, done.stderr


def of(probes: tuple[LinkProbe, ...], src: int, dst: int, what: str,
       purpose: str) -> LinkProbe:
    return next(p for p in probes if (p.src_rank, p.dst_rank, p.what, p.purpose)
                == (src, dst, what, purpose))


def test_healthy_lab_every_probe_passes(clean: Lab) -> None:
    probes = probe_all(clean)
    assert len(probes) == 2 * 2 * 4  # 2 probers x 2 peers x (3 ports + 1 stream)
    assert all(p.reachable for p in probes), [p.detail for p in probes if not p.reachable]
    assert all(p.rate_gbps for p in probes if p.what == "stream")
    assert diagnose(clean, probes) is None


def test_link_down_names_the_node(clean: Lab) -> None:
    clean.fault("link-down", 2)
    probes = probe_all(clean)
    for src in (0, 1):
        p = of(probes, src, 2, "connect", "side")
        assert not p.reachable and p.outcome in ("timeout", "unreachable"), p.detail
    assert of(probes, 0, 1, "connect", "backend").reachable
    found = diagnose(clean, probes)
    assert found is not None and found.ranks == (2,), found
    assert found.summary.startswith(f"link down: rank 2 ({clean.node(2).hostname}")


def test_firewall_drop_names_the_node_and_port(clean: Lab) -> None:
    clean.fault("block-port", 1, port=BACKEND)
    probes = probe_all(clean)
    blocked = of(probes, 0, 1, "connect", "backend")
    assert (blocked.reachable, blocked.outcome) == (False, "timeout")
    assert of(probes, 0, 1, "connect", "side").reachable
    assert of(probes, 1, 2, "connect", "backend").reachable  # node 1's egress is fine
    found = diagnose(clean, probes)
    assert found is not None and found.summary.startswith("firewall:"), found
    assert f"rank 1 ({clean.node(1).hostname}" in found.summary
    assert str(BACKEND) in found.summary and "dropped" in found.summary


def test_inbound_firewall_that_keeps_established_connections(clean: Lab) -> None:
    """block-ephemeral on node 1 drops every new connection to it but keeps established ones
    (its heartbeat): all its ports time out while it still publishes."""
    clean.fault("block-ephemeral", 1)
    probes = probe_all(clean)
    for purpose in ("side", "backend", "sink"):
        assert of(probes, 0, 1, "connect", purpose).outcome == "timeout"
    assert of(probes, 1, 2, "connect", "side").reachable  # its own connections go out
    assert of(probes, 0, 2, "stream", "sink").reachable
    found = diagnose(clean, probes, published=129.0)
    assert found is not None, probes
    assert found.summary.startswith(f"firewall: every new connection to rank 1 "
                                    f"({clean.node(1).hostname}"), found
    silent = diagnose(clean, probes)  # no fresh heartbeat: the link is down as far as we know
    assert silent is not None and silent.summary.startswith("link down")


def test_rate_cut_names_the_slow_node(clean: Lab) -> None:
    clean.fault("rate", 2, rate="20mbit")
    probes = probe_all(clean)
    slow = of(probes, 0, 2, "stream", "sink")
    fast = of(probes, 0, 1, "stream", "sink")
    assert slow.rate_gbps is not None and slow.rate_gbps < 0.05, slow.detail
    assert fast.rate_gbps is not None and fast.rate_gbps > 4 * slow.rate_gbps, fast.detail
    found = diagnose(clean, probes)
    assert found is not None and found.summary.startswith("slow link: rank 2"), found


def test_jumbo_mtu_the_switch_drops_names_the_link(clean: Lab) -> None:
    """Nodes 0 and 1 at MTU 9000 agree on a 8960-byte MSS; the switch carries 1500: the
    handshake passes, full-size segments vanish."""
    clean.fault("mtu", 0, mtu=9000)
    clean.fault("mtu", 1, mtu=9000)
    # a veth passes GSO super-frames whatever the MTU of its peer, where a real switch drops
    # the frames: one segment per packet makes the lab's switch port drop them too
    try:
        for node in (0, 1):
            gso(clean, node, 1)
        probes = probe_all(clean)
    finally:
        for node in (0, 1):
            gso(clean, node, 65535)
    stalled = of(probes, 0, 1, "stream", "sink")
    assert of(probes, 0, 1, "connect", "sink").reachable
    assert (stalled.reachable, stalled.outcome) == (False, "stalled"), stalled.detail
    assert of(probes, 0, 2, "stream", "sink").reachable  # node 2 keeps 1500: MSS fits
    found = diagnose(clean, probes)
    assert found is not None and found.summary.startswith("MTU: rank 0"), found
    assert found.ranks == (0, 1)

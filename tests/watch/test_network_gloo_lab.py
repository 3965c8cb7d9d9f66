"""A real gloo group hung by a firewall rule added mid-run, named from real probes: three lab
nodes run one rank each (all_reduce in a loop), each publishing its side channel, its sink
and gloo's own listener (``listening_ports``) as ``backend``; node 1's firewall then drops
its gloo port. The group stops; probes from nodes 0 and 2 find node 1's side channel
answering and its gloo port dropped, and ``network.detect`` names rank 1 and that port."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any

import pytest

from ddpnet.lab import Lab
from ddpnet.lab.topology import run_environ
from ddpnet.watch import network
from ddpnet.watch.state import CollectiveRecord, LinkProbe, RankState, Snapshot
from tests.lab_util import fresh_lab, requires_netns

pytestmark = requires_netns

RANK = """
import json, os, sys, time
import torch
import torch.distributed as dist
from ddpnet.net.ports import listen_socket
from ddpnet.watch.probe import ProbeSink, listening_ports

dist.init_process_group("gloo")
side = listen_socket("", 0)
sink = ProbeSink("")
ports = {"side": side.getsockname()[1], "sink": sink.port}
gloo = listening_ports(exclude=[*ports.values(), int(os.environ["MASTER_PORT"])])
print(json.dumps({**ports, "backend": gloo[0]}), flush=True)
t = torch.ones(1 << 12)
step = 0
while True:
    dist.all_reduce(t)
    step += 1
    if step % 20 == 0:
        print(step, flush=True)
    time.sleep(0.01)
"""

PROBE = """
import json, sys
from dataclasses import asdict
from ddpnet.watch.probe import probe_pairs
from ddpnet.watch.state import RankState
states = {int(r): RankState.from_dict(s) for r, s in json.loads(sys.argv[1]).items()}
print(json.dumps([asdict(p) for p in probe_pairs(states, int(sys.argv[2]), timeout=2.0)]))
"""


class Lines:
    """A rank's stdout lines, read by a daemon thread (readline blocks; this never does)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.queue: queue.Queue[str] = queue.Queue()
        assert proc.stdout is not None
        stdout = proc.stdout
        threading.Thread(target=lambda: [self.queue.put(line) for line in stdout],
                         daemon=True).start()

    def next(self, timeout: float) -> str | None:
        try:
            return self.queue.get(timeout=timeout)
        except queue.Empty:
            return None


@pytest.fixture
def group() -> Iterator[tuple[Lab, list[Lines], dict[int, dict[str, int]]]]:
    with fresh_lab("whg", nodes=3) as lab:
        lines = [Lines(lab.popen(n, [sys.executable, "-c", RANK], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True,
                                 env={**run_environ(lab.plan, [0, 1, 2], n, 29555),
                                      "GLOO_SOCKET_IFNAME": lab.node(n).ifname}))
                 for n in range(3)]
        ports = {}
        for n, rank in enumerate(lines):
            line = rank.next(90)
            assert line, f"rank {n} did not start"
            ports[n] = json.loads(line)
        yield lab, lines, ports


def states(lab: Lab, ports: dict[int, dict[str, int]]) -> dict[int, RankState]:
    flight = (CollectiveRecord(seq=500, op="all_reduce", started=100.0),)
    return {n.index: RankState(rank=n.index, world_size=3, host=n.hostname, interface=n.ifname,
                               address=n.address, recent=flight, published=129.0,
                               extra={"ports": ports[n.index]})
            for n in lab.nodes}


def probe_from(lab: Lab, node: int, published: dict[int, RankState]) -> list[LinkProbe]:
    arg = json.dumps({r: s.to_dict() for r, s in published.items()})
    done = lab.exec(node, [sys.executable, "-c", PROBE, arg, str(node)], timeout=60)
    assert done.returncode == 0, done.stderr
    return [LinkProbe(**p) for p in json.loads(done.stdout)]


def progress(rank: Lines, seconds: float) -> bool:
    """Whether the rank reports more steps within ``seconds``."""
    return bool(rank.next(seconds))


def test_firewall_on_gloo_port_mid_run_is_named(group: Any) -> None:
    lab, ranks, ports = group
    assert progress(ranks[0], 30)  # training runs
    lab.fault("block-port", 1, port=ports[1]["backend"])
    time.sleep(1.0)
    for rank in ranks:  # drain what was printed before the rule bit
        while progress(rank, 0.5):
            pass
    assert not progress(ranks[0], 3.0), "the group should be stuck"
    published = states(lab, ports)
    with ThreadPoolExecutor(2) as pool:
        rows = list(pool.map(lambda n: probe_from(lab, n, published), (0, 2)))
    probes = tuple(p for row in rows for p in row)
    to_1 = {(p.src_rank, p.purpose): p for p in probes if p.dst_rank == 1 and p.what == "connect"}
    assert to_1[0, "side"].reachable and to_1[2, "sink"].reachable, [asdict(p) for p in probes]
    assert to_1[0, "backend"].outcome == to_1[2, "backend"].outcome == "timeout"
    found = network.detect(Snapshot(3, 130.0, published, probes=probes))
    assert found is not None, probes
    assert found.summary.startswith(f"firewall: rank 1 ({lab.node(1).hostname}"), found
    assert str(ports[1]["backend"]) in found.summary and found.ranks == (1,)

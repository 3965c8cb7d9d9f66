"""The pure helpers of the mesh, process-group, tournament and bench stages."""

from __future__ import annotations

import json

from ddpnet.check.stages.allreduce import summary
from ddpnet.check.stages.bandwidth import _column, assemble
from ddpnet.check.stages.reachability import as_peers, mtu_targets, peers_of
from ddpnet.check.stages.sweep import slowest_link


def test_peers_are_the_ranks_that_published_facts() -> None:
    got = {0: {"address": "10.0.0.1", "mesh_port": 4000, "mtu_port": 5000, "mtu": 9000,
               "subnet": "10.0.0.0/24"},
           2: {"address": "10.0.0.3", "mesh_port": 4002}}
    peers = peers_of(got, 3)
    # the subnet last: each rank asks its kernel about one peer per subnet (check.paths)
    assert peers == [["10.0.0.1", 4000, 5000, 9000, "10.0.0.0/24"], None,
                     ["10.0.0.3", 4002, None, None, None]]
    assert as_peers(peers) == [("10.0.0.1", 4000), None, ("10.0.0.3", 4002)]
    # path-MTU probes go only to peers that published an echo port and an MTU
    assert mtu_targets(peers) == [("10.0.0.1", 5000, 9000), None, None]


def test_columns_make_the_matrix_by_sender_and_receiver() -> None:
    col = _column({(0, 1): (125_000_000, 1.0), (1, 2): (0, 0.0)}, 3)
    assert col == [None, 1.0, None]  # 1 Gbit in 1 s from rank 1; nothing timed from 2
    gbps = assemble({0: col, 2: [2.0, None, None]}, 3)
    assert gbps == [[None, None, 2.0], [1.0, None, None], [None, None, None]]
    assert slowest_link(gbps) == 1.0 and slowest_link(()) == 0.0


def test_allreduce_summary() -> None:
    pgs = {0: {"ok": True, "backend": "gloo", "expected": 3.0, "allreduce_s": 0.2},
           1: {"ok": False, "error": "timeout"}}
    assert summary(pgs, [0, 1]) == {"ok": False, "ranks_ok": 1, "backend": "gloo",
                                    "expected": 3.0, "max_seconds": 0.2}
    assert summary({}, [0])["ok"] is False


def test_nccls_own_failure_text_names_a_cause_once() -> None:
    from ddpnet.check.causes import Cause
    from ddpnet.check.context import Findings
    from ddpnet.check.registration import Registration
    from ddpnet.check.stages.allreduce import nccl_cause

    found = Findings(world=2, master="a:1")
    found.roster = [Registration(r, 2, 1, f"h{r}", f"10.0.0.{r}", "eth0", 1, "u")
                    for r in (0, 1)]
    pgs = {0: {"ok": False, "error": "ncclInvalidUsage: Duplicate GPU detected : rank 1 "
                                    "and rank 0 both on CUDA device 1000"},
           1: {"ok": False, "error": "Duplicate GPU detected : rank 0 and rank 1"}}
    cause = nccl_cause(found, pgs, [0, 1])
    assert cause is not None and cause.id == "ranks-share-gpu" and cause.ranks == (0, 1)
    assert cause.stage == "process-group" and "NCCL's failure on rank 0" in cause.detail
    found.causes.append(Cause("ranks-share-gpu", "from the facts", "fix"))
    assert nccl_cause(found, pgs, [0, 1]) is None  # the facts named it already
    assert nccl_cause(found, {0: {"ok": False, "error": "gloo: timeout"}}, [0]) is None


def test_a_rank_of_a_sampled_mesh_reads_only_its_own_peers() -> None:
    from ddpnet.check import mesh
    from ddpnet.check.stages import reachability

    world = 4096
    peers: list[list[object] | None] = [[f"198.18.{i // 256}.{i % 256}", 40000 + i, 50000 + i,
                                         1500] for i in range(world)]
    offsets = mesh.sample_offsets(world, 1)
    mine = reachability.own_peers(peers, 7, mesh.sample_targets(7, world, offsets))
    assert mine.pop("ring") == []
    assert sorted(int(j) for j in mine) == sorted({7, *mesh.sample_targets(7, world, offsets)})
    assert len(json.dumps(mine)) < 2000  # against ~190 KB for every rank's listener
    expanded = reachability.expand(mine, world)
    assert expanded[7] == peers[7] and sum(p is not None for p in expanded) == len(mine)


def test_only_a_hosts_first_rank_probes_mtu_and_loss_toward_the_next_hosts_and_subnets() -> None:
    from ddpnet.check.stages import reachability

    # 4,096 ranks, 8 per host (512 hosts), two subnets of 256 hosts each
    def peer(r: int) -> list[object]:
        host = r // 8
        return [f"198.{18 + host // 256}.0.{host % 256}", 40000 + r, 50000 + r, 1500,
                f"198.{18 + host // 256}.0.0/24"]

    world = 4096
    peers: list[list[object] | None] = [peer(r) for r in range(world)]
    ring = reachability.host_ring(peers)
    assert len(ring) == 512 and all(r % 8 == 0 for r in ring)  # one prober per host
    # the next two hosts, and the host at the same position in the other subnet
    assert ring[0] == [8, 16, 2048] and ring[8] == [16, 24, 2056]
    assert ring[4088] == [0, 8, 2040] and ring[2048] == [2056, 2064, 0]  # wraps round
    # a host's other ranks probe nothing; what they read still holds the sampled targets
    mine = reachability.own_peers(peers, 9, (10, 11), ring.get(9, ()))
    assert mine["ring"] == [] and sorted(k for k in mine if k != "ring") == ["10", "11", "9"]
    first = reachability.own_peers(peers, 8, (9, 10), ring[8])
    assert first["ring"] == [16, 24, 2056] and {"16", "24", "2056"} <= set(first)
    # one rank per host (every simulated node its own address): every rank probes
    single = reachability.host_ring([peer(r * 8) for r in range(16)])
    assert single[15] == [0, 1] and len(single) == 16


def test_a_host_ring_stays_a_ring_when_every_host_is_its_own_subnet() -> None:
    from collections import Counter

    from ddpnet.check.stages import reachability

    # one /32 per host (as some clouds give): each host probes at most 4 others, and no
    # host is probed by more than 4 (not every host probing every other subnet's host)
    peers: list[list[object] | None] = [
        [f"10.0.{h // 256}.{h % 256}", 40000, 50000, 1500, f"10.0.{h // 256}.{h % 256}/32"]
        for h in range(1000)]
    ring = reachability.host_ring(peers)
    assert max(len(v) for v in ring.values()) <= 4
    assert max(Counter(t for v in ring.values() for t in v).values()) <= 4
    assert ring[999] == [0, 1]  # the next hosts are the next subnets' hosts too

"""Stage 3: the full mesh. Every rank connects to every other rank's listener (bounded
fan-out) and publishes its row; rank 0 analyses the N x N matrix (``check.mesh``)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from ddpnet.check import mesh
from ddpnet.check.context import Findings, RankContext

Peer = tuple[str, int]


def peers_of(got: Mapping[int, Mapping[str, Any]], world: int) -> list[list[Any] | None]:
    """``[address, mesh_port]`` of every rank that published its facts, by rank (pure)."""
    return [[got[r]["address"], got[r]["mesh_port"]] if r in got else None
            for r in range(world)]


def as_peers(peers: Sequence[Sequence[Any] | None]) -> list[Peer | None]:
    return [(str(p[0]), int(p[1])) if p else None for p in peers]


def probe(ctx: RankContext, peers: Sequence[Sequence[Any] | None]) -> None:
    """Connect to every peer; publish this rank's row."""
    row = mesh.probe_row(ctx.rank, as_peers(peers), timeout=ctx.opts.connect_timeout,
                         fanout=ctx.opts.fanout)
    ctx.store.publish("mesh", ctx.rank, row)


def _blocking(found: Findings) -> bool:
    return any(c.id == "hostname-loopback" and c.severity == "fail" for c in found.causes)


def mesh_stage(ctx: RankContext, found: Findings, got: Mapping[int, Mapping[str, Any]],
               peers: list[list[Any] | None]) -> bool:
    """Rank 0: probe, gather the rows, analyse; publish whether the process group may
    start, and return it."""
    t = time.monotonic()
    world, opts = ctx.world, ctx.opts
    ctx.progress(f"reachability: {world} x {world} connects (fan-out {opts.fanout})")
    probe(ctx, peers)
    rows = ctx.store.gather("mesh", found.ranks, opts.stage_timeout + opts.connect_timeout * 2)
    matrix = tuple(tuple(rows.get(i, [mesh.UNKNOWN] * world)) for i in range(world))
    lost = [r for r in found.ranks if r not in rows]
    if lost:
        found.causes.append(found.timeout_cause("reachability", lost))
    causes = mesh.analyze(matrix, found.labels, [p[1] if p else None for p in peers],
                          ctx.cfg.master_port,
                          str(got[0].get("subnet") or "<cluster-subnet>"))
    found.causes.extend(causes)
    found.extra["reachability"] = matrix
    found.stages["reachability"] = "fail" if causes or lost else "pass"
    took = ctx.took("reachability", t)
    ctx.progress(f"reachability: {sum(s == mesh.OK for r in matrix for s in r)} of "
                 f"{world * (world - 1)} links ok in {took:.1f} s")
    go = not causes and not lost and not _blocking(found)
    ctx.store.set("stage/pg", {"go": go})
    return go


def announce(ctx: RankContext, found: Findings,
             got: Mapping[int, Mapping[str, Any]]) -> list[list[Any] | None] | None:
    """Rank 0: publish every rank's listener (the go for the mesh) when every rank's facts
    came; the peers, or None when the check stops here."""
    peers = peers_of(got, ctx.world)
    complete = all(r in got for r in found.ranks)
    ctx.store.set("stage/mesh", {"go": complete, "peers": peers})
    return peers if complete else None

"""Stage 5: the bandwidth matrix as a round-robin tournament (``check.tournament``): each
round every rank streams to its partner while the partner streams back; each rank publishes
the column its listener measured, rank 0 assembles the N x N matrix and analyses it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from ddpnet.check import latency, tournament
from ddpnet.check.causes import Cause
from ddpnet.check.context import Findings, RankContext
from ddpnet.check.store import StageTimeout

Matrix = list[list[float | None]]


def _round_barrier(ctx: RankContext, rnd: int, timeout: float) -> None:
    if ctx.store.add(f"bw/{rnd}") == ctx.world:
        ctx.store.set(f"bw/{rnd}/go", 1)
    ctx.store.get(f"bw/{rnd}/go", timeout)


def _column(received: Mapping[tuple[int, int], tuple[int, float]],
            world: int) -> list[float | None]:
    """Gb/s from each sender, as this rank's listener measured it (pure)."""
    col: list[float | None] = [None] * world
    for (_rnd, src), (nbytes, secs) in received.items():
        if secs > 0:
            col[src] = round(nbytes * 8 / secs / 1e9, 4)
    return col


def play(ctx: RankContext, peers: Sequence[Sequence[Any] | None]) -> None:
    """Play every round: stream to this round's partner while it streams to us; publish the
    incoming column ``[src] -> Gb/s`` measured by our listener. Raises StageTimeout when a
    round's barrier is not reached in time."""
    me, opts, received = ctx.rank, ctx.opts, ctx.listener.received
    rounds = tournament.schedule(ctx.world)
    for rnd in range(len(rounds)):
        _round_barrier(ctx, rnd, opts.bw_seconds + opts.stage_timeout)
        other = tournament.partner(rounds, rnd, me)
        if other is None or peers[other] is None:
            continue
        addr, port = peers[other][:2]  # type: ignore[index]
        with contextlib.suppress(OSError):
            tournament.send_stream(addr, int(port), rnd, me, seconds=opts.bw_seconds,
                                   timeout=opts.connect_timeout + opts.bw_seconds)
        deadline = time.monotonic() + opts.connect_timeout + 2
        while (rnd, other) not in received and time.monotonic() < deadline:
            time.sleep(0.01)
    ctx.store.publish("bwcol", me, _column(received, ctx.world))


def _stuck_cause(found: Findings, why: str) -> Cause:
    stuck = [r for r in found.ranks if r != 0]
    return Cause(
        id="stage-timeout", stage="bandwidth", ranks=tuple(stuck),
        hosts=tuple(found.label_of(r) for r in stuck),
        detail=f"the bandwidth round barrier ({why}) timed out: a rank died or hung",
        fix="look at those ranks' own output; rerun with --no-matrix to skip the stage",
        evidence=(f"the bandwidth round barrier ({why}) passed its deadline",),
        confidence="low",  # a hung, crashed or starved rank all look the same from rank 0
        see_for_yourself="ddpnet check --no-matrix",
    )


def assemble(cols: Mapping[int, Sequence[float | None]], world: int) -> Matrix:
    """``gbps[src][dst]`` from each destination's column (pure)."""
    gbps: Matrix = [[None] * world for _ in range(world)]
    for dst, col in cols.items():
        for src, v in enumerate(col):
            gbps[src][dst] = v
    return gbps


def _judge(found: Findings, gbps: Matrix) -> list[Cause]:
    """Slow links and nodes among the links that cross a NIC only: ranks of one host talk
    over loopback, where the streams compete for CPUs, and "check the switch ports" would
    be a false alarm (``make demo``). Links whose round trip is high are left to
    ``high-latency`` (``check.latency``): TCP's window per round trip slows them, not a
    NIC."""
    by_rank = {r.rank: r.address for r in found.roster}
    judged, blanked = tournament.cross_nic(gbps, [by_rank.get(r, "") for r in range(len(gbps))])
    if blanked:
        note = (f"bandwidth: {blanked} same-host link(s) not judged (loopback measures CPU "
                "contention, not the network); slow-link/slow-node compare only links that "
                "cross a NIC")
        found.extra["notes"] = (*found.extra.get("notes", ()), note)
    found.rates = {(i, j): v for i, row in enumerate(judged) for j, v in enumerate(row)
                   if v is not None}
    found.latency = latency.consistent(found.latency, found.rates, found.windows)
    return tournament.analyze(without(judged, found.latency.explained()
                                      if found.latency is not None else frozenset()),
                              found.labels)


def without(gbps: Matrix, pairs: Collection[tuple[int, int]]) -> Matrix:
    """The matrix with ``pairs`` blanked (pure)."""
    return [[None if (i, j) in pairs else v for j, v in enumerate(row)]
            for i, row in enumerate(gbps)]


def matrix_stage(ctx: RankContext, found: Findings, peers: Sequence[Sequence[Any] | None]
                 ) -> None:
    """Rank 0: play the tournament, gather the columns, analyse the matrix."""
    t = time.monotonic()
    world = ctx.world
    ctx.progress(tournament.rounds_line(world, ctx.opts.bw_seconds))
    try:
        play(ctx, peers)
    except StageTimeout as exc:  # a rank stopped answering mid-tournament
        ctx.store.publish("bwcol", 0, [None] * world)
        found.causes.append(_stuck_cause(found, str(exc)))
    gbps = assemble(ctx.store.gather("bwcol", found.ranks, ctx.opts.stage_timeout), world)
    found.extra["bandwidth_gbps"] = tuple(tuple(r) for r in gbps)
    causes = _judge(found, gbps)
    found.causes.extend(causes)
    found.stages["bandwidth"] = "pass" if not causes else (
        "fail" if any(c.severity == "fail" for c in causes) else "warn")
    took = ctx.took("bandwidth", t)
    ctx.progress(f"bandwidth: done in {took:.1f} s")

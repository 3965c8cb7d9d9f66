"""Ranks > 0: publish what this rank sees, follow rank 0's go/stop after each stage, and
print one line with the cluster verdict. Every wait is bounded: a rank 0 that stops
answering is named, never waited for forever."""

from __future__ import annotations

import contextlib

from ddpnet.check.context import RankContext, RankOutcome
from ddpnet.check.coordinator import verdict_line
from ddpnet.check.pmtu import PeerMtu
from ddpnet.check.stages import (
    allreduce,
    bandwidth,
    facts,
    networks,
    pathmtu,
    reachability,
    rendezvous,
    sweep,
)
from ddpnet.check.store import StageTimeout


def follow(ctx: RankContext) -> RankOutcome:
    """Every stage on a rank > 0, then rank 0's verdict."""
    try:
        # before the store carries anything big: a path that drops big frames stalls it
        ctx.to_rank0 = pathmtu.probe_master(ctx)
        joined = rendezvous.join(ctx)
        if isinstance(joined, RankOutcome):
            return joined
        if ctx.to_rank0 is not None and PeerMtu.from_dict(ctx.to_rank0).broken:
            return pathmtu.stop_here(ctx, ctx.to_rank0)
        wait = _stages(ctx, joined) if joined.plan["ok"] else ctx.budget
        return _verdict(ctx, wait)
    except StageTimeout as exc:
        if ctx.store.gone:  # silent after the join: the master's packets go elsewhere?
            _raise_if_duplicate(ctx)
        return RankOutcome(ctx.rank, ctx.host, False,
                           f"{ctx.who}: stopped: rank 0 did not answer in time "
                           f"(waiting for {exc})")


def _raise_if_duplicate(ctx: RankContext) -> None:
    """``duplicate-address`` (a RendezvousError, this rank's own cause) when another host
    answers ARP for this node's address: which of the two the master reaches flips with
    each ARP answer, so a rank that joined can lose its store half-way."""
    from ddpnet.net.probe import duplicate_of_master

    twin = duplicate_of_master(ctx.cfg, ctx.host)
    if twin is not None:
        raise twin


def _stages(ctx: RankContext, joined: rendezvous.Joined) -> float:
    """Each stage runs when rank 0 says go; raises StageTimeout when it says nothing.
    Returns how long to wait for the verdict (after the bench rank 0 may still sweep)."""
    facts.publish(ctx, joined.clock_offset)
    stage = ctx.store.get("stage/mesh", ctx.budget)
    if not stage["go"]:
        return ctx.budget
    peers, ring = reachability.peers_for(ctx, stage)
    nets = networks.receive(ctx)
    reachability.probe(ctx, peers, ring)
    if not ctx.store.get("stage/pg", ctx.budget + ctx.opts.connect_timeout * 2)["go"]:
        return ctx.budget
    networks.send(ctx, nets)
    allreduce.join(ctx)
    if ctx.store.get("stage/bw", ctx.budget)["go"]:
        bandwidth.play(ctx, peers)
    if joined.plan["bench"]:
        sweep.follow(ctx)
    allreduce.destroy()
    return ctx.budget + 60


def _verdict(ctx: RankContext, timeout: float) -> RankOutcome:
    """Rank 0's verdict as this rank's one line; acknowledged so rank 0 can leave."""
    try:
        result = ctx.store.get("result", timeout)
    except StageTimeout:
        return RankOutcome(ctx.rank, ctx.host, False,
                           f"{ctx.who}: stopped: rank 0 did not publish a verdict in time")
    with contextlib.suppress(Exception):
        ctx.store.add("ack")
    verdict = str(result.get("verdict"))
    return RankOutcome(ctx.rank, ctx.host, verdict == "pass",
                       verdict_line(ctx.rank, ctx.host, ctx.address, verdict,
                                    result.get("root")))

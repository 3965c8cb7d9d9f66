"""Rank 0: host the judgement. Gather each stage from every rank (bounded), compare,
decide go or stop for the next stage, and publish the verdict the other ranks print."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from ddpnet.check.causes import Cause, host_label
from ddpnet.check.context import Findings, RankContext, RankOutcome
from ddpnet.check.stages import (
    allreduce,
    bandwidth,
    facts,
    latency,
    networks,
    pathmtu,
    reachability,
    rendezvous,
    sweep,
)
from ddpnet.check.stages.rendezvous import Plan

#: how long rank 0 waits for the other ranks to read the verdict before it leaves
ACK_TIMEOUT = 3.0


def verdict_line(rank: int, host: str, address: str, verdict: str,
                 root: Cause | dict[str, object] | None) -> str:
    """The one line a rank prints about the cluster verdict (pure)."""
    who = f"rank {rank} {host_label(host, address)}"
    if root is None:
        return f"{who}: ok (cluster verdict {verdict})"
    rid = root.id if isinstance(root, Cause) else root.get("id")
    detail = root.detail if isinstance(root, Cause) else root.get("detail", "")
    return f"{who}: cluster verdict {verdict}: {rid}: {detail}"


def result_record(verdict: str, root: Cause | None) -> dict[str, object]:
    """What every rank reads at the end (pure): the verdict and what its line prints of the
    root cause. Not the whole cause: its evidence has a line per rank named (a clock skew
    on 500 of 4,096 ranks: ~65 KB, read by every rank: 280 MB served by rank 0's store)."""
    return {"verdict": verdict,
            "root": {"id": root.id, "detail": root.detail} if root else None}


def coordinate(ctx: RankContext) -> RankOutcome:
    """Every stage on rank 0, then the verdict."""
    found = Findings(world=ctx.world, master=f"{ctx.cfg.master_addr}:{ctx.cfg.master_port}")
    pathmtu.announce_echo(ctx)
    plan = rendezvous.admit(ctx, found)
    if plan.ok:
        _stages(ctx, found, plan)
    return _conclude(ctx, found)


def _stages(ctx: RankContext, found: Findings, plan: Plan) -> None:
    """Facts, mesh (and the networks compared beside it), process group, bandwidth, bench:
    each runs only when the one before passed (the group stays up for the bench); then what
    the mesh's round trips name, with the rates measured."""
    got = facts.compare(ctx, found)
    mesh = reachability.announce(ctx, found, got)
    if mesh is None:
        return
    offered = networks.offer(ctx, got)
    passed = reachability.mesh_stage(ctx, found, got, mesh)
    networks.conclude(ctx, found, offered, passed)
    if passed:
        _group_on(ctx, found, plan, mesh.peers)
    latency.judge(found, got)


def _group_on(ctx: RankContext, found: Findings, plan: Plan,
              peers: list[list[Any] | None]) -> None:
    """The process group, and while it is up the bandwidth and the bench."""
    ok = allreduce.group_stage(ctx, found)
    ctx.store.set("stage/bw", {"go": ok and plan.matrix})
    if ok and plan.matrix:
        bandwidth.matrix_stage(ctx, found, peers)
    if plan.bench:
        sweep.sweep_stage(ctx, found, go=ok)
    t = time.monotonic()
    allreduce.destroy()
    ctx.took("teardown", t)


def _conclude(ctx: RankContext, found: Findings) -> RankOutcome:
    """Publish the verdict, wait (briefly) until every rank read it, and report."""
    ctx.took("total", ctx.started)
    if ctx.given:
        found.causes.extend(ctx.given)
        if "facts" in found.stages:
            found.stages["facts"] = "fail"
    report = found.report(ctx.timings)
    root = report.root
    ctx.store.set("result", result_record(report.verdict, root))
    t = time.monotonic()
    ctx.store.wait_count("ack", len(found.roster) - 1, ACK_TIMEOUT)
    ctx.took("acks", t)
    report = dataclasses.replace(report, timings=dict(ctx.timings))
    return RankOutcome(0, ctx.host, report.verdict == "pass",
                       verdict_line(0, ctx.host, ctx.address, report.verdict, root), report)

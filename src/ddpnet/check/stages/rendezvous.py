"""Stage 1: every process registers under its own arrival number; rank 0 waits (bounded)
for the world, judges the registrations and publishes the plan every rank follows."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ddpnet.check.context import Findings, RankContext, RankOutcome
from ddpnet.check.options import CheckOptions
from ddpnet.check.registration import Registration, judge_registrations
from ddpnet.check.store import StageTimeout, Store
from ddpnet.config import DistConfig
from ddpnet.errors import RendezvousError

PreflightFn = Callable[[DistConfig, Mapping[str, str], float], None]


def preflight_patiently(cfg: DistConfig, environ: Mapping[str, str], opts: CheckOptions,
                        preflight: PreflightFn) -> None:
    """A dropped SYN is named after ``connect_timeout``; a refusal is retried up to the join
    timeout, since rank 0 may simply start later than this rank."""
    deadline = time.monotonic() + opts.join_timeout
    while True:
        try:
            preflight(cfg, environ, opts.connect_timeout)
            return
        except RendezvousError as exc:
            if exc.cause != "master-port-refused" or time.monotonic() >= deadline:
                raise


# ----------------------------------------------------------------------------- rank 0

@dataclass(frozen=True)
class Plan:
    """Rank 0's decision after the rendezvous, as every rank reads it."""

    ok: bool
    matrix: bool
    bench: bool


def _register(store: Store, reg: Registration) -> bool:
    """Publish ``reg`` under the next arrival number; whether the plan was not out yet."""
    n = store.add("reg/n")
    fresh = not store.has("plan")
    store.set(f"reg/{n}", json.loads(reg.to_json()))
    return fresh


def _arrivals(store: Store, world: int, deadline: float) -> list[Registration]:
    n = store.wait_count("reg/n", world, deadline - time.monotonic())
    if n >= world:
        time.sleep(0.2)  # a duplicate or an extra rank arriving right behind
        n = store.count("reg/n")
    names = [f"reg/{i}" for i in range(1, n + 1)]
    got = store.get_many(names)  # a few round trips for N registrations
    # a rank counted itself but its registration is not there yet: 2 s for all of them
    # together (2 s each, one after another, would make 40 late ranks cost 80 s)
    late_by = time.monotonic() + 2.0
    arrivals: list[Registration] = []
    for name in names:
        try:
            arrivals.append(Registration(**(got[name] if name in got else store.get(
                name, max(0.01, late_by - time.monotonic())))))
        except StageTimeout:
            continue
    return arrivals


def admit(ctx: RankContext, found: Findings) -> Plan:
    """Rank 0: wait for every rank to register, judge, publish the plan."""
    cfg, opts = ctx.cfg, ctx.opts
    t = time.monotonic()
    own = ctx.registration()
    ctx.store.set("host0", ctx.host)  # the name peers resolve in the facts stage
    where = f"[{cfg.master_addr}]" if ":" in cfg.master_addr else cfg.master_addr
    ctx.progress(f"rendezvous: waiting for {ctx.world} ranks on {where}:"
                 f"{cfg.master_port} (up to {opts.join_timeout:g} s)")
    _register(ctx.store, own)
    arrivals = _arrivals(ctx.store, ctx.world, t + opts.join_timeout)
    verdict = judge_registrations(own, arrivals, waited_s=time.monotonic() - t)
    found.causes.extend(verdict.causes)
    found.roster = list(verdict.roster)
    found.stages["rendezvous"] = "fail" if verdict.causes else "pass"
    took = ctx.took("rendezvous", t)
    ctx.progress(f"rendezvous: {len(arrivals)} joined in {took:.1f} s"
                 + (f" - {', '.join(c.id for c in verdict.causes)}" if verdict.causes else ""))
    plan = Plan(verdict.ok, opts.matrix_on(ctx.world), opts.bench)
    # who holds each rank: one small key per rank, set before the plan (a plan naming every
    # rank, read by every rank, made rank 0's store serve O(N²) bytes)
    ctx.store.set_many({f"admit/{r.rank}": r.uid for r in found.roster})
    # what a rank needs and nothing more: every rank reads it (the rendezvous' causes in it,
    # read by none, made a failed join among 4,096 ranks serve ~100 MB)
    ctx.store.set("plan", {"ok": plan.ok, "t0": time.time(), "world": ctx.world,
                           "matrix": plan.matrix, "bench": plan.bench})
    found.nodes = [{"rank": r.rank, "host": r.host, "address": r.address,
                    "interface": r.interface, "pid": r.pid, "status": "joined"}
                   for r in found.roster]
    return plan


# ----------------------------------------------------------------------------- ranks > 0

@dataclass(frozen=True)
class Joined:
    """A rank > 0 that rank 0 admitted: the plan and its clock offset to rank 0."""

    plan: Mapping[str, Any]
    clock_offset: float | None


def join(ctx: RankContext) -> Joined | RankOutcome:
    """Register and read rank 0's plan; a RankOutcome when this process is not in it.
    Raises StageTimeout when rank 0 does not publish the plan in time."""
    fresh = _register(ctx.store, ctx.registration())
    plan = ctx.store.get("plan", ctx.budget)
    # the offset is only meaningful when the plan was published after we registered
    clock = time.time() - float(plan["t0"]) if fresh else None
    holder = ctx.store.get_now(f"admit/{ctx.rank}")
    if holder == ctx.uid:
        return Joined(plan, clock)
    if holder is not None:
        return RankOutcome(ctx.rank, ctx.host, False, f"{ctx.who}: duplicate-rank: another "
                           f"process already holds RANK={ctx.rank}")
    why = (f"RANK={ctx.rank} is outside rank 0's WORLD_SIZE={plan['world']}"
           if ctx.rank >= int(plan["world"]) else "arrived after rank 0's join deadline")
    return RankOutcome(ctx.rank, ctx.host, False, f"{ctx.who}: not checked: {why}")

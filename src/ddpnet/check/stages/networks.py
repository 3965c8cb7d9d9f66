"""Stage 3b: is the job on the slow one of several networks (``check.networks``)?

Rank 0 plans from the facts, listens on its address in each other network and publishes the
plan (``stage/nets``) before the mesh; after the mesh, one rank on another host streams to rank
0 over the job's network, then over each other one, for ``networks.SECONDS`` each, and rank 0
judges the rates its listeners measured. The cost does not grow with N: one pair, at most
``1 + MAX_ALTERNATIVES`` short streams, and nothing at all on a cluster with one network.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ddpnet.check import networks, tournament
from ddpnet.check.compare import NodeFacts
from ddpnet.check.context import Findings, RankContext
from ddpnet.check.mesh import Listener


@dataclass
class Offer:
    """Rank 0's plan and the listeners it opened for the other networks."""

    plan: networks.Plan
    targets: list[list[Any]]
    listeners: list[Listener] = field(default_factory=list)

    def close(self) -> None:
        for listener in self.listeners:
            listener.close()


def _round(tag: int) -> int:
    """The stream's round number: negative, never one of the bandwidth tournament's."""
    return -1 - tag


def offer(ctx: RankContext, got: Mapping[int, Mapping[str, Any]]) -> Offer | None:
    """Rank 0: plan, listen on each other network and publish the plan (always: the ranks
    read it before the mesh)."""
    p = networks.plan([NodeFacts(r, got[r]) for r in sorted(got)])
    made = Offer(p, [[0, ctx.address, ctx.listener.port]]) if p is not None else None
    for tag, net in enumerate(p.others if p is not None else (), start=1):
        leg = net.leg(0)
        try:
            listener = Listener(leg.address) if leg is not None else None
        except OSError:  # not bindable here: that network stays unmeasured
            continue
        if made is not None and listener is not None:
            made.listeners.append(listener)
            made.targets.append([tag, listener.sock.getsockname()[0], listener.port])
    ctx.store.set("stage/nets", {"sender": p.sender if p is not None else None,
                                 "seconds": networks.SECONDS,
                                 "targets": made.targets if made is not None else []})
    return made


def receive(ctx: RankContext) -> dict[str, Any]:
    """Ranks > 0: rank 0's plan (published with the mesh's go)."""
    return dict(ctx.store.get("stage/nets", ctx.budget))


def send(ctx: RankContext, plan: Mapping[str, Any]) -> None:
    """Ranks > 0: the sender streams to each of rank 0's addresses in turn (bounded: a
    network that drops the connection costs one connect timeout)."""
    if plan.get("sender") != ctx.rank:
        return
    seconds = float(plan.get("seconds") or networks.SECONDS)
    for tag, address, port in plan.get("targets") or ():
        with contextlib.suppress(OSError):
            tournament.send_stream(str(address), int(port), _round(int(tag)), ctx.rank,
                                   seconds=seconds,
                                   timeout=ctx.opts.connect_timeout + seconds)


def _listener(ctx: RankContext, made: Offer, tag: int) -> Listener:
    return ctx.listener if tag == 0 else made.listeners[tag - 1]


def _rates(ctx: RankContext, made: Offer) -> list[float | None]:
    """Gb/s over each network as rank 0's listeners measured them, by the plan's order;
    waits (bounded) for the streams."""
    sender = made.plan.sender
    per = networks.SECONDS + ctx.opts.connect_timeout
    deadline = time.monotonic() + per * len(made.targets) + 1.0
    keys = [(_listener(ctx, made, i), (_round(int(t[0])), sender))
            for i, t in enumerate(made.targets)]
    while time.monotonic() < deadline and not all(k in ln.received for ln, k in keys):
        time.sleep(0.02)
    by_tag: dict[int, float | None] = {}
    for (listener, key), target in zip(keys, made.targets, strict=True):
        nbytes, secs = listener.received.pop(key, (0, 0.0))
        by_tag[int(target[0])] = round(nbytes * 8 / secs / 1e9, 4) if secs > 0 else None
    return [by_tag.get(tag) for tag in range(len(made.plan.networks))]


def conclude(ctx: RankContext, found: Findings, made: Offer | None, go: bool) -> None:
    """Rank 0, after the mesh: measure (when the mesh passed), judge, close the listeners."""
    if made is None:
        return
    t = time.monotonic()
    try:
        if not go:
            return
        ctx.progress(f"networks: rank {made.plan.sender} streams over "
                     f"{len(made.plan.networks)} networks")
        gbps = _rates(ctx, made)
    finally:
        made.close()
    record(found, made.plan, gbps)
    took = ctx.took("networks", t)
    ctx.progress(f"networks: done in {took:.1f} s")


def record(found: Findings, plan: networks.Plan, gbps: Sequence[float | None]) -> None:
    """The judgement into the findings (pure apart from ``found``)."""
    labels = {r.rank: r.label for r in found.roster}
    cause = networks.judge(plan, gbps, labels)
    found.extra["networks"] = tuple(networks.summary(plan, gbps))
    found.extra["notes"] = (*found.extra.get("notes", ()), networks.note(plan, gbps))
    if cause is not None:
        found.causes.append(cause)
    found.stages["networks"] = "warn" if cause is not None else "pass"

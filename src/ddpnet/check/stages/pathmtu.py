"""Path MTU in the check's stages (``check.pmtu`` probes and judges).

A black-holed path stalls the store's own large messages too (a facts record is a few KB), so
every rank > 0 first probes rank 0's echo, before it joins: a rank whose path to rank 0 drops
big frames publishes a small record saying so instead of its facts, prints its own line and
leaves; rank 0 names the link in the facts stage. The full mesh of paths is probed beside the
TCP mesh in the reachability stage (:func:`mesh_rows`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ddpnet.check import pmtu
from ddpnet.check.causes import Cause
from ddpnet.check.context import Findings, RankContext, RankOutcome
from ddpnet.check.store import StageTimeout

#: how long a rank > 0 waits for rank 0's echo address (rank 0 sets it before anything)
ECHO_WAIT_S = 5.0


def interface_mtu(name: str | None) -> int:
    """The MTU of interface ``name`` here, 0 when unknown (edge: psutil)."""
    import psutil

    stats = psutil.net_if_stats().get(name or "")
    return int(stats.mtu) if stats else 0


def announce_echo(ctx: RankContext) -> None:
    """Rank 0, first thing: where its echo answers and at which MTU."""
    ctx.store.set("echo0", [ctx.address, ctx.listener.echo.port,
                            interface_mtu(ctx.sel.interface)])


def probe_master(ctx: RankContext) -> dict[str, Any] | None:
    """Ranks > 0: the path to rank 0 (``PeerMtu.to_dict()``), None when not probed (rank 0
    on this address, an older rank 0, no MTU known, or no route to the address rank 0
    advertises: rank 0 behind a port forward or NAT, which the mesh names)."""
    try:
        address, port, mtu0 = ctx.store.get("echo0", ECHO_WAIT_S)
    except StageTimeout:
        return None
    own = interface_mtu(ctx.sel.interface)
    if not (own and mtu0 and port) or address == ctx.address:
        return None
    try:
        return pmtu.probe_peer(str(address), int(port), min(own, int(mtu0))).to_dict()
    except OSError:
        # rank 0's address is not reachable from here at all (ENETUNREACH: another network,
        # a *_SOCKET_IFNAME naming a different interface per node, rank 0 behind a NAT):
        # not an MTU question; the facts name the interfaces and the mesh the unreachable pair
        return None


def stop_here(ctx: RankContext, to_rank0: Mapping[str, Any]) -> RankOutcome:
    """Ranks > 0 whose path to rank 0 drops big frames: a small record instead of the facts
    (which would stall on that path), then this rank's own line."""
    got = pmtu.PeerMtu.from_dict(to_rank0)
    ctx.store.publish("facts", ctx.rank, {
        "hostname": ctx.host, "address": ctx.address, "interface": str(ctx.sel.interface),
        "mtu": got.mtu, "to_rank0": dict(to_rank0), "stopped": "path-mtu"})
    ctx.store.add("ack")  # counted by rank 0 whenever it comes: it need not wait for us
    return RankOutcome(ctx.rank, ctx.host, False,
                       f"{ctx.who}: path-mtu: frames of {got.mtu} bytes to rank 0 are lost "
                       f"({pmtu.describe(got)}); facts not sent")


def master_paths(got: dict[int, dict[str, Any]], found: Findings) -> list[Cause]:
    """Rank 0, facts stage: every rank's path to rank 0 judged; ranks that stopped on a
    broken one leave ``got`` (their facts never came, so no later stage runs)."""
    rows = {r: {"0": f["to_rank0"]} for r, f in got.items()
            if isinstance(f.get("to_rank0"), Mapping)}
    causes = pmtu.analyze(rows, {r: found.label_of(r) for r in found.ranks},
                          {r: str(f.get("interface", "IFACE")) for r, f in got.items()},
                          stage="facts")
    for r, f in list(got.items()):
        if f.get("stopped") == "path-mtu":
            del got[r]
    return causes


def mesh_rows(ctx: RankContext, found: Findings, got: Mapping[int, Mapping[str, Any]],
              ranks: Sequence[int]) -> list[Cause]:
    """Rank 0, reachability stage: the MTU rows of ``ranks`` (published before their mesh
    rows), analysed."""
    rows = ctx.store.gather("pmtu", list(ranks), 2.0)
    clean = {r: {j: v for j, v in row.items() if j.isdigit()} for r, row in rows.items()}
    return pmtu.analyze(clean, {r: found.label_of(r) for r in found.ranks},
                        {r: str(got[r].get("interface", "IFACE")) for r in got})

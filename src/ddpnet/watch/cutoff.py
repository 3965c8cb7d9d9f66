"""A rank that hears the job no more judges itself from its heartbeat thread (docs/watch.md, "A rank
cut off leaves by itself"). :func:`due` and :func:`verdict` are pure."""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ddpnet.net.probe import REFUSED
from ddpnet.watch.network import link_hint
from ddpnet.watch.state import (
    CUT_OFF,
    HUB_SILENT,
    HUB_UNREACHABLE,
    LINK_DOWN,
    SUB_LABELS,
    Diagnosis,
    LinkProbe,
    RankState,
    Snapshot,
    flat_fields,
)

#: seconds past the threshold before a rank that hears nothing judges itself
MARGIN_S = 2.0
#: each connect of the self-check
CONNECT_S = 2.0
#: a hub that accepts connections but acknowledges nothing gets this many times the silence
PATIENCE = 3.0
KIND = "network"


def due(now: float, heard: float, progressed: float, threshold_s: float) -> bool:
    """Whether a rank that last heard the hub at ``heard`` and progressed at ``progressed``
    (monotonic) should check whether it is cut off."""
    limit = threshold_s + MARGIN_S
    return now - heard >= limit and now - progressed >= limit


#: silent this long, a rank looks before a longer threshold; leaves if :func:`conclusive`
EARLY_S = 10.0


def early(now: float, heard: float, progressed: float, threshold_s: float) -> bool:
    """Whether to look before the threshold: ``due`` at :data:`EARLY_S` when the threshold
    is longer."""
    return threshold_s > EARLY_S and due(now, heard, progressed, EARLY_S)


def conclusive(facts: Facts) -> bool:
    """Whether what a rank found leaves no doubt that it is cut off (pure): nothing answers, its
    link is not UP, or it has no route."""
    hub = facts.hub_probe
    if hub is not None and answered(hub):
        return False
    if any(answered(p) for p in facts.peers):
        return False
    return bool(facts.peers) or facts.link not in ("UP", "") or facts.route == "none"


def patient(facts: Facts, threshold_s: float) -> bool:
    """Whether to wait ``PATIENCE`` x longer: the hub still accepts connections (perhaps only
    busy)."""
    hub = facts.hub_probe
    limit = PATIENCE * (threshold_s + MARGIN_S)
    return hub is not None and hub.reachable and facts.heard_ago < limit


@dataclass(frozen=True)
class Facts:
    """What a rank that hears nothing found about itself."""

    rank: int
    host: str
    interface: str                  # the interface the selector chose ("" unknown)
    address: str                    # this rank's address on it
    link: str                       # "UP", "DOWN", "absent", "" unknown
    hub: str                        # "ADDR:PORT"
    hub_probe: LinkProbe | None     # a fresh connect to it
    route: str                      # "dev eth0 src ... via ..." or "none"
    peers: tuple[LinkProbe, ...]    # connects to each peer's side port
    heard_ago: float                # seconds since the hub last answered
    heard_at: float                 # time.time() of that
    stalled_for: float              # seconds without progress of its own
    doing: str                      # "inside all_reduce seq 611", "in phase 'step' at step 593"
    #: what it judged itself by: "5 s (learned: floor 5 s: ...)" ("" unknown)
    judged_by: str = ""

    def to_dict(self) -> dict[str, Any]:
        out = flat_fields(self)
        out["hub_probe"] = self.hub_probe.to_dict() if self.hub_probe else None
        out["peers"] = [p.to_dict() for p in self.peers]
        return out


def answered(probe: LinkProbe) -> bool:
    """The other end's host answered (connected, or refused by its kernel)."""
    return probe.reachable or probe.outcome == REFUSED


def verdict(f: Facts) -> Diagnosis:
    """The rank's own verdict (pure): this node cut off, the hub's node down, the hub gone, or
    stuck."""
    me = f"rank {f.rank} ({f.host}" + (f", {f.interface} {f.address}" if f.interface else "") + ")"
    master = f.hub.rsplit(":", 1)[0]
    reached = sorted({p.dst_rank for p in f.peers if answered(p)})
    hub = f.hub_probe.outcome if f.hub_probe else "not tried"
    heard = time.strftime("%H:%M:%S", time.localtime(f.heard_at)) if f.heard_at else "never"
    evidence = (f"interface {f.interface or '?'}: {f.link or 'state unknown'}",
                f"route to the hub's address {master}: {f.route}",
                f"the watch hub {f.hub}: {f.hub_probe.detail if f.hub_probe else hub}",
                *(f"peer rank {p.dst_rank} {p.detail}" for p in f.peers[:6]),
                f"last heard from the job {f.heard_ago:.0f} s ago ({heard}); no progress of "
                f"its own for {f.stalled_for:.0f} s ({f.doing})",
                *((f"judged by its threshold {f.judged_by}",) if f.judged_by else ()))
    stalled = f"made no progress for {f.stalled_for:.0f} s ({f.doing})"
    restart = "then restart the job from the last checkpoint"
    witnesses: tuple[int, ...] = ()
    if f.hub_probe is not None and answered(f.hub_probe):
        sub = HUB_SILENT
        how = ("accepts connections but acknowledged nothing" if f.hub_probe.reachable
               else "refuses connections: the hub process is gone")
        summary = (f"{me} {stalled}, and the watch hub at {f.hub} {how} for "
                   f"{f.heard_ago:.0f} s: nobody can name the cause for this rank")
        hint = (f"read rank 0's log on {master} (the hub is its child process; "
                f"ddpnet diagnose --dumps DIR there); {restart}")
    elif reached:
        sub, witnesses = HUB_UNREACHABLE, tuple(reached)
        shown = ", ".join(str(r) for r in reached[:8])
        summary = (f"{me} cannot reach the watch hub at {f.hub} ({hub}) for "
                   f"{f.heard_ago:.0f} s while peer rank(s) {shown} answer, and {stalled}: "
                   f"the hub's node (rank 0's, MASTER_ADDR) or its link is down")
        hint = (f"on the hub's node ({master}): `ip -br link show`, its cable / switch port; "
                f"from here `ping -c3 {master}`; {restart}")
    else:
        link = f"{f.interface} is {f.link}" if f.link and f.link != "UP" else \
            f"route: {f.route}" if f.route == "none" else "every connect timed out"
        sub = CUT_OFF
        summary = (f"{SUB_LABELS[CUT_OFF]}: "
                   f"{me} reaches neither the watch hub at {f.hub} ({hub}) nor any "
                   f"peer and {stalled}; {link}; last heard from the job {f.heard_ago:.0f} s "
                   f"ago")
        hint = link_hint(f.host, f.interface or "<iface>", f", `ip route get {master}`") + \
            f"; {restart}"
    return Diagnosis(KIND, summary, (f.rank,), (f.host,), evidence, hint, sub_kind=sub,
                     witnesses=witnesses)


def hub_node_down(diagnosis: Diagnosis, snapshot: Snapshot, interface: str, link: str,
                  address: str) -> Diagnosis:
    """The hub's verdict when its own node lost its link (pure): every other rank looks cut off, but
    the one interface down is the hub's. Unchanged unless ``link`` is DOWN."""
    if link != "DOWN" or diagnosis.kind != KIND or diagnosis.sub_kind != LINK_DOWN:
        return diagnosis
    here = sorted(r for r, s in snapshot.states.items()
                  if s is not None and s.address == address)
    host = next((s.host for r, s in sorted(snapshot.states.items())
                 if s is not None and r in here), "") or "the hub's node"
    others = ", ".join(str(r) for r in diagnosis.ranks[:8])
    ranks = ", ".join(str(r) for r in here) or "0"
    return Diagnosis(
        KIND, f"{SUB_LABELS[LINK_DOWN]}: "
              f"the hub's node {host} (rank(s) {ranks}, {interface} {address}) "
              f"lost its link: {interface} is DOWN there, so rank(s) {others} cannot be "
              f"reached from it (they leave by themselves, naming this node)",
        tuple(here) or (0,), (host,),
        (f"interface {interface} on {host}: DOWN", *diagnosis.evidence),
        link_hint(host, interface) + "; then restart the job from the last checkpoint",
        sub_kind=LINK_DOWN, witnesses=diagnosis.ranks)


def doing(state: RankState) -> str:
    """``inside all_reduce seq 611`` or ``in phase 'step' at step 593`` (pure)."""
    flight = state.in_flight()
    if flight is not None:
        return f"inside {flight.op} seq {flight.seq}"
    return f"in phase {state.phase or 'unmarked'!r} at step {state.step}"


def link_state(*, interface: str = "", address: str = "") -> tuple[str, str]:
    """The interface named or holding ``address``, and its state "UP", "DOWN", "absent" (edge)."""
    from ddpnet.net.interfaces import list_interfaces, owner_of

    if not (interface or address):
        return "", ""
    found_all = list_interfaces()
    found = next((i for i in found_all if i.name == interface), None) if interface else \
        owner_of(address, found_all)
    if found is None:
        return interface, "absent"
    return found.name, "UP" if found.up else "DOWN"


def _route(address: str) -> str:
    from ddpnet.net.routes import route_to

    try:
        route = route_to(address, timeout=CONNECT_S)
    except ValueError:
        return "not an address"
    if route is None:
        return "none"
    via = f" via {route.via}" if route.via else ""
    return f"dev {route.iface} src {route.src}{via}"


def gather(state: RankState, hub: tuple[str, int], peers: Mapping[int, RankState], *,
           heard_ago: float, heard_at: float, stalled_for: float, judged_by: str = "") -> Facts:
    """Read this rank's interface and route, connect to the hub and each peer (edge, bounded)."""
    from ddpnet.watch.probe import Target, probe_connect, probe_pairs

    with ThreadPoolExecutor(max_workers=2) as pool:
        hub_job = pool.submit(probe_connect, state.rank, Target(-1, hub[0], {"hub": hub[1]}),
                              "hub", CONNECT_S)
        peer_job = pool.submit(probe_pairs, peers, state.rank, timeout=CONNECT_S,
                               group=[*peers, state.rank], stream_bytes=0)
        link, route = link_state(interface=state.interface)[1], _route(hub[0])
        hub_probe, found = hub_job.result(), peer_job.result()
    return Facts(rank=state.rank, host=state.host, interface=state.interface,
                 address=state.address, link=link, hub=f"{hub[0]}:{hub[1]}",
                 hub_probe=hub_probe, route=route, peers=found, heard_ago=heard_ago,
                 heard_at=heard_at, stalled_for=stalled_for, doing=doing(state),
                 judged_by=judged_by)

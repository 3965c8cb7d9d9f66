"""The kernel's own path between ranks: before the mesh's failures are blamed on a firewall,
each rank asks its kernel (``ip route get``, which sends nothing) two questions per peer
subnet, and rank 0 names what the answers explain.

- *Would a peer's packet arriving on my interface be accepted?* ``ip route get MY_ADDR from
  PEER iif IFACE`` runs the input lookup with reverse-path filtering: ``Invalid argument``
  is ``rp_filter`` dropping it (a second NIC in the subnet that wins the route, strict
  ``rp_filter=1``; ``arp_ignore=1`` makes the peers' packets always arrive on the loser):
  ``reverse-path-drop``.
- *Which way does my reply leave?* ``ip route get PEER from MY_ADDR`` is the route a reply
  takes, policy rules included: no route is ``missing-route`` (a static route to a routed
  subnet missing on this node), another interface than the advertised one is
  ``asymmetric-route`` (a ``from MY_ADDR lookup T`` rule, two default routes).

Both run in the reachability stage beside the mesh (one peer per subnet, so O(subnets) per
rank). :func:`gather` is the edge; :func:`analyze` is pure and returns the matrix pairs it
explains, so the mesh does not also blame a firewall for them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ddpnet.check.causes import Cause
from ddpnet.check.mesh import OK, known_cells

Pair = tuple[int, int]
Facts = Mapping[int, Mapping[str, Any]]
Paths = Mapping[int, Mapping[str, Any]]


def representatives(peers: Sequence[Sequence[Any] | None], me: int) -> dict[str, str]:
    """Subnet -> one peer address in it (the lowest rank's), from the announced peers
    ``[address, mesh_port, mtu_port, mtu, subnet]`` (pure). Peers without a subnet count as
    their own /32."""
    mine = peers[me] if me < len(peers) else None
    own = mine[0] if mine else None
    out: dict[str, str] = {}
    for p in peers:
        if not p or str(p[0]) == own:
            continue
        subnet = peer_subnet(p)
        out.setdefault(subnet, str(p[0]))
    return out


def peer_subnet(peer: Sequence[Any]) -> str:
    """An announced peer's subnet, its own /32 when it announced none (pure)."""
    return str(peer[4]) if len(peer) > 4 and peer[4] else f"{peer[0] if peer else ''}/32"


Lookup = Callable[..., Any]


def job_bindings(facts: Mapping[str, Any], address: str) -> list[tuple[str, str, str]]:
    """``(variables, interface, address)`` a plain job's libraries would bind on this node
    other than this check's own address (pure): the facts' ``library_picks`` and, with
    GLOO_SOCKET_IFNAME unset, the hostname's address gloo binds (``check.hostaddr``)."""
    from ddpnet.check.hostaddr import gloo_default

    binds = [(str(p.get("var")), p.get("iface"), p.get("address"))
             for p in facts.get("library_picks") or () if isinstance(p, Mapping)]
    gloo = gloo_default(facts)
    if gloo and not any(v.startswith("GLOO") for v, _, _ in binds):
        owner = next((str(name) for name, cidrs in (facts.get("ifaddrs") or {}).items()
                      if any(str(c).split("/")[0] == gloo for c in cidrs or ())), None)
        binds.append(("GLOO_SOCKET_IFNAME unset: gloo binds the address the hostname "
                      "resolves to", owner, gloo))
    out: dict[tuple[str, str], list[str]] = {}
    for var, iface, addr in binds:
        if addr and iface and addr != address and iface != "lo" \
                and not str(addr).startswith("127."):
            out.setdefault((str(iface), str(addr)), []).append(var)
    return [(", ".join(sorted(v)), i, a) for (i, a), v in sorted(out.items())]


def gather(address: str, iface: str, targets: Mapping[str, str],
           sysctl: Callable[[str], str | None], lookup: Lookup | None = None,
           jobs: Sequence[tuple[str, str, str]] = ()) -> dict[str, Any]:
    """This rank's answers (edge: two bounded ``ip route get`` per subnet, sent nowhere),
    and for each address a plain job would bind instead (``jobs``), the way in."""
    from ddpnet.check.nics import effective
    from ddpnet.net import routes

    ask = lookup or routes.lookup
    subnets: dict[str, Any] = {}
    for subnet, peer in sorted(targets.items()):
        inbound = ask(address, peer, iface)
        reply = ask(peer, address)
        if inbound is None or reply is None:
            continue  # no iproute2 (or it hung): no evidence, nothing judged
        subnets[subnet] = {"peer": peer, "inbound": inbound.to_dict(), "reply": reply.to_dict()}
    bound = []
    for variables, other, addr in jobs:
        answers = {s: ask(addr, peer, other) for s, peer in sorted(targets.items())}
        bound.append({"vars": variables, "iface": other, "address": addr,
                      "rp_filter": effective(sysctl, "rp_filter", other),
                      "arp_ignore": effective(sysctl, "arp_ignore", other),
                      "subnets": {s: {"peer": targets[s], "inbound": a.to_dict()}
                                  for s, a in answers.items() if a is not None}})
    return {"iface": iface, "address": address,
            "rp_filter": effective(sysctl, "rp_filter", iface),
            "arp_ignore": effective(sysctl, "arp_ignore", iface), "subnets": subnets,
            "jobs": bound}


def _failing(matrix: Sequence[Sequence[str]]) -> tuple[set[Pair], dict[int, set[int]]]:
    """The failing pairs ``(from, to)``, and by rank the peers a connect to or from it failed
    with (pure; O(judged cells) through ``mesh.known_cells``: a healthy or sampled mesh of
    thousands of ranks costs its cells, not N x N)."""
    bad = {(i, j) for i, j, s in known_cells(matrix) if s != OK}
    by_rank: dict[int, set[int]] = {}
    for i, j in bad:
        by_rank.setdefault(i, set()).add(j)
        by_rank.setdefault(j, set()).add(i)
    return bad, by_rank


def _subnet_of(got: Facts, rank: int) -> str:
    f = got.get(rank) or {}
    return str(f.get("subnet") or f"{f.get('address')}/32")


def filters(rp_filter: object) -> bool:
    """Whether reverse-path filtering is on (1 strict, 2 loose: the larger of ``all`` and the
    interface's): with 0, or unknown, an input lookup that fails is not the filter's doing
    (``ip route get`` also refuses a source address this host has: 'Invalid argument')."""
    return isinstance(rp_filter, int) and rp_filter > 0


def _verdict(entry: Mapping[str, Any], iface: str, on_link: bool, routed: bool,
             rp_filter: object = 1) -> str | None:
    """What the kernel's answers for one peer subnet say (pure): the cause id, or None.

    No route is ``missing-route`` only where another rank routes that subnet (``routed``):
    where nobody does, the odd one is the rank in it (``interface-mismatch``). Replies by
    another device are ``asymmetric-route`` toward the rank's own subnet (``on_link``) or
    through a policy table; toward a routed subnet another NIC may be the way."""
    reply, inbound = entry.get("reply") or {}, entry.get("inbound") or {}
    if reply.get("dev") == "lo":  # the peer's address is this host's own: no path to judge
        return None
    if not reply.get("ok"):
        return "missing-route" if routed else None
    if not inbound.get("ok") and filters(rp_filter):
        return "reverse-path-drop"
    if reply.get("dev") and reply.get("dev") != iface and (on_link or reply.get("table")):
        return "asymmetric-route"
    return None


class _Finding:
    """One rank's finding of one kind, with the pairs it explains."""

    def __init__(self, kind: str, rank: int, subnet: str, entry: Mapping[str, Any]) -> None:
        self.kind, self.rank, self.subnet, self.entry = kind, rank, subnet, entry
        self.into: list[int] = []
        self.out: list[int] = []


def analyze(matrix: Sequence[Sequence[str]], got: Facts, labels: Sequence[str],
            paths: Paths) -> tuple[list[Cause], set[Pair]]:
    """The kernel-path causes for the failing pairs they explain, and those pairs (pure)."""
    findings: dict[tuple[str, int], _Finding] = {}
    explained: set[Pair] = set()
    routed = gateways(paths)  # once: O(ranks x subnets), not per failing pair
    bad, failing = _failing(matrix)
    for k, mine in sorted(paths.items()):
        iface = str(mine.get("iface"))
        for i in sorted(failing.get(k, ())):
            into, out = (i, k) in bad, (k, i) in bad
            subnet = _subnet_of(got, i)
            entry = (mine.get("subnets") or {}).get(subnet)
            kind = _verdict(entry, iface, subnet == _subnet_of(got, k),
                            _other(routed.get(subnet, ()), k) is not None,
                            mine.get("rp_filter")) \
                if entry and (into or out) and i != k else None
            if entry is None or kind is None or (kind == "reverse-path-drop" and not into):
                continue
            f = findings.setdefault((kind, k), _Finding(kind, k, _subnet_of(got, i), entry))
            if into:
                f.into.append(i)
                explained.add((i, k))
            if out and kind != "reverse-path-drop":
                f.out.append(i)
                explained.add((k, i))
    causes = []
    for kind in ("missing-route", "asymmetric-route", "reverse-path-drop"):
        found = [f for (k2, _), f in sorted(findings.items()) if k2 == kind]
        if found:
            causes.append(_BUILD[kind](found, matrix, got, labels, paths))
    named = {k for _, k in findings}
    job = _job_drops({k: p for k, p in paths.items() if k not in named}, got, labels)
    return [*causes, *([job] if job else [])], explained


def _job_drops(paths: Paths, got: Facts, labels: Sequence[str]) -> Cause | None:
    """Addresses a plain job would bind (not this check's) whose incoming connections the
    kernel drops: this check's own group works, a plain ``init_process_group`` does not.
    A warning, as ``hostname-loopback``: ``ddpnet.init()`` or a pinned interface avoid it."""
    items = []
    for k, mine in sorted(paths.items()):
        for job in mine.get("jobs") or ():
            if not filters(job.get("rp_filter")):
                continue
            bad = [(s, e) for s, e in sorted((job.get("subnets") or {}).items())
                   if not (e.get("inbound") or {}).get("ok")]
            if bad:
                items.append((k, mine, job, bad[0]))
    if not items:
        return None
    lines, evidence = [], []
    for k, mine, job, (subnet, entry) in items:
        inbound = entry["inbound"]
        lines.append(f"rank {k} on {labels[k]}: a plain job ({job['vars']}) binds "
                     f"{job['address']} on {job['iface']}, and `{inbound['command']}` answers "
                     f"'{inbound['error']}': rp_filter={job.get('rp_filter')} drops what "
                     f"arrives there from {subnet}, because the route back leaves by "
                     f"{mine.get('iface')} (the interface this check uses, which works)")
        evidence.append(f"on {labels[k]}: `{inbound['command']}` -> {inbound['error']}")
    return Cause(
        id="reverse-path-drop", stage="reachability", severity="warn",
        hosts=tuple(labels[k] for k, *_ in items), ranks=tuple(k for k, *_ in items),
        detail="; ".join(lines) + ": a plain init_process_group on that node hangs (gloo: "
               "the peers with higher addresses dial it; NCCL: its ring neighbours); "
               "ddpnet.init() and this check pin the interface whose route wins",
        fix="; ".join(f"on {labels[k]}: sysctl -w net.ipv4.conf.all.rp_filter=2 "
                      f"net.ipv4.conf.{job['iface']}.rp_filter=2, or pin the interface that "
                      f"wins the route: export GLOO_SOCKET_IFNAME={mine.get('iface')} "
                      f"NCCL_SOCKET_IFNAME=={mine.get('iface')} (ddpnet.init() does)"
                      for k, mine, job, _ in items),
        evidence=tuple(evidence),
        ruled_out=tuple(_firewall_ruled_out(got.get(k) or {}, labels[k]) for k, *_ in items),
        confidence="high",
        see_for_yourself="; ".join(f"on {labels[k]}: {e['inbound']['command']}"
                                   for k, _, _, (_, e) in items))


def _pairs(f: _Finding, matrix: Sequence[Sequence[str]]) -> str:
    parts = []
    if f.into:
        parts.append("rank(s) " + ", ".join(f"{i} ({matrix[i][f.rank]})" for i in f.into)
                     + f" cannot connect to rank {f.rank}")
    if f.out:
        parts.append(f"rank {f.rank} cannot connect to rank(s) "
                     + ", ".join(f"{j} ({matrix[f.rank][j]})" for j in f.out))
    return "; ".join(parts)


def _where(f: _Finding, got: Facts, labels: Sequence[str], paths: Paths) -> str:
    p = paths[f.rank]
    return f"rank {f.rank} on {labels[f.rank]} ({p.get('address')} on {p.get('iface')})"


BACKENDS = ("plain gloo (the rank with the higher address dials the lower one) and NCCL "
            "(each rank dials its ring and tree neighbours) hang on these pairs until "
            "their timeout")


def _firewall_ruled_out(facts: Mapping[str, Any], label: str) -> str:
    fw = (facts.get("firewall") or {}).get("managers") or ["?"]
    return (f"a firewall on {label} (firewall: {', '.join(map(str, fw))}): the kernel refuses "
            "these packets in its routing lookup, before any firewall's input chain")


def _missing(found: Sequence[_Finding], matrix: Sequence[Sequence[str]], got: Facts,
             labels: Sequence[str], paths: Paths) -> Cause:
    lines, fixes, evidence = [], [], []
    for f in found:
        reply = f.entry["reply"]
        via = _gateway(f.subnet, f.rank, paths)
        lines.append(f"{_where(f, got, labels, paths)} has no route to {f.subnet}: "
                     f"`{reply['command']}` answers '{reply['error']}'"
                     + (f", while rank {via[0]} routes it via {via[1]}" if via else "")
                     + f"; {_pairs(f, matrix)}")
        iface = paths[f.rank].get("iface")
        fixes.append(f"on {labels[f.rank]}: ip route add {f.subnet} via "
                     f"{via[1] if via else '<gateway>'} dev {iface}"
                     + (f" (as rank {via[0]} on {labels[via[0]]} has it)" if via else "")
                     + ", and add it to the node's network configuration so it survives a "
                     "reboot")
        evidence.append(f"on {labels[f.rank]}: `{reply['command']}` -> {reply['error']}")
        if via:
            evidence.append(f"on {labels[via[0]]}: the same subnet is routed via {via[1]}")
    return Cause(
        id="missing-route", stage="reachability",
        hosts=tuple(labels[f.rank] for f in found), ranks=tuple(f.rank for f in found),
        detail="; ".join(lines) + f": its packets to that subnet, and its replies to the "
               f"connections from there, have nowhere to go; {BACKENDS}",
        fix="; ".join(fixes), evidence=tuple(evidence),
        ruled_out=(*(_firewall_ruled_out(got.get(f.rank) or {}, labels[f.rank])
                     for f in found),
                   "another node's interface choice: the other ranks reach that subnet"),
        confidence="high",
        see_for_yourself="; ".join(f"on {labels[f.rank]}: ip route get "
                                   f"{f.entry['peer']}; ip route" for f in found),
        data={"subnets": sorted({f.subnet for f in found})})


def gateways(paths: Paths) -> dict[str, list[tuple[int, str]]]:
    """Subnet -> the first two ranks that route it through a gateway, with it (pure)."""
    out: dict[str, list[tuple[int, str]]] = {}
    for k, mine in sorted(paths.items()):
        for subnet, entry in (mine.get("subnets") or {}).items():
            reply = (entry or {}).get("reply") or {}
            if reply.get("ok") and reply.get("via") and len(out.get(subnet, ())) < 2:
                out.setdefault(subnet, []).append((k, str(reply["via"])))
    return out


def _other(routes: Sequence[tuple[int, str]], rank: int) -> tuple[int, str] | None:
    return next((r for r in routes if r[0] != rank), None)


def _gateway(subnet: str, rank: int, paths: Paths) -> tuple[int, str] | None:
    """Another rank that routes ``subnet`` through a gateway: (rank, gateway)."""
    return _other(gateways(paths).get(subnet, ()), rank)


def _asymmetric(found: Sequence[_Finding], matrix: Sequence[Sequence[str]], got: Facts,
                labels: Sequence[str], paths: Paths) -> Cause:
    lines, fixes, evidence = [], [], []
    for f in found:
        p, reply = paths[f.rank], f.entry["reply"]
        addr, iface, table = p.get("address"), p.get("iface"), reply.get("table")
        lines.append(f"{_where(f, got, labels, paths)}: its packets from {addr} to "
                     f"{f.subnet} leave by {reply['dev']}"
                     + (f" via {reply['via']}" if reply.get("via") else "")
                     + (f" (routing table {table}, chosen by a policy rule: `ip rule` shows "
                        f"it)" if table else "")
                     + f", not by {iface} where the peers' packets arrive; {_pairs(f, matrix)}")
        fixes.append(f"on {labels[f.rank]}: " + (
            f"route the cluster subnet by {iface} in that table too: ip route add {f.subnet} "
            f"dev {iface} table {table} (or drop the rule: ip rule del from {addr} lookup "
            f"{table})" if table else
            f"ip route replace {f.subnet} dev {iface} (so replies to the cluster leave by "
            f"the interface the job advertises), or give the other default route a higher "
            "metric"))
        evidence.append(f"on {labels[f.rank]}: `{reply['command']}` -> dev {reply['dev']}"
                        + (f" table {table}" if table else ""))
    return Cause(
        id="asymmetric-route", stage="reachability",
        hosts=tuple(labels[f.rank] for f in found), ranks=tuple(f.rank for f in found),
        detail="; ".join(lines) + ": the replies leave by another NIC and never reach the "
               f"peer; {BACKENDS}",
        fix="; ".join(fixes), evidence=tuple(evidence),
        ruled_out=tuple(_firewall_ruled_out(got.get(f.rank) or {}, labels[f.rank])
                        for f in found),
        confidence="high",
        see_for_yourself="; ".join(f"on {labels[f.rank]}: {f.entry['reply']['command']}; "
                                   "ip rule; ip route show table all" for f in found))


def _reverse(found: Sequence[_Finding], matrix: Sequence[Sequence[str]], got: Facts,
             labels: Sequence[str], paths: Paths) -> Cause:
    lines, fixes, evidence = [], [], []
    for f in found:
        p, inbound, reply = paths[f.rank], f.entry["inbound"], f.entry["reply"]
        iface, other = p.get("iface"), reply.get("dev") or "?"
        arp = p.get("arp_ignore")
        lines.append(f"{_where(f, got, labels, paths)}: `{inbound['command']}` answers "
                     f"'{inbound['error']}': rp_filter={p.get('rp_filter')} drops what "
                     f"arrives on {iface} from {f.subnet}, because the route back leaves by "
                     f"{other}"
                     + (f" (arp_ignore={arp}: only {iface} answers ARP for "
                        f"{p.get('address')}, so the peers' packets always arrive there)"
                        if isinstance(arp, int) and arp >= 1 else "")
                     + f"; {_pairs(f, matrix)}")
        fixes.append(f"on {labels[f.rank]}: sysctl -w net.ipv4.conf.all.rp_filter=2 "
                     f"net.ipv4.conf.{iface}.rp_filter=2 (loose; persist it in "
                     f"/etc/sysctl.d), or keep one NIC in {f.subnet} (ip addr del <its "
                     f"address> dev {other}), or advertise the NIC that wins the route: "
                     f"export GLOO_SOCKET_IFNAME={other} NCCL_SOCKET_IFNAME=={other}")
        evidence += [f"on {labels[f.rank]}: `{inbound['command']}` -> {inbound['error']}",
                     f"on {labels[f.rank]}: `{reply['command']}` -> dev {other}",
                     f"on {labels[f.rank]}: rp_filter={p.get('rp_filter')} "
                     f"arp_ignore={arp} on {iface}"]
    return Cause(
        id="reverse-path-drop", stage="reachability",
        hosts=tuple(labels[f.rank] for f in found), ranks=tuple(f.rank for f in found),
        detail="; ".join(lines) + ": the kernel drops the peers' connections before they "
               f"reach a socket; {BACKENDS}",
        fix="; ".join(fixes), evidence=tuple(evidence),
        ruled_out=tuple(_firewall_ruled_out(got.get(f.rank) or {}, labels[f.rank])
                        for f in found),
        confidence="high",
        see_for_yourself="; ".join(f"on {labels[f.rank]}: {f.entry['inbound']['command']}; "
                                   f"sysctl net.ipv4.conf.{paths[f.rank].get('iface')}"
                                   ".rp_filter" for f in found))


_BUILD: dict[str, Callable[..., Cause]] = {
    "missing-route": _missing, "asymmetric-route": _asymmetric, "reverse-path-drop": _reverse}


def read_published(value: Any) -> Mapping[str, Any] | None:
    """A rank's published paths as rank 0 reads them; None when absent or malformed."""
    if not isinstance(value, Mapping) or not isinstance(value.get("subnets"), Mapping):
        return None
    return value


def fold(causes: Sequence[Cause]) -> list[Cause]:
    """One fact, one cause: a ``nic-same-subnet`` warning of ranks a ``reverse-path-drop``
    names is that cause's evidence, not a second finding."""
    named = {r for c in causes if c.id == "reverse-path-drop" for r in c.ranks}
    return [c for c in causes
            if not (c.id == "nic-same-subnet" and named and set(c.ranks) <= named)]


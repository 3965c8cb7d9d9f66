"""Stage 3: the mesh. Every rank connects to the other ranks' listeners (bounded fan-out) and
publishes its row; rank 0 analyses the matrix (``check.mesh``). Up to ``mesh.SAMPLE_ABOVE``
ranks (or with ``--full-mesh``) that is every pair and rank 0 publishes every rank's listener
once (``stage/mesh``); above it each rank probes a sample of O(log N) peers, rank 0 gives
each rank only its own peers (``mesh/peers/RANK``) and each rank publishes only the probed
cells, so rank 0's store serves and holds O(N log N) bytes for this stage instead of O(N²)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ddpnet.check import latency, loss, mesh, nat, paths, pmtu, tournament
from ddpnet.check.context import Findings, RankContext
from ddpnet.check.stages import pathmtu

Peer = tuple[str, int]


def peers_of(got: Mapping[int, Mapping[str, Any]], world: int) -> list[list[Any] | None]:
    """``[address, mesh_port, mtu_port, mtu, subnet]`` of every rank that published its
    facts, by rank (pure)."""
    return [[got[r]["address"], got[r]["mesh_port"], got[r].get("mtu_port"),
             got[r].get("mtu"), got[r].get("subnet")] if r in got else None
            for r in range(world)]


def as_peers(peers: Sequence[Sequence[Any] | None]) -> list[Peer | None]:
    return [(str(p[0]), int(p[1])) if p else None for p in peers]


def mtu_targets(peers: Sequence[Sequence[Any] | None]) -> list[pmtu.Target | None]:
    """``(address, echo port, MTU)`` of every peer that published both (pure)."""
    return [(str(p[0]), int(p[2]), int(p[3])) if p and len(p) > 3 and p[2] and p[3] else None
            for p in peers]


class Sample(NamedTuple):
    """Rank 0's sampled mesh: the offsets, over hosts when ``hosts`` (hosts of several ranks:
    ``mesh.host_sample``) else over ranks, and every rank's targets."""

    offsets: tuple[int, ...]
    hosts: int | None
    targets: dict[int, list[int]]


def sample(ctx: RankContext, peers: Sequence[Sequence[Any] | None]) -> Sample | None:
    """Rank 0: the sampled mesh, None for every pair: up to ``mesh.SAMPLE_ABOVE`` ranks,
    with ``--full-mesh``, or with the bandwidth matrix (which plays every pair)."""
    opts, world = ctx.opts, ctx.world
    if opts.full_mesh or opts.matrix_on(world) or world <= mesh.SAMPLE_ABOVE:
        return None
    seed = int(ctx.uid[:8], 16)
    hosts = [str(p[0]) if p else None for p in peers]
    by_host = mesh.host_sample(hosts, seed)
    if by_host is not None:
        count = len({h for h in hosts if h is not None})
        return Sample(mesh.sample_offsets(count, seed), count, by_host)
    offsets = mesh.sample_offsets(world, seed)
    return Sample(offsets, None, {r: mesh.sample_targets(r, world, offsets)
                                  for r in range(world)})


def own_peers(peers: Sequence[Sequence[Any] | None], rank: int, targets: Sequence[int],
              ring: Sequence[int] = ()) -> dict[str, Any]:
    """What rank ``rank`` of a sampled mesh reads (pure): its own entry, its sampled
    ``targets``' and its MTU/loss ring's (``host_ring``; under ``"ring"``, empty for a
    host's other ranks)."""
    out: dict[str, Any] = {str(j): peers[j] for j in (rank, *targets, *ring)
                           if peers[j] is not None}
    out[RING] = list(ring)
    return out


def expand(mine: Mapping[str, Any], world: int) -> list[list[Any] | None]:
    """A sampled mesh's peers as the full list ``probe`` takes, None where not probed."""
    peers: list[list[Any] | None] = [None] * world
    for j, p in mine.items():
        if str(j).isdigit() and int(j) < world:
            peers[int(j)] = list(p)
    return peers


def peers_for(ctx: RankContext, stage: Mapping[str, Any]
              ) -> tuple[list[list[Any] | None], list[int] | None]:
    """Ranks > 0: the peers to probe, from rank 0's go (every pair) or, in a sampled mesh,
    from this rank's own key; with the sampled mesh's MTU/loss ring (None: every peer)."""
    if "peers" in stage:
        return list(stage["peers"]), None
    mine = ctx.store.get(f"mesh/peers/{ctx.rank}", ctx.budget)
    return expand(mine, ctx.world), [int(j) for j in mine.get(RING) or ()]


#: in a sampled mesh each host's first rank probes path MTU and loss toward the first ranks of
#: this many next hosts (in rank order), and of one host in each of this many other subnets:
#: every host sits on a few probed paths each way, a constant per host at any N. The other
#: ranks of a host probe neither: their NIC, routes and MTU are the first rank's (8 ranks of
#: a GPU node probing 8 ring neighbours each mostly probed their own loopback).
RING_PROBES, OTHER_SUBNETS = 2, 2
RING = "ring"


def host_ring(peers: Sequence[Sequence[Any] | None]) -> dict[int, list[int]]:
    """Rank 0, sampled mesh: by each host's first rank, the ranks it probes for MTU and loss
    (pure, O(N)). A host is an advertised address. Its ring: the first ranks of the next
    RING_PROBES hosts, and in each of the next OTHER_SUBNETS subnets the host at its own
    position in its subnet (so a subnet's hosts spread over the other's, and one /32 per
    host, as some clouds give, stays a ring instead of every host probing every other)."""
    firsts: dict[str, int] = {}
    for r, p in enumerate(peers):
        if p is not None:
            firsts.setdefault(str(p[0]), r)
    order = list(firsts.values())
    by_subnet: dict[str, list[int]] = {}
    for r in order:
        by_subnet.setdefault(paths.peer_subnet(peers[r] or ()), []).append(r)
    subnets = list(by_subnet)
    where = {r: (k, pos) for k, s in enumerate(subnets) for pos, r in enumerate(by_subnet[s])}
    n, count = len(order), len(subnets)
    out: dict[int, list[int]] = {}
    for i, r in enumerate(order):
        k, pos = where[r]
        near = [order[(i + d) % n] for d in range(1, min(RING_PROBES, n - 1) + 1)]
        across = [(hosts := by_subnet[subnets[(k + d) % count]])[pos % len(hosts)]
                  for d in range(1, min(OTHER_SUBNETS, count - 1) + 1)]
        out[r] = [t for t in dict.fromkeys((*near, *across)) if t != r]  # the next first
    return out


def keep(targets: Sequence[Any], ranks: Sequence[int]) -> list[Any]:
    """``targets`` with None where the rank is not in ``ranks`` (pure)."""
    chosen = set(ranks)
    return [t if j in chosen else None for j, t in enumerate(targets)]


def probe(ctx: RankContext, peers: Sequence[Sequence[Any] | None],
          ring: Sequence[int] | None = None) -> None:
    """Connect to every peer given while the path-MTU and loss probes run and the kernel is
    asked about the paths (``check.paths``); publish this rank's rows (the MTU row first: rank
    0 reads it once the mesh row is there). A sampled mesh (``ring`` given) publishes only the
    probed cells, and only a host's first rank (a non-empty ``ring``) probes MTU and loss, on
    its ring, and asks the kernel."""
    from concurrent.futures import ThreadPoolExecutor

    from ddpnet.doctor.base import Host

    targets = mtu_targets(peers)
    own = targets[ctx.rank] if ctx.rank < len(targets) else None
    sampled = ring is not None
    first = not sampled or bool(ring)  # this host's first rank (every rank: every pair)
    if sampled:
        targets = keep(targets, ring or ())
    with ThreadPoolExecutor(max_workers=3) as pool:
        mtu_row = pool.submit(pmtu.probe_row, ctx.rank, ctx.address, own[2] if own else 0,
                              targets, fanout=ctx.opts.fanout)
        # the ring itself in a sampled mesh; else the ring neighbours of every pair
        loss_row = pool.submit(loss.probe_row, ctx.rank, targets, fanout=ctx.opts.fanout,
                               chosen=ring)
        kernel = pool.submit(paths.gather, str(ctx.address), str(ctx.sel.interface),
                             paths.representatives(peers, ctx.rank) if first else {},
                             Host().sysctl,
                             jobs=paths.job_bindings(_facts(ctx), str(ctx.address))
                             if first else ())
        row = mesh.probe_row(ctx.rank, as_peers(peers), timeout=ctx.opts.connect_timeout,
                             fanout=ctx.opts.fanout, source=ctx.probe_from)
        try:
            mtus = mtu_row.result()
        except OSError as exc:  # a probe socket this host refuses: not judged
            mtus = {"error": {"reason": str(exc)}}
        try:
            routes: dict[str, Any] | None = kernel.result()
        except (OSError, ValueError):  # no evidence: nothing judged
            routes = None
        try:
            losses: dict[str, list[int]] = loss_row.result()
        except OSError:
            losses = {}
    # last, alone (a stream beside the probes would slow their echoes): a host's first rank
    # streams to the next host's (every pair: the ring worked out from the peers here), unless
    # the mesh's connect to it just failed (the mesh names that; a stream would only wait its
    # own connect timeout: 8 s more for each rank beside a filtered host)
    nxt = (ring if ring is not None else host_ring(peers).get(ctx.rank, []))[:1]
    bw = ring_stream(peers, ctx.rank, nxt[0], ctx.opts.connect_timeout,
                     ctx.probe_from) if nxt and row.statuses[nxt[0]] in STREAMABLE else {}
    ctx.store.publish("pmtu", ctx.rank, mtus)
    probed = [j for j, p in enumerate(peers) if p is not None and j != ctx.rank]
    ctx.store.publish("mesh", ctx.rank, {**mesh.published(row, probed if sampled else None),
                                         "paths": routes, "loss": losses, "bw": bw})


#: a ring stream goes to a peer the mesh reached, or did not probe
STREAMABLE = (mesh.OK, mesh.UNKNOWN)
#: bandwidth without the matrix (off above 64 ranks: O(N) rounds): each host's first rank
#: streams this long to the next host's; the stream's round number (the tournament's are
#: 0..N, the second networks' negative)
RING_BW_S, RING_STREAMS, RING_ROUND = 0.1, 1, 1 << 62
#: ... or until it has sent this much: the ring screens for a node an order of magnitude
#: slower (tournament.RING_FRACTION), and 16 MB take 1.3 ms at 100 Gb/s and 0.13 s at 1 Gb/s:
#: a slow node still streams its whole 0.1 s, a fast one stops early instead of spending
#: 0.1 s of both hosts' CPU (161 CPU-ms a stream over loopback, benchmarks/probe_costs.py:
#: ~2/3 of a simulated rank's whole check before)
RING_MOST = 16 << 20


def ring_stream(peers: Sequence[Sequence[Any] | None], me: int, to: int,
                connect_timeout: float, source: str | None = None) -> dict[str, float]:
    """``{to: Gb/s}`` for short streams to rank ``to``'s listener, as this sender saw them
    drain: the faster of RING_STREAMS (a host that stalled for a moment, a busy CPU, slows
    one of them; a slow link slows both) (edge). Nothing when none went through (the TCP
    mesh names an unreachable peer)."""
    peer = peers[to] if to < len(peers) else None
    if peer is None:
        return {}
    rates = []
    for _ in range(RING_STREAMS):
        try:
            sent, took = tournament.send_stream(
                str(peer[0]), int(peer[1]), RING_ROUND, me, seconds=RING_BW_S, chunk=1 << 16,
                most=RING_MOST, drain=True, timeout=connect_timeout + 5.0, source=source)
        except OSError:
            continue
        if took > 0:
            rates.append(sent * 8 / took / 1e9)
    return {str(to): round(max(rates), 4)} if rates else {}


def _facts(ctx: RankContext) -> Mapping[str, Any]:
    """This rank's facts as gathered (what its libraries would bind), else nothing."""
    try:
        facts = ctx.facts.result(timeout=0)
    except Exception:  # not gathered (yet): nothing beside this check's own address
        return {}
    return facts if isinstance(facts, Mapping) else {}


def _blocking(found: Findings) -> bool:
    """Failures that would hang the process group stage until its timeout: a loopback
    address, or gloo bound (GLOO_SOCKET_IFNAME) where its peers cannot pair up."""
    return any(c.severity == "fail" and (c.id == "hostname-loopback" or (
        c.id == "ifname-mismatch" and c.data.get("var") == "GLOO_SOCKET_IFNAME"))
        for c in found.causes)


def mesh_stage(ctx: RankContext, found: Findings, got: Mapping[int, Mapping[str, Any]],
               plan: MeshPlan) -> bool:
    """Rank 0: probe, gather the rows, analyse; publish whether the process group may
    start, and return it."""
    t = time.monotonic()
    world, opts = ctx.world, ctx.opts
    peers, sampled = plan.peers, plan.sampled
    if sampled is None:
        ctx.progress(f"reachability: {world} x {world} connects (fan-out {opts.fanout})")
        probe(ctx, peers)
    else:
        ctx.progress(f"reachability: {sum(map(len, sampled.targets.values()))} sampled "
                     f"connects (fan-out {opts.fanout}; --full-mesh for every pair)")
        mine = own_peers(peers, 0, sampled.targets.get(0, ()), plan.ring.get(0, ()))
        probe(ctx, expand(mine, world), mine[RING])
    rows = ctx.store.gather("mesh", found.ranks, opts.stage_timeout + opts.connect_timeout * 2)
    matrix, seen = _matrix(rows, world, sampled is not None)
    round_trips(found, rows, got, peers, sampled is None)
    lost = [r for r in found.ranks if r not in rows]
    if lost:
        found.causes.append(found.timeout_cause("reachability", lost))
    # where each rank's probes arrived at its peers from: a NAT rewrites it
    causes, explained = nat.analyze(matrix, got, found.labels, seen)
    # what each rank's kernel says about the way in and back: routes, rp_filter
    kernel, routed = paths.analyze(nat.masked(matrix, explained), got, found.labels,
                                   kernel_paths(rows))
    causes += kernel
    explained |= routed
    causes += mesh.analyze(nat.masked(matrix, explained), found.labels,
                           [p[1] if p else None for p in peers], ctx.cfg.master_port,
                           str(got[0].get("subnet") or "<cluster-subnet>"),
                           firewalls=[mesh.firewall_verdict(got.get(r) or {})
                                      for r in range(world)],
                           addresses=[str(p[0]) if p else None for p in peers])
    causes += pathmtu.mesh_rows(ctx, found, got, sorted(rows))
    settle(found, matrix, [r for c in causes if c.id in ("behind-nat", "advertised-unreachable")
                           for r in c.ranks], explained)
    found.causes.extend(causes)
    found.causes[:] = paths.fold(found.causes)
    cells = mesh.known_cells(matrix)
    ok, pairs = sum(s == mesh.OK for _, _, s in cells), world * (world - 1)
    if sampled is not None:  # the matrix is a mesh.Sampled one
        found.extra["notes"] = (*found.extra.get("notes", ()), sampled_note(
            world, sampled, ok, len(cells)))
        pairs = len(cells)
    else:
        found.extra["reachability"] = matrix
    failing = [c for c in causes if c.severity == "fail"]  # a warning stops nothing
    found.stages["reachability"] = "fail" if failing or lost else "pass"
    took = ctx.took("reachability", t)
    ctx.progress(f"reachability: {ok} of {pairs} links ok in {took:.1f} s")
    go = not failing and not lost and not _blocking(found)
    judge_loss(found, rows)
    links = ring_links(rows) if not opts.matrix_on(world) else {}  # else: the tournament
    found.rates = dict(links)
    # a ring link slow because of its round trip is high-latency's (judged at the end)
    found.latency = latency.consistent(found.latency, links, found.windows)
    latent = found.latency.explained() if found.latency is not None else frozenset()
    found.causes.extend(tournament.ring_slow_nodes(
        {p: v for p, v in links.items() if p not in latent}, found.labels))
    if links:
        found.extra["notes"] = (*found.extra.get("notes", ()), ring_note(links))
    ctx.store.set("stage/pg", {"go": go})
    return go


def _matrix(rows: Mapping[int, Any], world: int,
            sampled: bool) -> tuple[Sequence[Sequence[str]], dict[int, dict[int, str]]]:
    """The matrix the rows make (a ``mesh.Sampled`` one for a sampled mesh) and where each
    rank's probes arrived from, by rank (pure)."""
    read = {i: mesh.read_published(v, world) for i, v in rows.items()} if not sampled else \
        {i: mesh.Row([], mesh.read_published({"seen": v.get("seen")}, world).seen)
         for i, v in rows.items() if isinstance(v, Mapping)}
    seen = {i: r.seen for i, r in read.items()}
    if sampled:
        return mesh.Sampled(world, {i: mesh.read_cells(v, world)
                                    for i, v in rows.items()}), seen
    return tuple(tuple(read[i].statuses) if i in read else (mesh.UNKNOWN,) * world
                 for i in range(world)), seen


def sampled_note(world: int, sampled: Sample, ok: int, cells: int) -> str:
    """What a sampled mesh judged (pure)."""
    kinds = f"the ring, the powers of two and {mesh.RANDOM_OFFSETS} random"
    how = (f"each probed {len(sampled.offsets)} peers ({kinds} offsets)"
           if sampled.hosts is None else
           f"on {sampled.hosts} hosts, each host probed {len(sampled.offsets)} other hosts "
           f"({kinds} host offsets), shared among its ranks, each rank also probing the "
           "next host")
    return (f"reachability: {world} ranks {how}: {ok} of {cells} sampled pairs ok, of "
            f"{world * (world - 1)} in all; --full-mesh probes every pair")


def judge_loss(found: Findings, rows: Mapping[int, Any]) -> None:
    """Loss slows training, it does not stop the group: judged beside the mesh, never a
    reason to skip the process group stage."""
    lossy = loss.analyze({i: v.get("loss") or {} for i, v in rows.items()
                          if isinstance(v, Mapping)}, found.labels)
    found.causes.extend(lossy)
    if any(c.severity == "fail" for c in lossy):
        found.stages["reachability"] = "fail"


def ring_note(links: Mapping[tuple[int, int], float]) -> str:
    """What the ring streams measured (pure)."""
    import statistics

    values = sorted(links.values())
    return (f"bandwidth: {len(values)} ring links streamed {RING_STREAMS} x {RING_BW_S:g} s "
            f"or {RING_MOST >> 20} MB each (each host to the next, the fastest counts): median "
            f"{statistics.median(values):.3f} Gb/s, slowest {values[0]:.3f} (a screen for a "
            "slow node: a short stream reads a 100 Gb/s link low); --matrix measures every "
            "pair")


def round_trips(found: Findings, rows: Mapping[int, Any], got: Mapping[int, Mapping[str, Any]],
                peers: Sequence[Sequence[Any] | None], every_pair: bool) -> None:
    """Rank 0: every probe's round trip; with every pair probed, the N x N matrix of them
    for the report and what they name (``check.latency.find``, against every host's TCP
    windows; judged once the bandwidth is in, ``stages.latency``). A sampled mesh times
    most pairs one way only, while other hosts' ring streams already run: not judged."""
    found.rtt = latency.rtt_pairs(rows, found.world)
    if not every_pair:
        return
    found.extra["rtt_ms"] = latency.rtt_matrix(found.rtt, found.world)
    found.windows = {r: latency.Window.of(facts) for r, facts in got.items()}
    found.latency = latency.find(found.rtt, [str(p[0]) if p else None for p in peers])


def ring_links(rows: Mapping[int, Any]) -> dict[tuple[int, int], float]:
    """A sampled mesh's ring streams, ``(from, to) -> Gb/s``, from the rows (pure)."""
    out: dict[tuple[int, int], float] = {}
    for rank, value in rows.items():
        bw = value.get("bw") if isinstance(value, Mapping) else None
        for to, gbps in (bw.items() if isinstance(bw, Mapping) else ()):
            if str(to).isdigit() and isinstance(gbps, (int, float)) and gbps > 0:
                out[(rank, int(to))] = float(gbps)
    return out


def kernel_paths(rows: Mapping[int, Any]) -> dict[int, Mapping[str, Any]]:
    """Every rank's published kernel answers (``check.paths``), by rank (pure)."""
    out: dict[int, Mapping[str, Any]] = {}
    for rank, value in rows.items():
        got = paths.read_published(value.get("paths") if isinstance(value, Mapping) else None)
        if got is not None:
            out[rank] = got
    return out


def settle(found: Findings, matrix: Sequence[Sequence[str]], nat_ranks: Sequence[int],
           explained: set[tuple[int, int]]) -> None:
    """The facts stage's other-subnet finding, judged again with the mesh: a routed
    multi-subnet cluster passes, a NATed one is the NAT's finding."""
    found.causes[:] = nat.settle_subnets(found.causes, matrix, nat_ranks, explained)
    if found.stages.get("facts") == "fail" and not any(
            c.stage == "facts" and c.severity == "fail" for c in found.causes):
        found.stages["facts"] = "pass"


class MeshPlan(NamedTuple):
    """Rank 0's mesh as announced: every rank's listener, and for a sampled mesh the sample
    and the MTU/loss host ring (worked out once, for the go and for rank 0's own probes)."""

    peers: list[list[Any] | None]
    sampled: Sample | None
    ring: dict[int, list[int]]


def announce(ctx: RankContext, found: Findings,
             got: Mapping[int, Mapping[str, Any]]) -> MeshPlan | None:
    """Rank 0: publish every rank's listener (the go for the mesh) when every rank's facts
    came; the mesh, or None when the check stops here. A sampled mesh gives each rank only
    its own peers (its key is set before the go)."""
    peers = peers_of(got, ctx.world)
    # peers advertising one address would probe themselves: nothing to learn from the mesh
    go = all(r in got for r in found.ranks) and not any(
        c.id == "duplicate-address" for c in found.causes)
    sampled = sample(ctx, peers) if go else None
    ring = host_ring(peers) if sampled is not None else {}
    if sampled is not None:
        ctx.store.set_many({f"mesh/peers/{r}": own_peers(
            peers, r, sampled.targets.get(r, ()), ring.get(r, ())) for r in found.ranks if r})
        ctx.store.set("stage/mesh", {"go": go, "sampled": True})
    else:
        ctx.store.set("stage/mesh", {"go": go, "peers": peers})
    return MeshPlan(peers, sampled, ring) if go else None

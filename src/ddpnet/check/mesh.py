"""Stage 3: reachability on the ephemeral ports gloo and NCCL use.

Every rank listens on an ephemeral port of its selected address and connects to other ranks
with bounded fan-out (at most ``fanout`` connects in flight). Up to :data:`SAMPLE_ABOVE`
ranks (or with ``--full-mesh``) every rank connects to every other: N x N, one rank's cost
O(N / fanout * connect_timeout) in the worst case and O(N * RTT) when healthy. Above it each
rank probes a structured sample (:func:`sample_offsets`: the ring, the powers of two and a
few random offsets, O(log N) pairs per rank, each rank probed by as many as it probes), and
rank 0 keeps only the probed cells (:class:`Sampled`): what grows with N is then N log N
connects and cells, not N².
"""

from __future__ import annotations

import contextlib
import ipaddress
import random
import socket
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, overload

from ddpnet.check.causes import Cause
from ddpnet.net import probe as probe_outcomes
from ddpnet.net.sockopt import tcp_rtt_ms

OK, REFUSED, FILTERED, NO_ROUTE = "ok", "refused", "filtered", "no-route"
SELF, UNKNOWN = "self", "?"
PROBE_MAGIC = b"DDPNETPROBE\n"
SEEN_MAGIC = b"DDPNETSEEN "


#: above this many ranks the mesh probes a sample of pairs unless --full-mesh asks for all
SAMPLE_ABOVE = 64
#: random offsets beside the ring and the powers of two in a sampled mesh
RANDOM_OFFSETS = 4


#: net.probe's outcome of a connect -> the mesh's word for it (the matrix shows these)
_MESH_WORD = {probe_outcomes.TIMEOUT: FILTERED, probe_outcomes.REFUSED: REFUSED}


def classify_error(exc: BaseException) -> str:
    """Map a connect failure to refused/filtered/no-route (pure), through the one
    classifier :func:`ddpnet.net.probe.outcome_of`."""
    return _MESH_WORD.get(probe_outcomes.outcome_of(exc).outcome, NO_ROUTE)


def hello(rank: int | None) -> bytes:
    """What a probe says: the magic, and the prober's rank."""
    return PROBE_MAGIC if rank is None else PROBE_MAGIC[:-1] + b" %d\n" % rank


def parse_hello(data: bytes) -> int | None:
    """The rank in a probe's hello, None when it carries none (pure)."""
    if not data.startswith(PROBE_MAGIC[:-1] + b" ") or not data.endswith(b"\n"):
        return None
    text = data[len(PROBE_MAGIC):-1]
    return int(text) if text.isdigit() and len(text) < 10 else None


def seen_reply(address: str) -> bytes:
    """The listener's answer to a hello: the address the probe arrived from. Every rank
    learns how each peer sees it, so a NAT on the way shows wherever it sits, not only
    toward rank 0."""
    return SEEN_MAGIC + address.encode("ascii", "replace")[:64] + b"\n"


def parse_seen(data: bytes) -> str | None:
    """The address in a listener's answer; None for anything else (pure)."""
    if not data.startswith(SEEN_MAGIC) or not data.endswith(b"\n"):
        return None
    text = data[len(SEEN_MAGIC):-1].decode("ascii", "replace")
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


class Outcome(NamedTuple):
    """One probe: the connect's status, the address the listener saw it come from and the
    connect's round trip in ms (None when it failed)."""

    status: str
    seen: str | None = None
    rtt_ms: float | None = None


def probe(address: str, port: int, timeout: float, rank: int | None = None,
          source: str | None = None) -> Outcome:
    """Connect once (from ``source`` when given, else the kernel's choice), time the round
    trip, say who we are, read where the listener saw us come from (bounded by ``timeout``;
    a listener that does not answer leaves it unknown), close (edge). The round trip is the
    kernel's (``net.sockopt.tcp_rtt_ms``: the handshake, whatever this host's load), else
    the connect timed here."""
    start = time.perf_counter()
    try:
        with socket.create_connection((address, port), timeout=timeout,
                                      source_address=(source, 0) if source else None) as sock:
            took = (time.perf_counter() - start) * 1000
            rtt = tcp_rtt_ms(sock)
            sock.sendall(hello(rank))
            return Outcome(OK, _read_seen(sock) if rank is not None else None,
                           round(took if rtt is None else min(rtt, took), 3))
    except OSError as exc:
        return Outcome(classify_error(exc))


def _read_seen(sock: socket.socket) -> str | None:
    data = b""
    try:
        while not data.endswith(b"\n") and len(data) < 96:
            chunk = sock.recv(96 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError:  # connected, then nothing: the status stands, the address is unknown
        return None
    return parse_seen(data)


class Row(NamedTuple):
    """A rank's row of the matrix and, for the peers that saw it arrive from an address
    other than the one it advertises, that address (by peer rank); the round trip to each
    peer it reached, in ms (by peer rank)."""

    statuses: list[str]
    seen: dict[int, str]
    rtt: Mapping[int, float] = {}


def probe_row(me: int, peers: Sequence[tuple[str, int] | None], *, timeout: float,
              fanout: int = 32, source: str | None = None) -> Row:
    """One row of the matrix: this rank to every rank it knows (``None`` peers stay
    unknown; edge, bounded concurrency), from ``source`` when given."""
    row = [UNKNOWN] * len(peers)
    row[me] = SELF
    seen: dict[int, str] = {}
    rtt: dict[int, float] = {}
    own = peers[me] if me < len(peers) else None
    mine = own[0] if own is not None else None

    def one(j: int) -> tuple[int, Outcome]:
        target = peers[j]
        if target is None:
            return j, Outcome(UNKNOWN)
        return j, probe(target[0], target[1], timeout, me, source)

    jobs = [j for j in range(len(peers)) if j != me and peers[j] is not None]
    with ThreadPoolExecutor(max_workers=max(1, min(fanout, len(jobs)))) as pool:
        for j, got in pool.map(one, jobs):
            row[j] = got.status
            if got.seen is not None and got.seen != mine:
                seen[j] = got.seen
            if got.rtt_ms is not None:
                rtt[j] = got.rtt_ms
    return Row(row, seen, rtt)


def published(row: Row, probed: Sequence[int] | None = None) -> dict[str, Any]:
    """What a rank publishes for the mesh: O(N) statuses, or in a sampled mesh the
    ``probed`` cells only; ``seen`` is empty without NAT; ``rtt`` the round trip (ms) to
    each peer it reached."""
    seen = {str(j): a for j, a in sorted(row.seen.items())}
    rtt = {str(j): ms for j, ms in sorted(row.rtt.items())}
    if probed is not None:
        return {"cells": {str(j): row.statuses[j] for j in probed}, "seen": seen, "rtt": rtt}
    return {"row": row.statuses, "seen": seen, "rtt": rtt}


def read_published(value: Any, world: int) -> Row:
    """A published row as rank 0 reads it; anything malformed reads as unknown (pure)."""
    value = value if isinstance(value, Mapping) else {}
    cells = read_cells(value, world)
    statuses = value.get("row")
    if cells and statuses is None:
        statuses = [cells.get(j, UNKNOWN) for j in range(world)]
    if not (isinstance(statuses, list) and len(statuses) == world
            and all(isinstance(s, str) for s in statuses)):
        statuses = [UNKNOWN] * world
    seen: dict[int, str] = {}
    raw = value.get("seen")
    for j, address in (raw.items() if isinstance(raw, Mapping) else ()):
        if str(j).isdigit() and int(j) < world and isinstance(address, str):
            seen[int(j)] = address
    return Row(list(statuses), seen, read_rtt(value, world))


def read_rtt(value: Any, world: int) -> dict[int, float]:
    """A published row's round trips (``{peer: ms}``); malformed or non-finite ones left
    out (pure)."""
    raw = value.get("rtt") if isinstance(value, Mapping) else None
    return {int(j): float(ms) for j, ms in (raw.items() if isinstance(raw, Mapping) else ())
            if str(j).isdigit() and int(j) < world and isinstance(ms, (int, float))
            and not isinstance(ms, bool) and 0 <= ms < float("inf")}


def read_cells(value: Any, world: int) -> dict[int, str]:
    """A sampled mesh's published cells (``{peer: status}``); malformed ones left out
    (pure)."""
    raw = value.get("cells") if isinstance(value, Mapping) else None
    return {int(j): s for j, s in (raw.items() if isinstance(raw, Mapping) else ())
            if str(j).isdigit() and int(j) < world and isinstance(s, str)}


def sample_offsets(world: int, seed: int) -> tuple[int, ...]:
    """The offsets d of a sampled mesh: rank i probes rank (i + d) mod N. The ring (1) and
    every power of two (any rank within log2 N hops of any other), and
    :data:`RANDOM_OFFSETS` random ones from ``seed``; every rank is probed by as many ranks as
    it probes, so a node that drops what comes in is seen by ~log2 N + 4 peers (pure)."""
    base = {1 << k for k in range(world.bit_length()) if 0 < (1 << k) < world}
    rest = [d for d in range(1, world) if d not in base]
    extra = random.Random(seed).sample(rest, min(RANDOM_OFFSETS, len(rest)))
    return tuple(sorted(base | set(extra)))


def sample_targets(me: int, world: int, offsets: Sequence[int]) -> list[int]:
    """The ranks ``me`` probes in a sampled mesh (pure)."""
    return sorted({(me + d) % world for d in offsets} - {me})


def host_sample(hosts: Sequence[str | None], seed: int) -> dict[int, list[int]] | None:
    """Every rank's targets in a sampled mesh of hosts that each run several ranks (pure,
    O(N)); None when each rank is a host of its own, or all share one (the rank offsets
    serve them). The offsets (:func:`sample_offsets`) are taken over hosts, not ranks, and
    each rank probes only other hosts: rank offsets 1, 2 and 4 among 8 ranks a node probed
    the node itself, over loopback, where no firewall or switch is on the way. Each rank
    probes the rank at its own local index on the next host (so every rank is probed from
    another host, and probes one), and the host's other offsets are shared among its ranks
    in turn: a host pair of every offset is probed once, each rank probes and is probed
    ~1 + (log2 H + 4) / K times instead of log2 N + 4 (4,096 ranks on 512 hosts: ~10,000
    connects instead of ~65,000)."""
    members: dict[str, list[int]] = {}
    for r, address in enumerate(hosts):
        if address is not None:
            members.setdefault(address, []).append(r)
    order = list(members.values())
    count = len(order)
    if count < 2 or all(len(m) == 1 for m in order):
        return None
    others = [d for d in sample_offsets(count, seed) if d != 1]
    out: dict[int, list[int]] = {}
    for h, ranks in enumerate(order):
        for local, r in enumerate(ranks):
            shares = [1, *(d for k, d in enumerate(others) if k % len(ranks) == local)]
            there = [order[(h + d) % count] for d in shares]
            out[r] = sorted({t[local % len(t)] for t in there} - {r})
    return out


class SampledRow(Sequence[str]):
    """One row of a :class:`Sampled` matrix (a view: unprobed cells read as unknown)."""

    def __init__(self, me: int, world: int, cells: Mapping[int, str]) -> None:
        self.me, self.world, self.cells = me, world, cells

    def __len__(self) -> int:
        return self.world

    @overload
    def __getitem__(self, j: int) -> str: ...

    @overload
    def __getitem__(self, j: slice) -> Sequence[str]: ...

    def __getitem__(self, j: int | slice) -> str | Sequence[str]:
        if isinstance(j, slice):
            return [self[k] for k in range(self.world)[j]]
        if not -self.world <= j < self.world:
            raise IndexError(j)
        j %= self.world
        return SELF if j == self.me else self.cells.get(j, UNKNOWN)


class Sampled(Sequence[Sequence[str]]):
    """The matrix of a sampled mesh: the probed cells by row, unknown elsewhere. Reads as an
    N x N matrix for the analyses, holds O(N log N) cells."""

    def __init__(self, world: int, rows: Mapping[int, Mapping[int, str]]) -> None:
        self.world = world
        self.rows = rows
        self._into: dict[int, list[str]] | None = None

    def __len__(self) -> int:
        return self.world

    @overload
    def __getitem__(self, i: int) -> Sequence[str]: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[Sequence[str]]: ...

    def __getitem__(self, i: int | slice) -> Sequence[str] | Sequence[Sequence[str]]:
        if isinstance(i, slice):
            return [self[k] for k in range(self.world)[i]]
        if not -self.world <= i < self.world:
            raise IndexError(i)
        i %= self.world
        return SampledRow(i, self.world, self.rows.get(i, {}))

    def cells(self) -> Iterator[tuple[int, int, str]]:
        for i in sorted(self.rows):
            for j, status in sorted(self.rows[i].items()):
                if j != i:
                    yield i, j, status

    def touching(self, r: int) -> list[str]:
        """The statuses of every probed pair from or to ``r``."""
        if self._into is None:
            into: dict[int, list[str]] = defaultdict(list)
            for _, j, status in self.cells():
                into[j].append(status)
            self._into = into
        return [s for j, s in self.rows.get(r, {}).items() if j != r] + self._into.get(r, [])

    def without(self, pairs: set[tuple[int, int]]) -> Sampled:
        """The same cells but ``pairs`` (pure)."""
        return Sampled(self.world, {i: {j: s for j, s in row.items() if (i, j) not in pairs}
                                    for i, row in self.rows.items()})


def known_cells(matrix: Sequence[Sequence[str]]) -> list[tuple[int, int, str]]:
    """Every judged cell ``(i, j, status)`` off the diagonal: unknown ones left out (pure;
    O(cells) for a :class:`Sampled` matrix)."""
    if isinstance(matrix, Sampled):
        return [c for c in matrix.cells() if c[2] not in (SELF, UNKNOWN)]
    return [(i, j, s) for i, row in enumerate(matrix) for j, s in enumerate(row)
            if i != j and s not in (SELF, UNKNOWN)]


def analyze(matrix: Sequence[Sequence[str]], labels: Sequence[str],
            ports: Sequence[int | None], master_port: int,
            subnet: str = "<cluster-subnet>", *, firewalls: Sequence[str | None] = (),
            addresses: Sequence[str | None] = ()) -> list[Cause]:
    """Name the broken pairs; when every connection *into* a rank fails while the master
    port worked for it, that rank's firewall drops its ephemeral ports (peer-port-blocked),
    unless its firewall, read (``firewalls``: :func:`firewall_verdict` by rank), has no
    rule that drops them: then it is not its firewall's doing (peer-unreachable). Reads only
    the judged cells (:func:`known_cells`), so a sampled matrix costs its size."""
    n = len(matrix)
    cells = known_cells(matrix)
    if all(s == OK for _, _, s in cells):
        return []
    into: dict[int, list[tuple[int, str]]] = defaultdict(list)
    out: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for i, j, s in cells:
        into[j].append((i, s))
        out[i].append((j, s))
    explained: set[tuple[int, int]] = set()
    seen = Receivers(labels, ports, master_port, subnet, firewalls, addresses)
    causes = [*_unreachable_receivers(n, into, seen, explained),
              *_isolated_senders(out, labels, explained)]
    rest = [(i, j, s) for i, j, s in cells if s != OK and (i, j) not in explained]
    if rest:
        causes.append(_broken_pairs(rest, labels, subnet))
    return causes


Edges = Mapping[int, Sequence[tuple[int, str]]]


#: doctor check whose verdict says whether a node's firewall drops the ephemeral ports
EPHEMERAL_CHECK = "firewall.ephemeral"


def firewall_verdict(facts: Mapping[str, Any]) -> str | None:
    """What a node's firewall, read by its doctor (``net.firewall`` and the rule evaluator),
    says about the ephemeral ports from the cluster subnet (pure): ``drops``, ``accepts``,
    ``none`` (no firewall filters input) or None (not known)."""
    checks = facts.get("firewall_checks") or {}
    failed = (facts.get("doctor") or {}).get("failed") or ()
    if checks.get(EPHEMERAL_CHECK) == "fail" or EPHEMERAL_CHECK in failed:
        return "drops"
    fw = facts.get("firewall") or {}
    if list(fw.get("managers") or ()) == ["none"] and not fw.get("unreadable"):
        return "none"
    return "accepts" if checks.get(EPHEMERAL_CHECK) == "pass" else None


class Receivers(NamedTuple):
    """What the receiver analysis knows of every rank besides the matrix."""

    labels: Sequence[str]
    ports: Sequence[int | None]
    master_port: int
    subnet: str
    firewalls: Sequence[str | None] = ()
    addresses: Sequence[str | None] = ()


#: how each failure of a connect shows to the libraries
KIND_MEANS = {
    FILTERED: "dropped (no answer): plain gloo's connect waits out the process group's "
              "timeout (30 min by default) and NCCL's bootstrap hangs the same way",
    REFUSED: "rejected with a reset: plain gloo fails within seconds (\"Connection "
             "refused\" after 3 retries), NCCL once its socket retries are spent",
    NO_ROUTE: "rejected with an ICMP unreachable/prohibited (or unroutable): plain gloo and "
              "NCCL fail at once with \"No route to host\"",
}


def _ip_key(address: str | None) -> tuple[int, int]:
    try:
        ip = ipaddress.ip_address(str(address))
    except ValueError:
        return (0, -1)
    return (ip.version, int(ip))


def gloo_dialers(j: int, incoming: Sequence[int], addresses: Sequence[str | None]) -> list[int]:
    """The ranks whose plain gloo dials rank ``j``: gloo's tcp ``Device::isInitiator`` makes
    the side with the higher address connect and the lower one listen (pure)."""
    if j >= len(addresses) or addresses[j] is None:
        return list(incoming)
    return [i for i in incoming if i < len(addresses) and addresses[i] is not None
            and _ip_key(addresses[i]) > _ip_key(addresses[j])]


def _backends(j: int, incoming: Sequence[int], kinds: Sequence[str],
              addresses: Sequence[str | None]) -> str:
    means = "; ".join(f"{k}: {KIND_MEANS[k]}" for k in kinds if k in KIND_MEANS)
    dialers = gloo_dialers(j, incoming, addresses)
    if not addresses:
        who = ""
    elif dialers:
        who = (f"; plain gloo breaks on its pairs with rank(s) {', '.join(map(str, dialers))} "
               "(the higher address dials the lower), NCCL on every pair that dials it")
    else:
        who = ("; plain gloo still connects (every peer has a lower address, so this rank "
               "dials them), but NCCL, torch.distributed.rpc and this check dial it and fail")
    return f" ({means}{who})" if means or who else ""


def _unreachable_receivers(n: int, into: Edges, seen: Receivers,
                           explained: set[tuple[int, int]]) -> list[Cause]:
    """Destinations nobody can reach: a receiving-side firewall (adds to ``explained``),
    or, where its firewall was read and drops nothing, something else on the way. One
    cause per host and kind: the 8 ranks of a node behind one firewall are one finding."""
    groups: dict[tuple[str, str | None, tuple[str, ...]], list[int]] = {}
    for j in sorted(into):
        incoming = into[j]
        if not (incoming and all(s not in (OK, SELF) for _, s in incoming) and n > 2):
            continue
        explained.update((i, j) for i, _ in incoming)
        verdict = seen.firewalls[j] if j < len(seen.firewalls) else None
        key = (seen.labels[j], verdict, tuple(sorted({s for _, s in incoming})))
        groups.setdefault(key, []).append(j)
    causes = []
    for (_label, verdict, kinds), js in groups.items():
        backends = _backends(js[0], sorted({i for j in js for i, _ in into[j]}), kinds,
                             seen.addresses)
        if verdict in ("none", "accepts"):
            causes.append(_not_its_firewall(js, kinds, verdict, seen, backends))
        else:
            causes.append(_blocked(js, kinds, verdict, seen, backends))
    return causes


def _receivers(js: Sequence[int], seen: Receivers) -> tuple[str, str, str]:
    """``rank 5``, ``its``, ``ephemeral port 40001`` or ``ranks 8-15``, ``their``,
    ``ephemeral ports 40001, 40002`` (pure)."""
    from ddpnet.output import rank_ranges

    ports = ", ".join(str(seen.ports[j]) for j in js)
    if len(js) == 1:
        return f"rank {js[0]}", "its", f"ephemeral port {ports}"
    return f"ranks {rank_ranges(js)}", "their", f"ephemeral ports {ports}"


def _blocked(js: Sequence[int], kinds: Sequence[str], verdict: str | None, seen: Receivers,
             backends: str) -> Cause:
    label, subnet = seen.labels[js[0]], seen.subnet
    who, whose, ports = _receivers(js, seen)
    read = (f"its doctor's {EPHEMERAL_CHECK} found a rule that drops or rejects them"
            if verdict == "drops" else "its firewall could not be read")
    return Cause(
        id="peer-port-blocked",
        stage="reachability",
        hosts=(label,),
        ranks=tuple(js),
        detail=f"no rank can connect to {who} on {label} at {whose} {ports} "
               f"({'/'.join(kinds)}), although it reached the master port "
               f"{seen.master_port}: its firewall allows only fixed ports, but gloo/NCCL "
               f"listen on ephemeral ones{backends}",
        fix=f"on {label}: allow TCP from the cluster subnet, e.g. "
            f"firewall-cmd --permanent --zone=trusted --add-source={subnet} && "
            f"firewall-cmd --reload, or nft insert rule inet filter input ip saddr "
            f"{subnet} accept",
        evidence=(f"every connect into {who}'s {ports}: {'/'.join(kinds)}",
                  f"on {label}: {read}"),
        ruled_out=("a missing route or reverse-path filter: the kernels' answers (ip route "
                   "get) explain none of these pairs",),
        confidence="high" if verdict == "drops" else "medium",
        see_for_yourself=f"on {label}: ddpnet doctor (firewall.ephemeral); nft list ruleset",
    )


def _not_its_firewall(js: Sequence[int], kinds: Sequence[str], verdict: str,
                      seen: Receivers, backends: str) -> Cause:
    label = seen.labels[js[0]]
    who, whose, ports = _receivers(js, seen)
    read = ("no firewall filters input there" if verdict == "none"
            else f"its firewall accepts them ({EPHEMERAL_CHECK} passed)")
    return Cause(
        id="peer-unreachable",
        stage="reachability",
        hosts=(label,),
        ranks=tuple(js),
        detail=f"no rank can connect to {who} on {label} at {whose} {ports} "
               f"({'/'.join(kinds)}), although it reached the master port "
               f"{seen.master_port}, and {read}: not this host's firewall; something on the "
               f"way drops them (a cloud security group, a switch ACL, a host firewall the "
               f"doctor cannot read){backends}",
        fix=f"allow TCP from the cluster subnet {seen.subnet} to all ports of {label} where "
            "the traffic is filtered outside the host (the cloud's security group or network "
            "ACL, the switch's ACL); on the other nodes, `nc -vz <its address> <port>` tells "
            "when it is open",
        evidence=(f"every connect into {who}'s {ports}: {'/'.join(kinds)}",
                  f"on {label}: {read}",
                  "the kernels' answers (ip route get) explain none of these pairs"),
        ruled_out=(f"a firewall on {label}: {read}",
                   f"a missing route or reverse-path filter on {label}: its kernel's "
                   "answers (ip route get) explain none of these pairs"),
        confidence="medium",
        see_for_yourself=f"on {label}: ddpnet doctor (firewall.*); tcpdump -ni any tcp port "
                         f"{seen.ports[js[0]]} while another node connects",
    )


def _isolated_senders(out: Edges, labels: Sequence[str],
                      explained: set[tuple[int, int]]) -> list[Cause]:
    """Sources that reach nobody: egress filter or routing on that rank."""
    causes = []
    for i in sorted(out):
        outgoing = [(j, s) for j, s in out[i] if (i, j) not in explained]
        if not (len(outgoing) >= 2 and all(s not in (OK, SELF) for _, s in outgoing)):
            continue
        kinds = sorted({s for _, s in outgoing})
        explained.update((i, j) for j, _ in outgoing)
        causes.append(Cause(
            id="peer-port-blocked",
            stage="reachability",
            hosts=(labels[i],),
            ranks=(i,),
            detail=f"rank {i} on {labels[i]} cannot connect to any peer "
                   f"({'/'.join(kinds)}): outgoing traffic or routes are blocked there",
            fix=f"on {labels[i]}: check `ip route` toward the cluster subnet and the "
                "firewall's output chain (nft list ruleset)",
            evidence=tuple(f"rank {i} -> rank {j}: {s}" for j, s in outgoing),
            ruled_out=("a receiving side's firewall: the same peers are reached by other "
                       "ranks",),
            confidence="medium",
            see_for_yourself=f"on {labels[i]}: ip route; nft list chain inet filter output",
        ))
    return causes


def _broken_pairs(rest: Sequence[tuple[int, int, str]], labels: Sequence[str],
                  subnet: str) -> Cause:
    ranks = sorted({i for i, _, _ in rest} | {j for _, j, _ in rest})
    return Cause(
        id="peer-port-blocked",
        stage="reachability",
        hosts=tuple(labels[r] for r in ranks),
        ranks=tuple(ranks),
        detail="connections fail between: "
               + ", ".join(f"{i}->{j} {s}" for i, j, s in rest[:20])
               + (f" (+{len(rest) - 20} more)" if len(rest) > 20 else ""),
        fix="allow TCP between all cluster nodes on all ports (gloo/NCCL use ephemeral "
            f"ports), e.g. firewall-cmd --zone=trusted --add-source={subnet}",
        evidence=tuple(f"rank {i} -> rank {j}: {s}" for i, j, s in rest),
        ruled_out=("one node's firewall, routes or kernel path: no single rank explains "
                   "these pairs",),
        confidence="low",
        see_for_yourself="nc -vz <peer address> <its port> from each named pair's first node",
    )


def unmapped(address: str) -> str:
    """``::ffff:198.18.0.1`` -> ``198.18.0.1`` (an IPv4 peer on a dual-stack socket)."""
    return address[7:] if address.lower().startswith("::ffff:") and "." in address else address


class Listener:
    """The rank's listening socket (ephemeral port on its selected address). It answers probes
    and receives bandwidth streams, recording bytes and seconds per (round, peer); beside it,
    the UDP echo that answers path-MTU probes (``check.pmtu``)."""

    def __init__(self, address: str) -> None:
        import threading

        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((address, 0))
        self.sock.listen(512)
        self.port: int = self.sock.getsockname()[1]
        self.received: dict[tuple[int, int], tuple[int, float]] = {}
        from ddpnet.check.pmtu import Echo

        self.echo = Echo(address)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="ddpnet-check-listener",
                                        daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        import threading

        # blocks in accept (no polling: N ranks' listeners sharing a host's cores would wake
        # 5 N times a second); close() shuts the socket down, which wakes it
        while not self._stop.is_set():
            try:
                conn, peer = self.sock.accept()
            except OSError:
                return
            if self._stop.is_set():
                conn.close()
                return
            threading.Thread(target=self._handle, args=(conn, str(peer[0])),
                             daemon=True).start()

    def _handle(self, conn: socket.socket, source: str = "") -> None:
        from ddpnet.check.tournament import HEADER, MAGIC, parse_header

        try:
            conn.settimeout(30)
            head = b""
            while len(head) < HEADER:
                chunk = conn.recv(HEADER - len(head))
                if not chunk:
                    return None  # a bare probe: connect, close
                head += chunk
                if parse_hello(head) is not None:  # a probe: tell it where it came from
                    return conn.sendall(seen_reply(unmapped(source)))
            if not head.startswith(MAGIC):
                return
            rnd, peer = parse_header(head)
            total = 0
            start = time.perf_counter()
            buf = bytearray(1 << 20)
            view = memoryview(buf)
            while True:
                got = conn.recv_into(view)
                if not got:
                    break
                total += got
            elapsed = time.perf_counter() - start
            with self._lock:
                self.received[(rnd, peer)] = (total, elapsed)
        except (OSError, ValueError):
            return
        finally:
            conn.close()

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept (Linux)
        self.sock.close()
        self.echo.close()
        self._thread.join(timeout=1)

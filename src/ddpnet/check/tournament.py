"""Stage 5: the bandwidth matrix as a round-robin tournament (circle method).

N ranks (padded to even) play N-1 rounds; in each round every rank is paired with exactly one
other and the pair streams data both ways at once, so all links of a round run in parallel and
the matrix costs (N-1) x round time: it grows with N, not N^2. Each receiver measures its
incoming rate, giving ``gbps[src][dst]``.
"""

from __future__ import annotations

import ipaddress
import socket
import statistics
import struct
import time
from collections.abc import Mapping, Sequence

from ddpnet.check.causes import Cause

MAGIC = b"DDPNETBW"
HEADER = len(MAGIC) + 16
#: links below this fraction of the median are named
SLOW_FRACTION = 0.7
#: a node whose every link (one way) runs below this fraction of the links between the
#: others is slow even when its links are the majority (stricter: fewer links compared)
NODE_FRACTION = 0.5
#: a sampled mesh's ring names a node whose link out and link in both run below this fraction
#: of the median ring link: one short stream each, so only a node an order of magnitude
#: slower (a NIC at 1 Gb/s among 10-100 Gb/s ones, a shaped port); 0.5 and 0.25 named
#: streams that a busy host starved (256-1,024 simulated ranks on 2 cores)
RING_FRACTION = 0.1


def make_header(rnd: int, sender: int) -> bytes:
    return MAGIC + struct.pack("!qq", rnd, sender)


def parse_header(head: bytes) -> tuple[int, int]:
    if len(head) != HEADER or not head.startswith(MAGIC):
        raise ValueError("not a bandwidth stream")
    rnd, sender = struct.unpack("!qq", head[len(MAGIC):])
    return int(rnd), int(sender)


def schedule(n: int) -> list[list[tuple[int, int]]]:
    """Rounds of disjoint pairs covering every unordered pair once (pure). Odd ``n`` gets a
    bye each round."""
    players: list[int | None] = list(range(n))
    if n % 2:
        players.append(None)
    m = len(players)
    rounds: list[list[tuple[int, int]]] = []
    for _ in range(m - 1):
        pairs = []
        for k in range(m // 2):
            a, b = players[k], players[m - 1 - k]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        rounds.append(sorted(pairs))
        players = [players[0], players[-1], *players[1:-1]]
    return rounds


def rounds_line(world: int, seconds: float) -> str:
    """The bandwidth stage's progress line: ``bandwidth: 1 round x 2 s`` for 2 ranks."""
    n = world - 1 + world % 2
    return f"bandwidth: {n} round{'' if n == 1 else 's'} x {seconds:g} s"


def partner(rounds: Sequence[Sequence[tuple[int, int]]], rnd: int, me: int) -> int | None:
    for a, b in rounds[rnd]:
        if a == me:
            return b
        if b == me:
            return a
    return None


def send_stream(address: str, port: int, rnd: int, me: int, *, seconds: float,
                timeout: float, drain: bool = False, chunk: int = 1 << 20,
                source: str | None = None, most: int | None = None) -> tuple[int, float]:
    """Stream for ``seconds`` to a peer's listener (edge), from ``source`` when given, and
    stop early after ``most`` bytes when given (a screening stream: a fast link need not
    burn both hosts' CPU for the whole time to show it is not slow): bytes sent and, with
    ``drain``, the seconds until the listener read the last byte and closed (the rate as the
    sender sees it, whole: what sat in socket buffers at the end is counted when it
    arrived)."""
    payload = b"\0" * chunk
    sent = 0
    with socket.create_connection((address, port), timeout=timeout,
                                  source_address=(source, 0) if source else None) as sock:
        sock.settimeout(timeout)
        # timed from before the header: the listener starts its clock once it has read the
        # header, so a sender descheduled right after sending it can never time less
        start = time.perf_counter()
        sock.sendall(make_header(rnd, me))
        end = start + seconds
        while time.perf_counter() < end and (most is None or sent < most):
            sock.sendall(payload)
            sent += len(payload)
        sock.shutdown(socket.SHUT_WR)
        if drain:
            while sock.recv(4096):
                pass  # the listener closes once it has read everything
    return sent, time.perf_counter() - start


def ring_slow_nodes(links: Mapping[tuple[int, int], float], labels: Sequence[str]
                    ) -> list[Cause]:
    """``slow-node`` for each node whose ring link out and ring link in both run below
    RING_FRACTION of the median ring link (pure, O(links)): a sampled mesh streams once from
    each host to the next, so every host is measured twice, by two different peers. One
    slow link alone is not named (one measurement: a busy peer looks the same)."""
    if len(links) < 3:
        return []
    median = statistics.median(links.values())
    limit = RING_FRACTION * median
    out: dict[int, tuple[int, float]] = {}
    into: dict[int, tuple[int, float]] = {}
    for (i, j), v in links.items():
        out[i], into[j] = (j, v), (i, v)
    causes = []
    for r in sorted(set(out) & set(into)):
        (to, v_out), (frm, v_in) = out[r], into[r]
        if v_out < limit and v_in < limit:
            causes.append(Cause(
                id="slow-node", stage="reachability", severity="warn",
                hosts=(labels[r],), ranks=(r,),
                detail=f"rank {r} on {labels[r]} is slow sending and receiving: "
                       f"{v_out:.3f} Gb/s to rank {to} and {v_in:.3f} Gb/s from rank {frm}, "
                       f"while the median ring link runs at {median:.3f} Gb/s (limit "
                       f"{RING_FRACTION:g} x the median; a sampled mesh streams each host "
                       "to the next for a moment: --matrix measures every pair)",
                fix=f"on {labels[r]}: check the link speed and shaping (ethtool <iface>, "
                    "tc qdisc show dev <iface>), the NIC's negotiated rate and its "
                    "cable/port",
                data={"median_gbps": median},
                evidence=(f"{r}->{to} {v_out:.3f} Gb/s", f"{frm}->{r} {v_in:.3f} Gb/s",
                          f"median of {len(links)} ring links {median:.3f} Gb/s"),
                ruled_out=("a busy peer: both of its links are slow, each measured with "
                           "another peer",),
                confidence="medium",
                see_for_yourself=f"iperf3 -s  # on {labels[r]}; iperf3 -c <its address> "
                                 "on a peer",
            ))
    return causes


Gbps = Sequence[Sequence[float | None]]


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def same_host(a: str, b: str) -> bool:
    """Two ranks' advertised addresses are one host: equal, or either is loopback (their
    stream never leaves the kernel, so it measures CPUs and memory, not a NIC or a cable)."""
    return a == b or _loopback(a) or _loopback(b)


def cross_nic(gbps: Gbps, addresses: Sequence[str]) -> tuple[list[list[float | None]], int]:
    """The matrix with same-host links blanked (pure): only links that cross a NIC are
    judged for slow links and nodes. Returns it and how many measured links were blanked."""
    n = len(gbps)
    out: list[list[float | None]] = [list(row) for row in gbps]
    blanked = 0
    for i in range(n):
        for j in range(n):
            if i != j and out[i][j] is not None and same_host(addresses[i], addresses[j]):
                out[i][j] = None
                blanked += 1
    return out, blanked


def analyze(gbps: Gbps, labels: Sequence[str]) -> list[Cause]:
    """Name links and nodes below ``SLOW_FRACTION`` of the median link (pure)."""
    n = len(gbps)
    links = [(i, j, gbps[i][j]) for i in range(n) for j in range(n)
             if i != j and gbps[i][j] is not None]
    values = [float(v) for _, _, v in links if v is not None]
    if len(values) < 2:
        return []
    median = statistics.median(values)
    limit = SLOW_FRACTION * median
    slow = {(i, j) for i, j, v in links if v is not None and float(v) < limit}
    if not slow and n < 3:
        return []
    explained: set[tuple[int, int]] = set()
    causes: list[Cause] = []
    if n >= 3:
        for r in range(n):
            cause = _slow_node(r, gbps, labels, slow, median, explained)
            if cause is not None:
                causes.append(cause)
    rest = sorted(slow - explained)
    if rest:
        causes.append(_slow_links(rest, gbps, labels, median))
    return causes


def _slow_node(r: int, gbps: Gbps, labels: Sequence[str], slow: set[tuple[int, int]],
               median: float, explained: set[tuple[int, int]]) -> Cause | None:
    """Rank ``r`` when all its outgoing or all its incoming links are slow (adds them to
    ``explained``)."""
    n = len(gbps)
    out_links = [(r, j) for j in range(n) if j != r and gbps[r][j] is not None]
    in_links = [(i, r) for i in range(n) if i != r and gbps[i][r] is not None]
    others = [float(v) for i in range(n) for j in range(n)
              if i != j and r not in (i, j) and (v := gbps[i][j]) is not None]
    ref = statistics.median(others) if others else median
    # against the links without r too: on 3 nodes a slow node's links are 4 of 6, so they
    # are the median themselves and nothing is below a fraction of it
    slow = slow | {(i, j) for i, j in out_links + in_links
                   if others and float(gbps[i][j] or 0) < NODE_FRACTION * ref}
    out_slow = bool(out_links) and all(p in slow for p in out_links)
    in_slow = bool(in_links) and all(p in slow for p in in_links)
    if not (out_slow or in_slow):
        return None
    mine = [p for p in (out_links + in_links) if p in slow]
    rates = [float(gbps[i][j] or 0) for i, j in mine]
    explained.update(mine)
    way = "sending and receiving" if out_slow and in_slow else (
        "sending" if out_slow else "receiving")
    return Cause(
        id="slow-node",
        stage="bandwidth",
        severity="fail",
        hosts=(labels[r],),
        ranks=(r,),
        detail=f"rank {r} on {labels[r]} is slow {way}: {min(rates):.2f}-"
               f"{max(rates):.2f} Gb/s while the other links run at {ref:.2f} Gb/s "
               f"(median; limit {SLOW_FRACTION:g} x the median of all links, or "
               f"{NODE_FRACTION:g} x the links between the others)",
        fix=f"on {labels[r]}: check the link speed and shaping (ethtool <iface>, "
            "tc qdisc show dev <iface>), the NIC's negotiated rate and its cable/port",
        data={"median_gbps": median},
        evidence=(*(f"{i}->{j} {float(gbps[i][j] or 0):.2f} Gb/s" for i, j in mine),
                  f"median of all links {median:.2f} Gb/s, of the others' {ref:.2f} Gb/s"),
        ruled_out=(f"one slow link: every link {way} through rank {r} is slow, the others "
                   "are not",),
        see_for_yourself=f"iperf3 -s  # on {labels[r]}; iperf3 -c <its address> on a peer",
    )


def _slow_links(rest: Sequence[tuple[int, int]], gbps: Gbps, labels: Sequence[str],
                median: float) -> Cause:
    ranks = sorted({i for i, _ in rest} | {j for _, j in rest})
    return Cause(
        id="slow-link",
        stage="bandwidth",
        severity="fail",
        hosts=tuple(dict.fromkeys(labels[r] for r in ranks)),
        ranks=tuple(ranks),
        detail="links below "
               f"{SLOW_FRACTION:g} x median ({median:.2f} Gb/s): "
               + ", ".join(f"{i}->{j} {float(gbps[i][j] or 0):.2f} Gb/s"
                           for i, j in rest[:20]),
        fix="check the switch ports and cables between these hosts (ethtool -S, "
            "ip -s link), and any tc shaping on them",
        data={"median_gbps": median},
        evidence=(*(f"{i}->{j} {float(gbps[i][j] or 0):.2f} Gb/s" for i, j in rest[:20]),
                  f"median of all links {median:.2f} Gb/s"),
        ruled_out=("a slow node: these hosts' other links run at the median",),
        see_for_yourself="iperf3 -c <peer address>  # between the named hosts, both ways",
    )

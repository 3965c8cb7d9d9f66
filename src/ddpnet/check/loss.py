"""Packet loss on one node: a few percent of what it sends or receives vanishes (a failing
NIC, cable or switch port, a duplex mismatch, a ``tc netem loss`` left from a test).
Connections still open and an all_reduce still sums right, so nothing else names it; but
gloo and NCCL's socket transport run over TCP, where every lost segment is a retransmission,
and the last segment of a message lost costs a retransmission timeout: collectives stall.

Every rank sends :data:`COUNT` small numbered datagrams to each peer's UDP echo (the
path-MTU echo, ``check.pmtu.Echo``) beside the mesh and counts the echoes (a round trip:
both directions). Rank 0 names the node whose every path loses while the paths between the
others do not (:func:`analyze`, pure), with the loss measured.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ddpnet.check.causes import Cause
from ddpnet.check.pmtu import MAGIC, echoes
from ddpnet.net.sockopt import set_rcvbuf

#: datagrams per peer, how long to wait for the next echo, and for all of them at most
COUNT, WAIT_S, CAP_S = 200, 0.5, 2.0
#: a node whose paths lose at least this fraction is named; from FAIL on it is a failure
NAMED, FAIL = 0.01, 0.02
#: the paths not through the node must lose less than this share of the node's loss
ELSEWHERE = 1 / 3
TAG = MAGIC + b"LOSS"

Target = tuple[str, int, int]


def probe_peer(address: str, port: int, count: int = COUNT, wait: float = WAIT_S,
               cap: float = CAP_S) -> tuple[int, int, bool]:
    """(sent, echoed, late) for ``count`` numbered datagrams to ``address:port`` (edge,
    bounded: at most ``cap`` after the last send).

    After the burst a marker (number ``count``, again every ``wait`` without an answer)
    follows: the echo answers in order, so once the marker's echo is back every echo that
    was coming has come, and what is missing was lost, however long a busy peer paused.
    ``late``: ``cap`` ran out first (a peer too busy to answer in time): not known lost."""
    echoed: set[int] = set()
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        # every echo may arrive before this thread reads one (a busy host): a small
        # datagram holds 0.8-2 KiB of buffer, so the default 208 KiB keeps 100-250
        set_rcvbuf(sock, count * 4096)
        sock.connect((address, port))
        for seq in range(count):
            _send(sock, seq)
            if seq % 50 == 49:
                time.sleep(0.001)  # paced: a burst must not overflow the echo's buffer
        end = time.monotonic() + cap
        marked = False
        while len(echoed) < count and not marked:
            _send(sock, count)  # the marker (resent: it may be lost too)
            marked = _collect(sock, echoed, count, min(end, time.monotonic() + wait))
            if time.monotonic() >= end:
                break
        if marked and len(echoed) < count:  # a reordered echo behind the marker: a moment
            _collect(sock, echoed, count, time.monotonic() + 0.05)
    return count, len(echoed), len(echoed) < count and not marked


def _send(sock: socket.socket, seq: int) -> None:
    with contextlib.suppress(OSError):
        sock.send(TAG + b"%06d" % seq)


def _collect(sock: socket.socket, echoed: set[int], count: int, until: float) -> bool:
    """Echoes into ``echoed`` until ``until``, every one, or the marker; whether the marker
    came back."""
    if len(echoed) >= count:
        return False
    for seq in echoes(sock, TAG, until):
        if seq >= count:
            return True
        echoed.add(seq)
        if len(echoed) >= count:
            return False
    return False


#: each rank probes this many ring neighbours (me+1, me+2, ...): O(1) per rank at any scale,
#: and every node is on 2 x NEIGHBOURS probed paths
NEIGHBOURS = 8


def neighbours(me: int, world: int, count: int = NEIGHBOURS) -> list[int]:
    """The ranks ``me`` probes for loss (pure)."""
    return [(me + d) % world for d in range(1, min(count, world - 1) + 1)]


def probe_row(me: int, targets: Sequence[Target | None], *, fanout: int = 32,
              chosen: Sequence[int] | None = None) -> dict[str, list[int]]:
    """This rank's row: peer rank -> [sent, echoed] for its ring neighbours, or the ranks
    ``chosen`` (a sampled mesh's host ring) (edge, ``fanout`` peers at a time)."""
    ranks = neighbours(me, len(targets)) if chosen is None else chosen
    jobs = [(j, t) for j in ranks if (t := targets[j]) is not None]
    if not jobs:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(fanout, len(jobs)))) as pool:
        got = pool.map(lambda job: (job[0], probe_peer(job[1][0], job[1][1])), jobs)
        # [sent, echoed], and a third item 1 when the count was cut short: not judged
        return {str(j): [sent, echoed, *([1] if late else [])]
                for j, (sent, echoed, late) in got}


def _pairs(rows: Mapping[int, Mapping[str, Any]]) -> dict[tuple[int, int], tuple[int, int]]:
    out = {}
    for i, row in rows.items():
        for j, value in (row.items() if isinstance(row, Mapping) else ()):
            # [sent, echoed]; a third item (echoes still coming when the probe stopped)
            # is not judged
            if str(j).isdigit() and isinstance(value, list) and len(value) == 2 \
                    and all(isinstance(v, int) and v >= 0 for v in value) and value[0]:
                out[(i, int(j))] = (value[0], min(value[1], value[0]))
    return out


def _loss(pairs: Mapping[tuple[int, int], tuple[int, int]]) -> tuple[float, int, int]:
    sent = sum(s for s, _ in pairs.values())
    lost = sum(s - e for s, e in pairs.values())
    return (lost / sent if sent else 0.0), lost, sent


def _by_rank(pairs: Mapping[tuple[int, int], tuple[int, int]]
             ) -> dict[int, list[tuple[int, int]]]:
    out: dict[int, list[tuple[int, int]]] = {}
    for p in pairs:
        for r in p:
            out.setdefault(r, []).append(p)
    return out


def _greedy(pairs: Mapping[tuple[int, int], tuple[int, int]]
            ) -> list[tuple[int, float, int, int]]:
    """The nodes named, worst first: a node's paths (those not through a node already named)
    lose at least NAMED while the paths through neither lose under ELSEWHERE of that (pure;
    O(pairs): each rank's paths are read from an index, the rest is a running total)."""
    touching = _by_rank(pairs)
    order = sorted(touching, key=lambda r: (-_loss({p: pairs[p] for p in touching[r]})[0], r))
    gone: set[tuple[int, int]] = set()
    left_sent = sum(s for s, _ in pairs.values())
    left_lost = sum(s - e for s, e in pairs.values())
    named: list[tuple[int, float, int, int]] = []
    for k in order:
        mine = [pairs[p] for p in touching[k] if p not in gone]
        sent, lost = sum(s for s, _ in mine), sum(s - e for s, e in mine)
        if not sent:
            continue
        rest_sent, rest_lost = left_sent - sent, left_lost - lost
        if lost / sent >= NAMED and (rest_sent == 0 or rest_lost / rest_sent
                                     < lost / sent * ELSEWHERE):
            named.append((k, lost / sent, lost, sent))
            gone.update(touching[k])
            left_sent, left_lost = rest_sent, rest_lost
    return named


def analyze(rows: Mapping[int, Mapping[str, Any]], labels: Sequence[str]) -> list[Cause]:
    """``packet-loss`` for the nodes every path through which loses while the others' paths
    do not (pure). A pair where nothing came back (filtered UDP) is not judged."""
    pairs = {p: v for p, v in _pairs(rows).items() if v[1] > 0}
    named = _greedy(pairs)
    if not named:
        return []
    worst = max(loss for _, loss, _, _ in named)
    rest = _loss({p: v for p, v in pairs.items() if not any(n in p for n, *_ in named)})
    return [Cause(
        id="packet-loss", stage="reachability",
        severity="fail" if worst >= FAIL else "warn",
        hosts=tuple(labels[k] for k, *_ in named), ranks=tuple(k for k, *_ in named),
        detail="; ".join(f"{loss:.1%} of the probes on every path through rank {k} on "
                         f"{labels[k]} were lost ({lost} of {sent} round trips)"
                         for k, loss, lost, sent in named)
        + f", while the paths between the other ranks lose {rest[0]:.1%}: gloo and NCCL's "
          "socket transport run over TCP, where each lost segment is resent, and a lost "
          "last segment of a message waits out a retransmission timeout (200 ms at least): "
          "collectives stall" + (" (at this rate, often enough to slow training)"
                                 if worst >= FAIL else ""),
        fix="; ".join(f"on {labels[k]}: look for the drops: ip -s link show, ethtool -S "
                      "<iface> (errors, crc, drops), the cable and switch port, a duplex "
                      "mismatch (ethtool <iface>), or a test's qdisc left behind (tc qdisc "
                      "show)" for k, *_ in named),
        evidence=(*(f"{loss:.1%} lost on the paths through rank {k} ({lost} of {sent} UDP "
                    "round trips to and from its peers)" for k, loss, lost, sent in named),
                  f"{rest[0]:.1%} lost on the paths between the other ranks ({rest[1]} of "
                  f"{rest[2]})"),
        ruled_out=("a slow or busy peer: the loss follows this node on every path",),
        confidence="medium" if worst < FAIL else "high",
        see_for_yourself="; ".join(f"from another node: ping -c 500 -i 0.002 <address of "
                                   f"{labels[k]}> (as root), and watch the loss"
                                   for k, *_ in named),
        data={"loss": {str(k): round(loss, 4) for k, loss, _, _ in named}},
    )]

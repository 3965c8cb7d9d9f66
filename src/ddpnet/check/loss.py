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
from ddpnet.check.pmtu import MAGIC

#: datagrams per peer, how long to wait for the next echo, and for all of them at most
COUNT, WAIT_S, CAP_S = 200, 0.5, 2.0
#: a node whose paths lose at least this fraction is named; from FAIL on it is a failure
NAMED, FAIL = 0.01, 0.02
#: the paths not through the node must lose less than this share of the node's loss
ELSEWHERE = 1 / 3
TAG = MAGIC + b"LOSS"

Target = tuple[str, int, int]


def probe_peer(address: str, port: int, count: int = COUNT, wait: float = WAIT_S
               ) -> tuple[int, int]:
    """(sent, echoed) for ``count`` numbered datagrams to ``address:port`` (edge, bounded:
    returns as soon as every echo came, else ``wait`` seconds after the last send)."""
    echoed: set[int] = set()
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.connect((address, port))
        for seq in range(count):
            with contextlib.suppress(OSError):
                sock.send(TAG + b"%06d" % seq)
            if seq % 50 == 49:
                time.sleep(0.001)  # paced: a burst must not overflow the echo's buffer
        # ``wait`` after the last echo, at most CAP_S in all: a peer whose cores are busy
        # answers late, in a batch; late is not lost
        cap = time.monotonic() + CAP_S
        deadline = min(cap, time.monotonic() + wait)
        while len(echoed) < count and (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            try:
                data = sock.recv(64)
            except (TimeoutError, OSError):
                break
            if data.startswith(TAG) and data[len(TAG):len(TAG) + 6].isdigit():
                echoed.add(int(data[len(TAG):len(TAG) + 6]))
                deadline = min(cap, time.monotonic() + wait)
    return count, len(echoed)


#: each rank probes this many ring neighbours (me+1, me+2, ...): O(1) per rank at any scale,
#: and every node is on 2 x NEIGHBOURS probed paths
NEIGHBOURS = 8


def neighbours(me: int, world: int, count: int = NEIGHBOURS) -> list[int]:
    """The ranks ``me`` probes for loss (pure)."""
    return [(me + d) % world for d in range(1, min(count, world - 1) + 1)]


def probe_row(me: int, targets: Sequence[Target | None], *, fanout: int = 32
              ) -> dict[str, list[int]]:
    """This rank's row: peer rank -> [sent, echoed] for its ring neighbours (edge,
    ``fanout`` peers at a time)."""
    jobs = [(j, t) for j in neighbours(me, len(targets)) if (t := targets[j]) is not None]
    if not jobs:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(fanout, len(jobs)))) as pool:
        got = pool.map(lambda job: (job[0], probe_peer(job[1][0], job[1][1])), jobs)
        return {str(j): [sent, echoed] for j, (sent, echoed) in got}


def _pairs(rows: Mapping[int, Mapping[str, Any]]) -> dict[tuple[int, int], tuple[int, int]]:
    out = {}
    for i, row in rows.items():
        for j, value in (row.items() if isinstance(row, Mapping) else ()):
            if str(j).isdigit() and isinstance(value, list) and len(value) == 2 \
                    and all(isinstance(v, int) and v >= 0 for v in value) and value[0]:
                out[(i, int(j))] = (value[0], min(value[1], value[0]))
    return out


def _loss(pairs: Mapping[tuple[int, int], tuple[int, int]]) -> tuple[float, int, int]:
    sent = sum(s for s, _ in pairs.values())
    lost = sum(s - e for s, e in pairs.values())
    return (lost / sent if sent else 0.0), lost, sent


def analyze(rows: Mapping[int, Mapping[str, Any]], labels: Sequence[str]) -> list[Cause]:
    """``packet-loss`` for the nodes every path through which loses while the others' paths
    do not (pure). A pair where nothing came back (filtered UDP) is not judged."""
    pairs = {p: v for p, v in _pairs(rows).items() if v[1] > 0}
    ranks = sorted({r for p in pairs for r in p})
    named: list[tuple[int, float, int, int]] = []
    for k in sorted(ranks, key=lambda r: -_loss({p: v for p, v in pairs.items()
                                                if r in p})[0]):
        left = {p: v for p, v in pairs.items() if not any(n in p for n, *_ in named)}
        mine = _loss({p: v for p, v in left.items() if k in p})
        rest = _loss({p: v for p, v in left.items() if k not in p})
        if mine[0] >= NAMED and (rest[2] == 0 or rest[0] < mine[0] * ELSEWHERE):
            named.append((k, *mine))
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

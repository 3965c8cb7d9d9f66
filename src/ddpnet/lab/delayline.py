"""A userspace delay line for kernels without ``sch_netem`` (netem is used when present).

Runs inside a node (``python -m ddpnet.lab.delayline --queue 0 --ms 20``): an iptables rule
sends every packet arriving on the node's lab interface to NFQUEUE ``--queue``; this process
holds each packet's verdict for ``--ms`` milliseconds, then accepts it.

Why arriving, not leaving: a packet held on its way out still belongs to the sending socket,
and TCP Small Queues then throttles the sender to a trickle (a few Mb/s at 20 ms); arriving
packets are already orphaned, so TCP runs at full rate with the added latency. One catch:
``ping`` reports kernel receive timestamps, taken before the hold; use ``ping -U`` (user-to-
user latency) or any TCP measurement to see the delay. With ``--jitter-ms`` each batch of
packets read gets the delay plus a uniform draw within ± the jitter, but never leaves before
the packets ahead of it (:func:`due_at`): verdicts go out in arrival order, as TCP sees netem's
jitter behind a rate (no reordering), and one ``VERDICT_BATCH`` accepts all packets due.
The rule uses ``--queue-bypass`` and the queue ``FAIL_OPEN``: if this process is gone or
behind, packets pass undelayed rather than being dropped.

Speaks the nfnetlink_queue protocol directly (no libnetfilter_queue needed). Throughput is
limited to what one Python process verdicts (tens of thousands of packets per second, in
batches), plenty for latency experiments; use a kernel with sch_netem for delay at line rate.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import random
import select
import signal
import socket
import struct
import sys
import time
from types import FrameType

from ddpnet.net import netlink

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = 0
NFQNL_MSG_CONFIG = 2
NFQNL_MSG_VERDICT_BATCH = 3
NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_CFG_QUEUE_MAXLEN = 3
NFQA_CFG_MASK = 4
NFQA_CFG_FLAGS = 5
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NFQA_CFG_F_FAIL_OPEN = 1
NFQA_CFG_F_GSO = 4
NF_ACCEPT = 1
NLM_F_ACK = 4
NETLINK_NO_ENOBUFS = 5
SOL_NETLINK = 270


def message(msg_type: int, queue: int, attrs: bytes, seq: int = 0, flags: int = 0) -> bytes:
    """One nfnetlink_queue message: nlmsghdr + nfgenmsg (AF_UNSPEC, v0, queue) + attributes."""
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(queue)) + attrs
    return netlink.message((NFNL_SUBSYS_QUEUE << 8) | msg_type, netlink.NLM_F_REQUEST | flags,
                           seq, body)


def bind_messages(queue: int, maxlen: int = 100000) -> list[bytes]:
    cmd = netlink.attr(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_BIND, 0))
    params = netlink.attr(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META))
    flags = NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO
    tuning = (netlink.attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", maxlen))
              + netlink.attr(NFQA_CFG_FLAGS, struct.pack("!I", flags))
              + netlink.attr(NFQA_CFG_MASK, struct.pack("!I", flags)))
    return [message(NFQNL_MSG_CONFIG, queue, cmd, seq=1, flags=NLM_F_ACK),
            message(NFQNL_MSG_CONFIG, queue, params + tuning, seq=2, flags=NLM_F_ACK)]


def verdict_batch(queue: int, last_id: int) -> bytes:
    """Accept every queued packet with an id up to ``last_id``."""
    return message(NFQNL_MSG_VERDICT_BATCH, queue,
                   netlink.attr(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, last_id)))


def packet_ids(data: bytes) -> tuple[list[int], list[int]]:
    """(packet ids, netlink error codes) in a buffer of netlink messages."""
    ids: list[int] = []
    errors: list[int] = []
    for msg_type, _, body in netlink.messages(data):
        if msg_type == netlink.NLMSG_ERROR:
            code = netlink.error_code(body)
            if code:
                errors.append(code)
        elif msg_type == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
            header = netlink.attrs(body[4:]).get(NFQA_PACKET_HDR)  # past nfgenmsg
            if header is not None and len(header) >= 4:
                ids.append(struct.unpack_from("!I", header)[0])
    return ids, errors


def due_at(now: float, delay_s: float, jitter_s: float, behind: float, draw: float) -> float:
    """When packets read at ``now`` are released (pure): ``delay_s`` varied by ``draw``
    (-1..1) x ``jitter_s``, never below 0 nor before ``behind`` (the last release queued):
    a batch verdict accepts every id up to one, so the order of arrival is the order out."""
    return max(behind, now + max(0.0, delay_s + draw * jitter_s))


def serve(queue: int, delay_s: float, ready: bool = True, jitter_s: float = 0.0) -> None:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    with contextlib.suppress(OSError):
        sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
    sock.bind((0, 0))
    for msg in bind_messages(queue):
        sock.send(msg)
        _, errors = packet_ids(sock.recv(65536))
        if errors:
            raise SystemExit(f"delayline: binding NFQUEUE {queue} failed: "
                             f"{os.strerror(errors[0])}")
    if ready:
        print("ready", flush=True)
    pending: collections.deque[tuple[float, int]] = collections.deque()
    while True:
        wait = None if not pending else max(0.0, pending[0][0] - time.monotonic())
        readable, _, _ = select.select([sock], [], [], wait)
        if readable:
            data = sock.recv(1 << 20)
            behind = pending[-1][0] if pending else 0.0
            due = due_at(time.monotonic(), delay_s, jitter_s, behind, random.uniform(-1, 1))
            ids, _ = packet_ids(data)
            pending.extend((due, i) for i in ids)
        now = time.monotonic()
        last = None
        while pending and pending[0][0] <= now:
            last = pending.popleft()[1]
        if last is not None:
            sock.send(verdict_batch(queue, last))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddpnet.lab.delayline")
    parser.add_argument("--queue", type=int, default=0)
    parser.add_argument("--ms", type=float, required=True)
    parser.add_argument("--jitter-ms", type=float, default=0.0,
                        help="each batch's delay varies by up to this much either way")
    parser.add_argument("--tag", default="", help="a marker for finding this process")
    args = parser.parse_args(argv)

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    serve(args.queue, args.ms / 1000.0, jitter_s=args.jitter_ms / 1000.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())

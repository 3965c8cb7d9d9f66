"""Path MTU: frames as large as both ends' interface MTU must cross every link.

Hosts at MTU 9000 behind a switch port (or a tunnel) at 1500 connect, exchange small
messages, pass a small all_reduce, and then stall on the first big transfer: the large frames
vanish without an error. Every rank answers UDP probes on its selected address
(:class:`Echo`, a 32-byte reply, so only the forward direction carries big frames) and sends
each peer a handful of datagrams with DF set (``IP_MTU_DISCOVER=IP_PMTUDISC_DO``), sized as
whole packets from 1280 bytes up to the smaller of the two interfaces' MTUs (bounded: one
burst, resent twice, :data:`PROBE_TIMEOUT_S` at most). Rank 0 compares the rows
(:func:`analyze`): a pair whose small probes crossed while its full-size ones did not has a
link at a smaller MTU, and the node every broken pair shares is named (its NIC, cable or
switch port). A pair where nothing crossed (UDP filtered) is not judged here.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ddpnet.check.causes import Cause
from ddpnet.net.sockopt import path_mtu, set_dont_fragment, set_rcvbuf

MAGIC = b"DDPNETMTU"
#: whole-packet sizes probed below the pair's MTU (IPv6's minimum MTU, Ethernet, jumbo steps)
CANDIDATES = (1280, 1500, 2000, 4000, 8000, 9000)
#: how long one peer's probes may take when some are lost (healthy: one round trip)
PROBE_TIMEOUT_S = 1.2
_RESENDS = 3
#: a size lost in the burst is resent alone this many times, waiting this long each
CONFIRM_TRIES, CONFIRM_WAIT_S = 3, 0.4
#: the echo's receive buffer: every peer's burst may arrive at once
ECHO_RCVBUF = 4 << 20


def overhead(address: str) -> int:
    """IP + UDP header bytes: a probe of packet size S carries S - overhead bytes."""
    return 48 if ":" in address else 28


def sizes(mtu: int) -> tuple[int, ...]:
    """Packet sizes to probe for a pair whose smaller MTU is ``mtu`` (pure)."""
    return tuple(sorted({c for c in CANDIDATES if c < mtu} | {mtu}))


@dataclass(frozen=True)
class PeerMtu:
    """What crossed from one rank to a peer: the largest echoed packet size (0: none),
    the smallest lost one above it (None: none lost), the MTU probed and the kernel's path
    MTU for the route when it learned a smaller one (ICMP "fragmentation needed")."""

    mtu: int
    ok: int
    lost: int | None = None
    kernel: int | None = None

    @property
    def broken(self) -> bool:
        return self.ok > 0 and self.lost is not None

    def to_dict(self) -> dict[str, Any]:
        return {"mtu": self.mtu, "ok": self.ok, "lost": self.lost, "kernel": self.kernel}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PeerMtu:
        lost, kernel = data.get("lost"), data.get("kernel")
        return cls(int(data.get("mtu") or 0), int(data.get("ok") or 0),
                   None if lost is None else int(lost), None if kernel is None else int(kernel))


class Echo:
    """This rank's UDP responder: answers each probe with its first 32 bytes (edge)."""

    def __init__(self, address: str) -> None:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_DGRAM)
        set_rcvbuf(self.sock, ECHO_RCVBUF)
        self.sock.bind((address, 0))
        self.port: int = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="ddpnet-check-mtu-echo",
                                        daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():  # blocks: close() wakes it (no polling)
            try:
                data, peer = self.sock.recvfrom(65535)
            except OSError:
                return
            if peer is None or self._stop.is_set():  # shut down
                return
            if data.startswith(MAGIC):
                with contextlib.suppress(OSError):
                    self.sock.sendto(data[:32], peer)

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):  # ENOTCONN, but it wakes the recvfrom (Linux)
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(timeout=1)


def _token(size: int) -> bytes:
    return MAGIC + b"%06d" % size


def probe_peer(address: str, port: int, mtu: int, timeout: float = PROBE_TIMEOUT_S) -> PeerMtu:
    """Send DF-set probes of each size to ``address:port`` and wait for their echoes (edge).
    A size lost in the burst is confirmed alone before it counts (a burst from many peers
    can overflow a busy echo's socket buffer; a black hole drops it every time)."""
    v6 = ":" in address
    want = sizes(mtu)
    echoed: set[int] = set()
    with socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM) as sock:
        set_dont_fragment(sock)
        sock.connect((address, port))
        start = time.monotonic()
        for attempt in range(_RESENDS):
            _send(sock, [s for s in want if s not in echoed], address)
            _collect(sock, echoed, start + timeout * (attempt + 1) / _RESENDS, want)
            if echoed >= set(want):
                break
        _confirm(sock, want, echoed, address)
        kernel = path_mtu(sock)
    return _summary(want, echoed, kernel, mtu)


def _send(sock: socket.socket, todo: Sequence[int], address: str) -> None:
    for size in todo:
        with contextlib.suppress(OSError):  # EMSGSIZE: the kernel knows a smaller path MTU
            sock.send(_token(size).ljust(size - overhead(address), b"\0"))


def _confirm(sock: socket.socket, want: Sequence[int], echoed: set[int], address: str) -> None:
    """Resend the smallest size still missing above the largest echoed one, alone, until it
    crosses or :data:`CONFIRM_TRIES` tries are lost (only when something crossed: silence
    is not judged)."""
    while echoed:
        missing = [s for s in want if s not in echoed and s > max(echoed)]
        if not missing:
            return
        for _ in range(CONFIRM_TRIES):
            _send(sock, missing[:1], address)
            _collect(sock, echoed, time.monotonic() + CONFIRM_WAIT_S, missing[:1])
            if missing[0] in echoed:
                break
        else:
            return


def _collect(sock: socket.socket, echoed: set[int], until: float,
             want: Sequence[int]) -> None:
    """Record echoes until every size of ``want`` came back or ``until``."""
    wanted = set(want)
    if echoed >= wanted:
        return
    for size in echoes(sock, MAGIC, until):
        echoed.add(size)
        if echoed >= wanted:
            return


def echoes(sock: socket.socket, tag: bytes, until: float) -> Iterator[int]:
    """The number after ``tag`` in each echo ``sock`` receives until ``until`` (monotonic),
    other datagrams skipped; ends early when the socket errs (refused, closed) (edge: the
    path-MTU probe's sizes and the loss probe's sequence numbers, ``check.loss``)."""
    start, end = len(tag), len(tag) + 6
    while (left := until - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            data = sock.recv(64)
        except OSError:  # a timeout, a refusal (ICMP port unreachable), a closed socket
            return
        if data.startswith(tag) and data[start:end].isdigit():
            yield int(data[start:end])


def _summary(want: Sequence[int], echoed: set[int], kernel: int | None, mtu: int) -> PeerMtu:
    """The largest echoed size and the smallest lost one above it (pure)."""
    ok = max(echoed, default=0)
    lost = min((s for s in want if s not in echoed and s > ok), default=None)
    return PeerMtu(mtu, ok, lost, kernel if kernel is not None and kernel < mtu else None)


Target = tuple[str, int, int]  # address, echo port, MTU


def probe_row(me: int, address: str, own_mtu: int, peers: Sequence[Target | None], *,
              fanout: int = 32) -> dict[str, dict[str, Any]]:
    """This rank to every peer on another address (edge, bounded concurrency): ``{peer:
    PeerMtu.to_dict()}``. Ranks on this rank's own address (one host) are skipped."""
    jobs = [(j, p) for j, p in enumerate(peers)
            if j != me and p is not None and p[0] != address and p[1] and p[2] and own_mtu]

    def one(job: tuple[int, Target]) -> tuple[int, PeerMtu | None]:
        j, (addr, port, mtu) = job
        try:
            return j, probe_peer(addr, port, min(own_mtu, mtu))
        except OSError:  # no route to that address at all: the TCP mesh names it, not MTU
            return j, None

    if not jobs:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(fanout, len(jobs)))) as pool:
        return {str(j): r.to_dict() for j, r in pool.map(one, jobs) if r is not None}


# ----------------------------------------------------------------------------- rank 0, pure

Pairs = dict[tuple[int, int], PeerMtu]


def pairs_of(rows: Mapping[int, Mapping[str, Mapping[str, Any]]]) -> Pairs:
    return {(i, int(j)): PeerMtu.from_dict(r) for i, row in rows.items()
            for j, r in row.items()}


def analyze(rows: Mapping[int, Mapping[str, Mapping[str, Any]]], labels: Mapping[int, str],
            interfaces: Mapping[int, str], stage: str = "reachability") -> list[Cause]:
    """``path-mtu``: name the node every broken pair shares (its link), else every link
    (the switch), else the pairs (pure)."""
    pairs = pairs_of(rows)
    judged = {p: r for p, r in pairs.items() if r.ok > 0}
    broken = {p: r for p, r in judged.items() if r.broken}
    if not broken:
        return []
    nodes = sorted({n for p in judged for n in p})
    culprits = [k for k in nodes
                if all(r.broken for p, r in judged.items() if k in p)]
    covered = all(any(k in p for k in culprits) for p in broken)
    if len(broken) == len(judged) or not covered or len(culprits) == len(nodes):
        where, odd = _everywhere(judged, labels) if len(broken) == len(judged) else \
            "these pairs", sorted({n for p in broken for n in p})
    else:
        odd = culprits
        where = "the link of " + ", ".join(labels.get(k, f"rank {k}") for k in odd) + \
            " (its NIC, cable or switch port): its other pairs are fine"
    return [_cause(broken, odd, where, labels, interfaces, stage)]


def _everywhere(judged: Pairs, labels: Mapping[int, str]) -> str:
    """Every probed pair broken: the switch, unless every pair probed shares one node (only
    the paths to rank 0 were probed), which may be that node's link as well."""
    common = set.intersection(*(set(p) for p in judged))
    if len(common) == 1 and len({n for p in judged for n in p}) > 2:
        hub = labels.get(next(iter(common)), "rank 0")
        return (f"every path to {hub} ({hub}'s link or the switch; the paths between the "
                "others were not probed)")
    return "every link between these nodes (a switch or path at a smaller MTU)"


def describe(r: PeerMtu) -> str:
    if r.kernel is not None:
        return f"path MTU {r.kernel} (the kernel was told by ICMP)"
    return f"probes of {r.ok} bytes crossed, {r.lost} did not"


def _cause(broken: Pairs, odd: Sequence[int], where: str, labels: Mapping[int, str],
           interfaces: Mapping[int, str], stage: str) -> Cause:
    shown = sorted(broken.items())[:12]
    lows = [r.kernel or r.ok for r in broken.values()]
    mtu = max(r.mtu for r in broken.values())
    floor = min(lows)
    lower = "; ".join(f"on {labels.get(k, k)}: ip link set dev {interfaces.get(k, 'IFACE')} "
                      f"mtu {floor}" for k in odd)
    return Cause(
        id="path-mtu",
        stage=stage,
        hosts=tuple(labels.get(k, f"rank {k}") for k in odd),
        ranks=tuple(odd),
        detail=f"frames of the interfaces' MTU ({mtu}) are dropped on {where}: "
               + ", ".join(f"{i}->{j} {describe(r)}" for (i, j), r in shown)
               + (f" (+{len(broken) - len(shown)} more)" if len(broken) > len(shown) else "")
               + "; small messages pass, the first big transfer stalls",
        fix=f"raise the MTU of the switch ports / path between them to {mtu} (jumbo frames "
            f"end to end), or lower the nodes' MTU to what crosses ({floor}): {lower} "
            f"(check with `ping -M do -s {floor - 28} <peer>`)",
        data={"pairs": {f"{i}->{j}": r.to_dict() for (i, j), r in broken.items()}},
        evidence=tuple(f"rank {i} to rank {j}: {describe(r)}" for (i, j), r in shown),
        ruled_out=("a firewall or a dead peer: small probes to the same port crossed",),
        see_for_yourself=f"ping -M do -s {mtu - 28} -c 3 <peer>  # fails where the path "
                         f"drops {mtu}-byte frames",
    )

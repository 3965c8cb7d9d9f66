"""Probe this rank's links to its peers while a collective hangs: per peer a TCP connect to each
published port and a short stream whose unacked bytes tell an MTU drop from a slow path
(docs/watch-causes.md, "network"). Pure planning, edge probing."""

from __future__ import annotations

import contextlib
import fcntl
import select
import socket
import struct
import termios
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ddpnet.net.ports import listen_socket
from ddpnet.net.probe import CONNECTED, RESET, TIMEOUT, Attempt, connect_loop, outcome_of
from ddpnet.net.sockopt import TcpInfo, set_dont_fragment, tcp_info
from ddpnet.watch.activity import WATCH_THREADS
from ddpnet.watch.state import LinkProbe, RankState

#: ``RankState.extra[PORTS_KEY]`` = {purpose: port} a rank publishes for its peers' probes
PORTS_KEY = "ports"
SIDE, BACKEND, SINK = "side", "backend", "sink"
#: LinkProbe.what
CONNECT, STREAM = "connect", "stream"
#: stream outcomes: every byte acked (rate measured) / connected but (almost) nothing acked
STREAMED, STALLED = "streamed", "stalled"
#: each link probe's bound when the hub asks for a round
PROBE_TIMEOUT_S = 2.0
#: above this many ranks in the group, probe ring neighbours only
FULL_MESH_LIMIT = 64
FANOUT = 16
#: a stream's length: long against timer noise, short against a hung job
STREAM_SECONDS = 0.3
STREAM_BYTES = 1 << 30
_CHUNK = 256 << 10
#: probe and sink threads note their CPU as the watch's every this many chunks: at most
#: ~1 MiB's worth reads as the rank's work (a probe round made an idle rank "work")
NOTE_EVERY = 4
Note = Callable[[], None]


def _nothing() -> None:
    """No sampler to tell (the default ``note``)."""


@dataclass(frozen=True)
class Target:
    """A peer to probe: its rank, address and the ports it listens on."""

    rank: int
    address: str
    ports: Mapping[str, int]


# ---- pure: whom and what to probe -----------------------------------------------------------

def peers_to_probe(me: int, group: Sequence[int], *, limit: int = FULL_MESH_LIMIT,
                   ordered: bool = False) -> tuple[int, ...]:
    """The ranks ``me`` probes (pure): all others of ``group`` up to ``limit``, else its ring
    neighbours. ``ordered``: ``group`` is sorted and unique already (saves a sort per rank)."""
    ranks = group if ordered else sorted(set(group))
    i = bisect_left(ranks, me)
    if i == len(ranks) or ranks[i] != me:
        return ()
    if len(ranks) <= limit:
        return tuple(r for r in ranks if r != me)
    return tuple(sorted({ranks[i - 1], ranks[(i + 1) % len(ranks)]} - {me}))


def probe_request(ident: int, states: Mapping[int, RankState], rank: int,
                  group: tuple[int, ...], silent: tuple[int, ...] = ()) -> dict[str, Any]:
    """What the hub asks ``rank`` to probe (pure): its peers' addresses and ports; with ``silent``,
    only those, by connects (is their host still up?)."""
    if silent:
        group = tuple(sorted({rank, *silent}))
    peers = {str(r): {"address": states[r].address, "ports": states[r].extra.get(PORTS_KEY, {})}
             for r in peers_to_probe(rank, group, ordered=True)
             if r in states and states[r].address}
    return {"t": "probe", "id": ident, "group": list(group), "timeout": PROBE_TIMEOUT_S,
            "peers": peers, "stream": not silent}


def side_ports(states: Mapping[int, RankState], rank: int,
               roster: Sequence[int]) -> dict[str, Any]:
    """The peers' addresses and side ports, for ``watch.cutoff`` (pure; ``roster``: sorted
    ranks)."""
    out = {}
    for peer in peers_to_probe(rank, roster, ordered=True):
        side = states[peer].extra.get(PORTS_KEY, {}).get(SIDE)
        if states[peer].address and side:
            out[str(peer)] = {"address": states[peer].address, "ports": {SIDE: side}}
    return out


def ports_of(state: RankState, override: Mapping[str, int] | None = None) -> dict[str, int]:
    """The valid ports a peer published in ``extra["ports"]``, ``override`` winning (pure)."""
    published = state.extra.get(PORTS_KEY, {})
    merged = {**(published if isinstance(published, Mapping) else {}), **(override or {})}
    out = {}
    for purpose, port in merged.items():
        with contextlib.suppress(TypeError, ValueError):
            if 1 <= int(port) <= 65535:
                out[str(purpose)] = int(port)
    return out


def plan_targets(states: Mapping[int, RankState | None], peers: Iterable[int],
                 ports: Mapping[int, Mapping[str, int]] | None = None) -> list[Target]:
    """The peers that published an address and at least one port (pure)."""
    targets = []
    for rank in peers:
        state = states.get(rank)
        if state is None or not state.address:
            continue
        found = ports_of(state, (ports or {}).get(rank))
        if found:
            targets.append(Target(rank, state.address, found))
    return targets


def connect_result(me: int, target: Target, purpose: str, attempts: Sequence[Attempt],
                   elapsed: float) -> LinkProbe:
    """A connect probe's LinkProbe from its attempts (pure); a reset counts as reachable,
    as in :func:`ddpnet.net.probe.classify_connect`."""
    last = attempts[-1] if attempts else Attempt(TIMEOUT, "no attempt in time")
    port = target.ports[purpose]
    said = f" ({last.error})" if last.error and last.error != "timed out" else ""
    detail = (f"{purpose} port {port}: {last.outcome}{said} after {elapsed:.1f} s, "
              f"{len(attempts)} attempt(s)")
    return LinkProbe(me, target.rank, last.outcome in (CONNECTED, RESET), detail,
                     what=CONNECT, port=port, purpose=purpose, outcome=last.outcome)


def stream_result(me: int, target: Target, sent: int, unacked: int, seconds: float,
                  info: TcpInfo | None) -> LinkProbe:
    """A stream probe's LinkProbe (pure): under two segments acked is an MTU drop, else the rate."""
    port = target.ports[SINK]
    acked = max(0, sent - unacked)
    path = f"; path MTU {info.pmtu}, MSS {info.snd_mss}" if info else ""
    mss = info.snd_mss if info and info.snd_mss else 1448
    if sent and acked < 2 * mss:
        return LinkProbe(me, target.rank, False,
                         f"mtu: connected to sink port {port}, but only {acked} of {sent} "
                         f"bytes acked in {seconds:.1f} s: full-size segments are dropped{path}",
                         what=STREAM, port=port, purpose=SINK, outcome=STALLED)
    rate = acked * 8 / seconds / 1e9 if seconds > 0 else None
    part = "" if not unacked else f" ({unacked} still unacked at the deadline)"
    shown = f"{rate:.3f} Gb/s" if rate is not None else "? Gb/s"
    return LinkProbe(me, target.rank, True,
                     f"stream: {acked} bytes acked in {seconds:.3f} s = {shown}{part}{path}",
                     rate_gbps=None if rate is None else round(rate, 4), what=STREAM,
                     port=port, purpose=SINK, outcome=STREAMED,
                     rtt_s=info.rtt_us / 1e6 if info and info.rtt_us else None)


# ---- edge -----------------------------------------------------------------------------------

def probe_connect(me: int, target: Target, purpose: str, timeout: float) -> LinkProbe:
    """Connect to one of ``target``'s ports until it works or ``timeout`` (edge)."""
    attempts, elapsed = connect_loop(target.address, target.ports[purpose], timeout)
    return connect_result(me, target, purpose, attempts, elapsed)


def _unacked(sock: socket.socket) -> int:
    """Bytes sent and not yet acknowledged (SIOCOUTQ, which is TIOCOUTQ on Linux)."""
    raw = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, struct.pack("i", 0))
    return int(struct.unpack("i", raw)[0])


def _push(sock: socket.socket, nbytes: int, deadline: float, note: Note = _nothing) -> int:
    """Send up to ``nbytes`` before ``deadline`` without blocking past it; bytes sent."""
    payload = memoryview(bytes(_CHUNK))
    sent = sends = 0
    while sent < nbytes and (left := deadline - time.monotonic()) > 0:
        try:
            sent += sock.send(payload[:min(_CHUNK, nbytes - sent)])
        except BlockingIOError:
            select.select([], [sock], [], min(0.05, left))
        sends += 1
        if sends % NOTE_EVERY == 0:
            note()
    return sent


def _drain(sock: socket.socket, deadline: float) -> int:
    """Wait until every byte is acked or ``deadline``; what is still unacked."""
    while (unacked := _unacked(sock)) and time.monotonic() < deadline:
        time.sleep(0.002)
    return unacked


def probe_stream(me: int, target: Target, nbytes: int, timeout: float,
                 seconds: float = STREAM_SECONDS, note: Note = _nothing) -> LinkProbe:
    """Stream into ``target``'s sink for ``seconds`` (at most ``nbytes``), then wait for the
    acknowledgements; all within ``timeout`` (edge)."""
    start = time.monotonic()
    try:
        sock = socket.create_connection((target.address, target.ports[SINK]), timeout=timeout)
    except OSError as exc:
        return _stream_failed(me, target, exc)
    with sock:
        # close with a reset: what is still queued must not keep loading a slow link
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        with contextlib.suppress(OSError):  # a stream without DF still measures the rate
            set_dont_fragment(sock)
        sock.setblocking(False)
        t0 = time.monotonic()
        deadline = start + timeout
        try:
            sent = _push(sock, nbytes, min(deadline, t0 + seconds), note)
            unacked = _drain(sock, deadline)
        except OSError as exc:  # reset by the peer mid-stream
            return _stream_failed(me, target, exc, " mid-stream")
        return stream_result(me, target, sent, unacked, time.monotonic() - t0,
                             tcp_info(sock))


def _stream_failed(me: int, target: Target, exc: OSError, when: str = "") -> LinkProbe:
    got, port = outcome_of(exc), target.ports[SINK]
    return LinkProbe(me, target.rank, False, f"stream: sink port {port}: {got.outcome}{when} "
                     f"({got.error})", what=STREAM, port=port, purpose=SINK, outcome=got.outcome)


def probe_pairs(states: Mapping[int, RankState | None], me: int, *, timeout: float,
                ports: Mapping[int, Mapping[str, int]] | None = None,
                group: Sequence[int] | None = None, stream_bytes: int = STREAM_BYTES,
                stream_seconds: float = STREAM_SECONDS,
                fanout: int = FANOUT, limit: int = FULL_MESH_LIMIT,
                note: Note = _nothing) -> tuple[LinkProbe, ...]:
    """Probe every peer :func:`peers_to_probe` picks (edge), within ceil(probes / fanout) * timeout;
    ``ports`` overrides what peers published, ``stream_bytes=0`` skips the stream."""
    ranks = [*states, me] if group is None else list(group)
    targets = plan_targets(states, peers_to_probe(me, ranks, limit=limit), ports)
    jobs: list[tuple[Any, ...]] = [(probe_connect, me, t, purpose, timeout)
                                   for t in targets for purpose in sorted(t.ports)]
    if stream_bytes > 0:
        jobs += [(probe_stream, me, t, stream_bytes, timeout, stream_seconds, note)
                 for t in targets if SINK in t.ports]
    if not jobs:
        return ()

    def run(job: tuple[Any, ...]) -> LinkProbe:
        try:
            return job[0](*job[1:])  # type: ignore[no-any-return]
        finally:
            note()

    with ThreadPoolExecutor(max_workers=max(1, min(fanout, len(jobs))),
                            thread_name_prefix=f"{WATCH_THREADS}-probe") as pool:
        found = list(pool.map(run, jobs))
    return tuple(sorted(found, key=lambda p: (p.dst_rank, p.what, p.purpose)))


def listening_ports(exclude: Iterable[int] = ()) -> tuple[int, ...]:
    """This process's listening TCP ports, lowest first, less ``exclude`` (edge, psutil): gloo's
    listener is what a heartbeat publishes as ``backend``."""
    import psutil

    skip = set(exclude)
    try:
        conns = psutil.Process().net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return ()
    return tuple(sorted({c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN
                         and c.laddr and c.laddr.port not in skip}))


class ProbeSink:
    """Accepts and discards peers' stream probes, a daemon thread per connection; its threads call
    ``note``: a peer's stream is no work of this rank's."""

    def __init__(self, address: str = "", port: int = 0, *, max_conns: int = 64,
                 idle: float = 10.0, note: Note = _nothing) -> None:
        self._sock = listen_socket(address, port, backlog=max_conns)
        self._sock.settimeout(0.2)
        self.port = int(self._sock.getsockname()[1])
        self._slots = threading.BoundedSemaphore(max_conns)
        self._idle = idle
        self._stop = threading.Event()
        self._note = note
        self._thread = threading.Thread(target=self._serve, name=f"{WATCH_THREADS}-sink",
                                        daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            self._note()
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._slots.acquire(blocking=False):
                conn.close()
                continue
            threading.Thread(target=self._read, args=(conn,), daemon=True,
                             name=f"{WATCH_THREADS}-sink-read").start()

    def _read(self, conn: socket.socket) -> None:
        buf = bytearray(1 << 20)
        reads = 0
        try:
            with conn:
                conn.settimeout(self._idle)
                while not self._stop.is_set() and conn.recv_into(buf):
                    reads += 1
                    if reads % NOTE_EVERY == 0:
                        self._note()
        except OSError:
            pass
        finally:
            self._note()
            self._slots.release()

    def close(self) -> None:
        self._stop.set()
        self._sock.close()
        self._thread.join(1.0)

    def forget(self) -> None:
        """In a forked child: close (never shut down) this copy of the listener."""
        with contextlib.suppress(OSError):
            self._sock.close()

    def __enter__(self) -> ProbeSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""The side channel (edge): a bounded outbox of whole framed messages per connection, written
without blocking, and a rank's connection to the hub (:class:`HubLink`). The rules (whole messages,
``key`` replaces, a late outbox drops the connection) are in docs/watch.md, "How it works"."""

from __future__ import annotations

import contextlib
import os
import select
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ddpnet.watch.state import RankState
from ddpnet.watch.wire import MAX_LINE, Lines, encode

#: what an outbox holds at most (bytes of messages not yet written)
OUTBOX_BYTES = 8 << 20
#: seconds an outbox may hold a message without finishing one before its reader is late
DEADLINE_S = 10.0
#: bound on each send and on connecting
SOCKET_TIMEOUT_S = 2.0
#: TCP_USER_TIMEOUT on the hub's connections: a cut link errors instead of hanging
LOST_AFTER_S = 60.0
#: a rank's outbox deadline (a congested link, a hub not reading): it then connects anew
SEND_DEADLINE_S = 4.0
#: after a lost connection, seconds during which the heartbeat connects anew
RECONNECT_FOR_S = 30.0


def ready(sock: socket.socket, *, write: bool, seconds: float) -> tuple[bool, bool]:
    """Whether ``sock`` is readable (and with ``write``, writable) within ``seconds``; ``poll``,
    since ``select`` refuses an fd above 1023."""
    poller = select.poll()
    poller.register(sock, select.POLLIN | (select.POLLOUT if write else 0))
    events = 0
    for _fd, event in poller.poll(max(0.0, seconds) * 1000):
        events |= event
    readable = bool(events & (select.POLLIN | select.POLLHUP | select.POLLERR))
    return readable, bool(events & (select.POLLOUT | select.POLLERR))


@dataclass
class Outbox:
    """Complete messages waiting for one socket, the first one perhaps begun."""

    limit: int = OUTBOX_BYTES
    deadline: float = DEADLINE_S
    queue: deque[tuple[str, bytes]] = field(default_factory=deque)
    #: bytes of the first message already written
    begun: int = 0
    #: bytes queued (the first message whole)
    size: int = 0
    #: when the outbox last was empty or finished a message (monotonic)
    moved: float = field(default_factory=time.monotonic)
    #: messages refused because the outbox was full
    dropped: int = 0

    def put(self, data: bytes, key: str = "", now: float | None = None) -> bool:
        """Queue one framed message (``key``: in place of a queued one not begun); False if it won't
        fit."""
        if key:
            for i, (queued, old) in enumerate(self.queue):
                if queued == key and not (i == 0 and self.begun):
                    self.queue[i] = (key, data)
                    self.size += len(data) - len(old)
                    return True
        if self.size + len(data) > self.limit and self.queue:
            self.dropped += 1
            return False
        if not self.queue:
            self.moved = time.monotonic() if now is None else now
        self.queue.append((key, data))
        self.size += len(data)
        return True

    def pending(self) -> bool:
        return bool(self.queue)

    def late(self, now: float) -> bool:
        return bool(self.queue) and now - self.moved > self.deadline

    def flush(self, sock: socket.socket, now: float | None = None) -> None:
        """Write what the socket takes now, never blocking (OSError: the connection broke)."""
        while self.queue:
            data = self.queue[0][1]
            try:
                sent = sock.send(memoryview(data)[self.begun:], socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            self.begun += sent
            if self.begun < len(data):
                return
            self.queue.popleft()
            self.size -= len(data)
            self.begun = 0
            self.moved = time.monotonic() if now is None else now

    def drain(self, sock: socket.socket, seconds: float) -> bool:
        """Write everything within ``seconds``; whether the outbox is empty."""
        end = time.monotonic() + seconds
        while self.queue:
            self.flush(sock)
            left = end - time.monotonic()
            if not self.queue or left <= 0:
                break
            ready(sock, write=True, seconds=left)
        return not self.queue


class HubLink:
    """A rank's connection to the hub: handshake, outbox, reading, reconnecting;
    ``heartbeat.Beacon`` answers what it reads (:meth:`handle`)."""

    hub: tuple[str, int] = ("", 0)
    #: the job's token, and when (monotonic) the connection was lost, how often it was
    token = ""
    lost_at: float | None = None
    reconnects = 0
    sock: socket.socket | None = None

    def __init__(self, ident: RankState, lost_after: float) -> None:
        self.ident, self.lost_after = ident, lost_after
        #: the process this rank is: a forked child inherits the socket, never speaks for it
        self.owner = os.getpid()
        self.outbox = Outbox(limit=4 * MAX_LINE, deadline=SEND_DEADLINE_S)
        self.send_lock = threading.Lock()
        self.lines = Lines()
        #: what came with the welcome (a verdict given before this rank connected)
        self.pending: list[dict[str, Any]] = []
        #: monotonic and wall time of the hub's last message
        self.heard, self.heard_at = time.monotonic(), time.time()
        #: held by the handshake and the goodbye: one goodbye, on the new connection
        self.life = threading.Lock()
        self.stopped = threading.Event()
        #: set once a verdict was obeyed (its exit may be a test's stand-in that returns)
        self.obeyed = threading.Event()
        #: set when the hub answered this rank's goodbye (or cannot any more)
        self.farewell = threading.Event()

    def handle(self, message: dict[str, Any]) -> None:
        raise NotImplementedError

    def open(self, patience: float) -> socket.socket:
        """Connect to :attr:`hub` (retrying while it starts), say hello, check the welcome; OSError
        after ``patience``. Then the connection is this rank's (under :attr:`life`)."""
        address, port = self.hub
        deadline = time.monotonic() + patience
        while True:
            try:
                sock = socket.create_connection((address, port), timeout=SOCKET_TIMEOUT_S)
                if hasattr(socket, "TCP_USER_TIMEOUT"):  # Linux: a cut link errors, not hangs
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT,
                                    int(self.lost_after * 1000))
                sock.sendall(encode({"t": "hello", "rank": self.ident.rank,
                                     "token": self.token}))
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.lines = Lines()
        # a hub welcoming thousands of ranks at once may take longer than a socket timeout
        welcome = self.expect("welcome", max(SOCKET_TIMEOUT_S, deadline - time.monotonic()),
                              sock)
        if welcome.get("token") != self.token:
            sock.close()
            raise OSError(f"what listens at {address}:{port} is not this job's hub "
                          f"({welcome.get('token') or 'no answer'})")
        sock.setblocking(False)
        with self.send_lock:
            self.outbox = Outbox(limit=4 * MAX_LINE, deadline=SEND_DEADLINE_S)
            self.sock = sock
        self.heard, self.heard_at = time.monotonic(), time.time()
        self.lost_at = None
        return sock

    def expect(self, kind: str, within: float, sock: socket.socket) -> dict[str, Any]:
        """The first message of ``kind`` within ``within`` seconds ({} if none); others go to
        pending."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            try:
                data = sock.recv(1 << 16)
                messages = self.lines.feed(data)
            except TimeoutError:  # one socket timeout: wait on until ``within``
                continue
            except (OSError, ValueError):
                return {}
            if not data:
                return {}
            for i, message in enumerate(messages):
                if message.get("t") == kind:
                    self.pending.extend(messages[i + 1:])  # read in the same recv
                    return message
                self.pending.append(message)
        return {}

    def handle_pending(self) -> None:
        """What came with the welcome, before whatever is read next."""
        for message in self.pending:
            self.handle(message)
        self.pending.clear()

    def send(self, message: dict[str, Any]) -> bool:
        """Queue ``message`` and write what the socket takes now, never blocking; False if it won't
        fit."""
        sock = self.sock
        if sock is None or os.getpid() != self.owner:
            return False
        kind = str(message.get("t", ""))
        with self.send_lock:
            queued = self.outbox.put(encode(message), key="state" if kind == "state" else "")
        self.flush(sock)
        return queued

    def flush(self, sock: socket.socket) -> None:
        """Write what ``sock`` takes of the outbox now; lose a broken or late connection."""
        try:
            with self.send_lock:
                if self.sock is sock:
                    self.outbox.flush(sock)
                    late = self.outbox.late(time.monotonic())
                else:
                    late = False
        except OSError:
            late = True
        if late:
            self.lose(sock)

    def drain(self) -> None:
        """Write the outbox within SOCKET_TIMEOUT_S (a goodbye: the rank is ending)."""
        sock = self.sock
        if sock is None:
            return
        try:
            with self.send_lock:
                self.outbox.drain(sock, SOCKET_TIMEOUT_S)
        except OSError:
            self.lose(sock)

    def take(self, messages: list[dict[str, Any]]) -> None:
        for message in messages:
            self.heard, self.heard_at = time.monotonic(), time.time()
            self.handle(message)

    def listen_until(self, deadline: float, sock: socket.socket) -> None:
        """Read the hub's messages until ``deadline`` (not returning on the ack: that backlogged the
        hub)."""
        while not self.stopped.is_set() and self.sock is sock:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self.listen(left, sock)

    def listen(self, seconds: float, sock: socket.socket) -> None:
        """Read what the hub sent within ``seconds``, writing the outbox meanwhile."""
        data: bytes | None = None
        try:
            readable, out = ready(sock, write=self.outbox.pending(), seconds=seconds)
            if out:
                self.flush(sock)
            data = sock.recv(1 << 16) if readable and self.sock is sock else None
            messages = self.lines.feed(data or b"")
        except BlockingIOError:
            data, messages = None, []
        except (OSError, ValueError):
            data, messages = b"", []
        self.take(messages)
        if data == b"":  # the hub is gone or unreachable (ETIMEDOUT)
            self.lose(sock)

    def lose(self, sock: socket.socket) -> None:
        """Drop a broken or late connection, after reading what the hub sent on it (a verdict)."""
        if self.sock is not sock:
            return
        with contextlib.suppress(OSError, ValueError):
            while ready(sock, write=False, seconds=0)[0]:
                data = sock.recv(1 << 16)
                if not data:
                    break
                self.take(self.lines.feed(data))
        if self.sock is sock:
            self.sock = None
            self.lost_at = time.monotonic()
        self.farewell.set()  # nobody answers a goodbye on this connection any more
        sock.close()

    def reconnect(self) -> None:
        """One bounded try to connect anew, until RECONNECT_FOR_S after the loss."""
        lost = self.lost_at
        if lost is None or not self.token or self.obeyed.is_set() or \
                time.monotonic() - lost > RECONNECT_FOR_S:
            return
        with self.life:
            if self.stopped.is_set():
                return
            try:
                self.open(0.0)
            except OSError:
                self.lost_at = lost
                return
            self.reconnects += 1
            self.farewell.clear()  # a goodbye on the new connection is answered again
            self.handle_pending()

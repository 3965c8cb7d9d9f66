"""The side channel's writer (edge): a bounded outbox of complete framed messages
(``wire.encode``) per connection, written without blocking.

A message is put whole or not at all, and once its first byte is on the wire the rest follows
it before any other message: the stream never carries half a message and then another one
(one JSON object per line, ``watch.wire``). What the kernel does not take now stays for the
next writable moment (the hub's selector, the heartbeat's ``select``). A message put under a
``key`` replaces a queued one of the same key that has not begun (a newer state supersedes
an unsent one). A connection whose outbox moved no complete message for ``deadline`` seconds
while holding one is :meth:`Outbox.late`: its reader is too slow or gone, and the owner drops
the connection (the hub marks the rank, a rank reconnects) rather than cut a message.
"""

from __future__ import annotations

import select
import socket
import time
from collections import deque
from dataclasses import dataclass, field

#: what an outbox holds at most (bytes of messages not yet written)
OUTBOX_BYTES = 8 << 20
#: seconds an outbox may hold a message without finishing one before its reader is late
DEADLINE_S = 10.0


def ready(sock: socket.socket, *, write: bool, seconds: float) -> tuple[bool, bool]:
    """Whether ``sock`` is readable, and (with ``write``) writable, within ``seconds``
    (``poll``: any fd number; ``select`` refuses one above 1023, which a rank of a job with
    many files open has, and its heartbeat read that as its hub gone)."""
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
        """Queue one framed message; with ``key``, in place of a queued one of that key not
        begun yet. False (and counted) when it does not fit."""
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
        """Whether a message waited ``deadline`` s with none finished: the reader is too
        slow (or gone) to be fed more."""
        return bool(self.queue) and now - self.moved > self.deadline

    def flush(self, sock: socket.socket, now: float | None = None) -> None:
        """Write what the socket takes now, never blocking (OSError: the connection broke;
        BlockingIOError is not one)."""
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
        """Write everything within ``seconds`` (a goodbye at exit may wait a little);
        whether the outbox is empty."""
        end = time.monotonic() + seconds
        while self.queue:
            self.flush(sock)
            left = end - time.monotonic()
            if not self.queue or left <= 0:
                break
            ready(sock, write=True, seconds=left)
        return not self.queue

"""A small TCP relay: a listener on one address that pipes each connection to another
address's port. ``ddpnet check`` hosts its store on MASTER_ADDR's own address only (the store
is unauthenticated: never on every interface) and relays the same port from the other
family's addresses of that interface, so a worker whose MASTER_ADDR resolves to IPv6 while
rank 0's resolves to IPv4 still joins and the mismatch is named, not timed out.

Edge module (sockets and threads). Bounded: at most ``max_conns`` connections at once (more
are closed at once), every thread a daemon, ``close()`` ends them all.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from ddpnet.net.ports import listen_socket

#: seconds a relay waits to reach its target (the store listens on the same host)
CONNECT_TIMEOUT = 3.0


class Relay:
    """Listen on ``address``:``port`` and pipe every connection to ``target``:``target_port``."""

    def __init__(self, address: str, port: int, target: str, target_port: int, *,
                 max_conns: int = 256) -> None:
        self.address, self.port = address, port
        self.target = (target, target_port)
        self._sock = listen_socket(address, port)
        self._slots = threading.BoundedSemaphore(max_conns)
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name=f"ddpnet-relay-{address}", daemon=True
                         ).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._sock.accept()
            except OSError:  # closed
                return
            if not self._slots.acquire(blocking=False):
                client.close()
                continue
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=CONNECT_TIMEOUT)
        except OSError:
            client.close()
            self._slots.release()
            return
        upstream.settimeout(None)
        if not self._track(client, upstream):
            return
        back = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
        back.start()
        _pipe(client, upstream)
        back.join()
        self._untrack(client, upstream)

    def _track(self, *socks: socket.socket) -> bool:
        with self._lock:
            if self._closed:
                for s in socks:
                    s.close()
                self._slots.release()
                return False
            self._open.update(socks)
            return True

    def _untrack(self, *socks: socket.socket) -> None:
        with self._lock:
            for s in socks:
                self._open.discard(s)
                s.close()
        self._slots.release()

    def close(self) -> None:
        """Stop listening and cut every relayed connection."""
        with self._lock:
            self._closed = True
            socks = list(self._open)
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    """Copy ``src`` to ``dst`` until ``src`` ends; then pass the end on (half-close)."""
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

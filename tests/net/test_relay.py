"""The relay check's store uses for the other family: real sockets on loopback."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from ddpnet.net.ports import free_port, listen_socket
from ddpnet.net.relay import Relay


def _echo_server() -> tuple[socket.socket, int]:
    port = free_port()
    server = listen_socket("127.0.0.1", port)

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return

            def echo(c: socket.socket = conn) -> None:
                with c:
                    while data := c.recv(4096):
                        c.sendall(data)

            threading.Thread(target=echo, daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return server, port


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no ::1 on this host")
def test_a_v6_client_reaches_a_v4_only_server_through_the_relay() -> None:
    server, port = _echo_server()
    relay = Relay("::1", port, "127.0.0.1", port)
    try:
        with socket.create_connection(("::1", port), timeout=5) as c:
            c.sendall(b"hello store")
            assert c.recv(100) == b"hello store"
    finally:
        relay.close()
        server.close()


def test_close_cuts_relayed_connections_and_stops_listening() -> None:
    server, port = _echo_server()
    relay_port = free_port()
    relay = Relay("127.0.0.1", relay_port, "127.0.0.1", port)
    c = socket.create_connection(("127.0.0.1", relay_port), timeout=5)
    c.sendall(b"x")
    assert c.recv(10) == b"x"
    relay.close()
    c.settimeout(5)
    assert c.recv(10) == b""  # cut: the peer sees the end, not a hang
    c.close()
    time.sleep(0.1)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", relay_port), timeout=2)
    server.close()


def test_connections_beyond_the_bound_are_closed_at_once() -> None:
    server, port = _echo_server()
    relay_port = free_port()
    relay = Relay("127.0.0.1", relay_port, "127.0.0.1", port, max_conns=1)
    first = socket.create_connection(("127.0.0.1", relay_port), timeout=5)
    first.sendall(b"a")
    assert first.recv(10) == b"a"
    second = socket.create_connection(("127.0.0.1", relay_port), timeout=5)
    second.settimeout(5)
    assert second.recv(10) == b""
    for s in (first, second):
        s.close()
    relay.close()
    server.close()

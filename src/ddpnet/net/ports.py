"""Ports on this host: the one ``free_port`` every command and test asks for."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now at ``host`` (v4 or v6 literal), chosen by the kernel.

    Another process may take it before the caller binds it; callers that can should pass the
    bound socket on instead (``check`` hands its listening fd to the store)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])

"""Ports on this host: the one ``free_port`` every command and test asks for, and who
holds a port (``port_holders``)."""

from __future__ import annotations

import socket
from dataclasses import dataclass


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now at ``host`` (v4 or v6 literal), chosen by the kernel.

    Another process may take it before the caller binds it; callers that can should pass the
    bound socket on instead (``check`` hands its listening fd to the store)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def listen_socket(address: str, port: int, backlog: int = 2048) -> socket.socket:
    """A socket listening on ``address``:``port`` (``""`` for every interface), with
    SO_REUSEADDR as TCPStore sets it. OSError (EADDRINUSE...) is the caller's to name."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


def store_address(resolved: tuple[str, ...], local: frozenset[str]) -> str:
    """Where rank 0's rendezvous store listens (pure): MASTER_ADDR's own address on this host,
    so the unauthenticated store is not exposed on every interface (PyTorch's security notes);
    every interface (``""``) only when none of MASTER_ADDR's addresses is this host's."""
    for address in resolved:
        if address in local:
            return address
    return ""


@dataclass(frozen=True)
class Holder:
    """A process listening on a port (what ``ss -ltnp`` shows)."""

    pid: int
    name: str
    cmdline: str

    def describe(self) -> str:
        return f"pid {self.pid} ({self.cmdline or self.name})"


def port_holders(port: int) -> tuple[Holder, ...]:
    """The processes listening on TCP ``port`` here, as far as we may see them (edge: another
    user's sockets need root; then the tuple is empty and the hint says ``ss -ltnp``)."""
    import psutil

    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return ()
    pids = sorted({c.pid for c in conns if c.pid and c.status == psutil.CONN_LISTEN
                   and c.laddr and c.laddr.port == port})
    out = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            out.append(Holder(pid, proc.name(), " ".join(proc.cmdline())[:200]))
        except (psutil.Error, OSError):
            out.append(Holder(pid, "?", ""))
    return tuple(out)

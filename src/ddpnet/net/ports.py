"""Ports on this host: the one ``free_port`` every command and test asks for, and who
holds a port (``port_holders``)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def sockaddr(address: str, port: int) -> tuple[socket.AddressFamily, tuple[Any, ...]]:
    """The family and socket address of an IP literal (edge: names the zone's interface).

    A link-local address binds and dials only with its zone (``fe80::1%eth0``), and Python
    takes a zone only as the scope id of a 4-tuple (the 2-tuple form fails with EINVAL);
    OSError when the zone names no interface here."""
    ip, pct, zone = address.partition("%")
    if pct:
        index = int(zone) if zone.isdigit() else socket.if_nametoindex(zone)
        return socket.AF_INET6, (ip, port, 0, index)
    return (socket.AF_INET6 if ":" in address else socket.AF_INET), (address, port)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now at ``host`` (v4 or v6 literal), chosen by the kernel.

    Another process may take it before the caller binds it; callers that can should pass the
    bound socket on instead (``check`` hands its listening fd to the store)."""
    family, where = sockaddr(host, 0)
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind(where)
        return int(sock.getsockname()[1])


def listen_socket(address: str, port: int, backlog: int = 2048) -> socket.socket:
    """A socket listening on ``address``:``port`` (``""`` for every interface), with
    SO_REUSEADDR as TCPStore sets it. OSError (EADDRINUSE...) is the caller's to name."""
    family, where = sockaddr(address, port)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(where)
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


def store_address(resolved: tuple[str, ...], local: frozenset[str]) -> str:
    """Where rank 0's rendezvous store listens (pure): MASTER_ADDR's own address on this host,
    so the unauthenticated store is not exposed on every interface (PyTorch's security notes);
    every interface (``""``) only when none of MASTER_ADDR's addresses is this host's."""
    for address in resolved:  # a link-local one keeps its zone: binding needs it
        if address.partition("%")[0] in local:
            return address
    return ""


#: TCP states as /proc/net/tcp writes them (include/net/tcp_states.h)
TCP_STATES = {1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2",
              6: "TIME_WAIT", 7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN",
              11: "CLOSING", 12: "NEW_SYN_RECV"}


@dataclass(frozen=True)
class TcpSocket:
    """One line of /proc/net/tcp{,6}: a socket of this network namespace."""

    local: str
    local_port: int
    remote: str
    remote_port: int
    state: str
    uid: int
    inode: int


def _hex_address(text: str) -> tuple[str, int]:
    """``0100007F:0016`` -> ("127.0.0.1", 22); IPv6 is four host-order 32-bit words."""
    addr, _, port = text.partition(":")
    raw = bytes.fromhex(addr)
    packed = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    family = socket.AF_INET6 if len(packed) == 16 else socket.AF_INET
    return socket.inet_ntop(family, packed), int(port, 16)


def parse_proc_tcp(text: str) -> list[TcpSocket]:
    """Every socket of a /proc/net/tcp or tcp6 table (pure; malformed lines skipped)."""
    out = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        try:
            local, lport = _hex_address(fields[1])
            remote, rport = _hex_address(fields[2])
            state = TCP_STATES.get(int(fields[3], 16), fields[3])
            out.append(TcpSocket(local, lport, remote, rport, state, int(fields[7]),
                                 int(fields[9])))
        except (IndexError, ValueError, OSError):
            continue
    return out


_ESCAPES = str.maketrans({"\n": "\\n", "\r": "\\r", "\t": "\\t"})


@dataclass(frozen=True)
class Holder:
    """A socket that holds a port here, with its process and user where visible: a listener
    (what ``ss -ltnp`` shows) or a connection whose local port it is (``ss -tanp``), such as
    an outgoing connection the kernel gave an ephemeral port, or one in TIME_WAIT (no
    process: the kernel keeps it a minute after the close)."""

    pid: int | None
    name: str
    cmdline: str
    state: str = "LISTEN"
    local: str = ""
    remote: str = ""
    user: str = ""

    @property
    def listener(self) -> bool:
        return self.state == "LISTEN"

    def process(self) -> str:
        if self.pid is None:
            return ("no process (the kernel keeps it after the close)"
                    if self.state == "TIME_WAIT" else "a process this user cannot see")
        shown = (self.cmdline or self.name).translate(_ESCAPES)  # a one-line error
        return f"pid {self.pid} ({shown})"

    def describe(self) -> str:
        """``pid 812 (python train.py)``, with the connection and user when known."""
        user = f", user {self.user}" if self.user else ""
        if self.listener:
            return f"{self.process()}{user}"
        return f"{self.state} {self.local} -> {self.remote}, {self.process()}{user}"


def _endpoint(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def socket_holders(sockets: list[TcpSocket], port: int, pids: dict[int, int],
                   processes: dict[int, tuple[str, str]], users: dict[int, str]
                   ) -> tuple[Holder, ...]:
    """The holders of local TCP ``port`` (pure): listeners first, then connections. ``pids``
    maps socket inodes to processes, ``processes`` pids to (name, command line), ``users``
    uids to names."""
    out = []
    for sock in sorted((s for s in sockets if s.local_port == port),
                       key=lambda s: (s.state != "LISTEN", s.state)):
        pid = pids.get(sock.inode) if sock.inode else None
        name, cmdline = processes.get(pid, ("?", "")) if pid is not None else ("", "")
        user = users.get(sock.uid, str(sock.uid)) if sock.state != "TIME_WAIT" else ""
        remote = "" if sock.state == "LISTEN" else _endpoint(sock.remote, sock.remote_port)
        out.append(Holder(pid, name, cmdline, sock.state, _endpoint(sock.local, port), remote,
                          user))
    return tuple(dict.fromkeys(out))


def port_holders(port: int, proc: Path = Path("/proc")) -> tuple[Holder, ...]:
    """Every socket holding TCP ``port`` in this network namespace, with its process and
    user as far as we may see them (edge: reads /proc/net/tcp{,6} and /proc/PID/fd; another
    user's processes need root)."""
    sockets: list[TcpSocket] = []
    for name in ("tcp", "tcp6"):
        try:
            sockets += parse_proc_tcp((proc / "net" / name).read_text())
        except OSError:
            continue
    mine = [s for s in sockets if s.local_port == port]
    if not mine:
        return ()
    pids = _socket_pids({s.inode for s in mine if s.inode}, proc)
    return socket_holders(mine, port, pids, _processes(set(pids.values()), proc),
                          _users({s.uid for s in mine}))


def _socket_pids(inodes: set[int], proc: Path) -> dict[int, int]:
    """Socket inode -> pid, from the ``socket:[INODE]`` links in /proc/PID/fd (edge)."""
    found: dict[int, int] = {}
    wanted = {f"socket:[{i}]": i for i in inodes}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                inode = wanted.get(os.readlink(fd))
                if inode is not None:
                    found.setdefault(inode, int(entry.name))
        except OSError:  # gone, or another user's (needs root)
            continue
        if len(found) == len(wanted):
            break
    return found


def _processes(pids: set[int], proc: Path) -> dict[int, tuple[str, str]]:
    out = {}
    for pid in pids:
        try:
            name = (proc / str(pid) / "comm").read_text().strip()
            argv = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")
            out[pid] = (name, " ".join(a.decode(errors="replace") for a in argv if a))
        except OSError:
            out[pid] = ("?", "")
    return out


def _users(uids: set[int]) -> dict[int, str]:
    import pwd

    out = {}
    for uid in uids:
        try:
            out[uid] = pwd.getpwuid(uid).pw_name
        except KeyError:
            out[uid] = str(uid)
    return out

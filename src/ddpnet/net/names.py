"""Host name resolution as torch sees it (getaddrinfo), and whether it lands on loopback.

Debian and Ubuntu map the hostname to 127.0.1.1 in /etc/hosts; gloo binds what the hostname
resolves to, so on such hosts a multi-node gloo group without GLOO_SOCKET_IFNAME fails.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from dataclasses import dataclass


def is_loopback(address: object) -> bool:
    """Whether ``address`` (an IP literal, a v6 one with ``%scope`` too) is a loopback
    address; a name or junk is not (pure)."""
    try:
        return ipaddress.ip_address(str(address).split("%")[0]).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class HostResolution:
    addresses: tuple[str, ...]
    any_loopback: bool
    only_loopback: bool
    name: str = ""
    #: why nothing resolved (the resolver's message), empty on success
    error: str = ""

    @property
    def ok(self) -> bool:
        return bool(self.addresses)


def from_addresses(name: str, addresses: list[str], error: str = "") -> HostResolution:
    """Pure: de-duplicate in resolver order and mark loopback."""
    seen: list[str] = []
    for a in addresses:
        a = a.split("%")[0]
        if a not in seen:
            seen.append(a)
    loop = [ipaddress.ip_address(a).is_loopback for a in seen]
    return HostResolution(tuple(seen), any(loop), bool(loop) and all(loop), name, error)


def resolve_host(name: str | None = None, timeout: float = 5.0) -> HostResolution:
    """All addresses ``name`` (default: this host's name) resolves to (edge, bounded).

    getaddrinfo has no timeout of its own; a thread bounds it so a dead DNS server costs
    ``timeout`` seconds, not the resolver's retries.
    """
    host = name if name is not None else socket.gethostname()
    try:
        ipaddress.ip_address(host)
        return from_addresses(host, [host])
    except ValueError:
        pass
    out: list[str] = []
    err: list[str] = []

    def work() -> None:
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
            out.extend(str(info[4][0]) for info in infos)
        except (socket.gaierror, UnicodeError) as exc:
            err.append(str(exc))

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return from_addresses(host, [], f"resolver did not answer within {timeout:g} s")
    return from_addresses(host, out, err[0] if err else "")


#: the hosts file glibc's "files" source reads first on every Linux node
HOSTS_PATH = "/etc/hosts"


def hosts_lines(content: str, name: str) -> list[str]:
    """The lines of a hosts file that map ``name`` (or its short form), comments dropped, in
    file order: what a stale or loopback entry looks like to the user (pure)."""
    short = name.split(".")[0]
    found = []
    for raw in content.splitlines():
        fields = raw.split("#", 1)[0].split()
        if len(fields) > 1 and (name in fields[1:] or short in fields[1:]):
            found.append(" ".join(fields))
    return found


def hosts_names(content: str, address: str) -> list[str]:
    """Every name a hosts file gives ``address`` (pure): an address a stale line sends
    MASTER_ADDR to is often another node's, listed under its own name too."""
    names: list[str] = []
    for raw in content.splitlines():
        fields = raw.split("#", 1)[0].split()
        if len(fields) > 1 and fields[0] == address:
            names += [n for n in fields[1:] if n not in names]
    return names


def read_hosts(path: str = HOSTS_PATH) -> str:
    """This node's hosts file ("" when unreadable) (edge)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(1 << 20)
    except OSError:
        return ""

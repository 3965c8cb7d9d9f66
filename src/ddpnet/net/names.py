"""Host name resolution as torch sees it (getaddrinfo), and whether it lands on loopback.

Debian and Ubuntu map the hostname to 127.0.1.1 in /etc/hosts; gloo binds what the hostname
resolves to, so on such hosts a multi-node gloo group without GLOO_SOCKET_IFNAME fails.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ddpnet.net.interfaces import Interface

#: the mark the /etc/hosts fix leaves on the lines it writes or comments out
HOSTS_MARK = "# ddpnet tune"


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
    """Pure: de-duplicate in resolver order and mark loopback. A link-local answer keeps
    its zone (``fe80::1%eth0``): without it nothing can bind or dial it; any other loses a
    zone it does not need."""
    seen: list[str] = []
    for a in addresses:
        ip, _, zone = a.partition("%")
        a = a if zone and ipaddress.ip_address(ip).is_link_local else ip
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


# --------------------------------------------------------------------------- the /etc/hosts fix

@dataclass(frozen=True)
class HostsFix:
    """The one /etc/hosts fix for a hostname that resolves to loopback, as ``tune`` writes it
    and ``doctor`` proposes it: ``content`` is the new file (the old one when nothing
    changes), ``removed_from`` the loopback addresses whose lines lose the name, ``added`` the
    line mapping it to ``address`` (empty when a line already does), ``source`` where
    ``address`` came from."""

    content: str
    hostname: str
    address: str
    removed_from: tuple[str, ...] = ()
    added: str = ""
    source: str = ""

    @property
    def changes(self) -> bool:
        return bool(self.removed_from)

    @property
    def what(self) -> str:
        """What the fix did (tune's note); empty when nothing changes."""
        done = [f"removed {self.hostname} from the {a} line" for a in self.removed_from]
        if self.added:
            done.append(f"mapped {self.hostname} to {self.address}")
        return "; ".join(done)

    @property
    def proposal(self) -> str:
        """What to do (doctor's fix); empty when nothing changes."""
        todo = [f"remove {self.hostname} from the {a} line" for a in self.removed_from]
        if self.added:
            todo.append(f"add the line '{self.added}'")
        elif todo:  # a later line maps it already: say where the name then resolves
            todo.append(f"{self.hostname} then resolves to {self.address} (the line that "
                        "maps it there stays)")
        return "; ".join(todo)


def hostname_address(interfaces: Sequence[Interface], preferred: str | None = None,
                     family: int | None = None) -> tuple[str | None, str]:
    """``(address, source)``: the address this host's name should map to, never loopback
    (pure). ``preferred`` (the selected interface's address) when it is a routable one; else
    the first up non-loopback interface's first global address (``family`` when given).
    Mapping the name to the loopback address it already has would change nothing."""
    if preferred and not is_loopback(preferred):
        return preferred, "the selected interface's address"
    for iface in sorted(interfaces, key=lambda i: (i.kind != "physical", i.name)):
        if not iface.up or iface.kind == "loopback":
            continue
        for a in iface.addresses:
            if not a.is_loopback and not a.is_link_local and family in (None, a.family):
                return a.ip, f"{iface.name}'s address (the selected interface is loopback)"
    return None, "no up interface has a routable address"


def hosts_fix(content: str, hostname: str, address: str, source: str = "") -> HostsFix:
    """Move ``hostname`` (and its short name) off loopback lines in /etc/hosts ``content``
    and map it to ``address`` unless a line already does (pure; other names on a loopback
    line stay). Refuses to map the name to a loopback address: that fix changes nothing."""
    if is_loopback(address):
        raise ValueError(f"{address} is loopback: mapping {hostname} to it fixes nothing")
    short = hostname.split(".")[0]
    names = {hostname, short}
    out: list[str] = []
    removed: list[str] = []
    has_routable = False
    for line in content.splitlines(keepends=True):
        body, _, comment = line.rstrip("\n").partition("#")
        fields = body.split()
        if len(fields) >= 2 and names & set(fields[1:]):
            if is_loopback(fields[0]):
                keep = [f for f in fields[1:] if f not in names]
                out.append(f"# {line.rstrip(chr(10))}  {HOSTS_MARK}: {hostname} is not "
                           "loopback\n")
                if keep:
                    out.append(" ".join([fields[0], *keep]) + (f" #{comment}" if comment else "")
                               + "\n")
                removed.append(fields[0])
                continue
            if fields[0] == address:
                has_routable = True
        out.append(line)
    if not removed:
        return HostsFix(content, hostname, address, source=source)
    added = ""
    if not has_routable:
        if out and not out[-1].endswith("\n"):
            out[-1] += "\n"
        added = f"{address} {hostname if short == hostname else f'{hostname} {short}'}"
        out.append(f"{added}  {HOSTS_MARK}: gloo resolves this host's name\n")
    return HostsFix("".join(out), hostname, address, tuple(removed), added, source)


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

"""The route this host would use to reach an address: interface, source address, gateway.

The kernel's answer (a routing-table lookup that sends nothing: ``ip route get``, asked over
rtnetlink by ``net.netlink``) is the truth gloo and NCCL will live with, so selection starts
from it. ``parse_route_get`` and ``from_answer`` are pure; ``route_to`` and ``lookup`` are the
edges, asking netlink first, then iproute2 (``ip -j route get``) where netlink cannot be
asked, then (``route_to``) a UDP ``connect`` (also sends nothing). The default route comes
from ``<proc>/net/route`` (``parse_default_route`` pure, ``default_route_iface`` the edge).
"""

from __future__ import annotations

import errno
import ipaddress
import json
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

from ddpnet.net.netlink import MAIN_TABLES, Answer, get_route, table_name
from ddpnet.subproc import run_command

_UNUSABLE = {"unreachable", "blackhole", "prohibit", "throw"}


@dataclass(frozen=True)
class Route:
    iface: str
    src: str
    via: str | None
    #: the destination looked up (an address, never a name)
    dst: str = ""
    #: the destination is an address of this host (the kernel answers ``dev lo``)
    local: bool = False


def parse_route_get(text: str, dst: str) -> Route | None:
    """Parse ``ip -j route get DST`` output; None when the kernel has no usable route."""
    try:
        entries = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(entries, list) or not entries:
        return None
    entry = entries[0]
    rtype = entry.get("type", "unicast")
    if rtype in _UNUSABLE or "dev" not in entry:
        return None
    return Route(
        iface=str(entry["dev"]),
        src=str(entry.get("prefsrc", "")),
        via=entry.get("gateway"),
        dst=dst,
        local=rtype == "local",
    )


def from_answer(answer: Answer, dst: str) -> Route | None:
    """The route in a netlink answer, as :func:`parse_route_get` reads ``ip``'s (pure but for
    naming the interface's index); None for a refusal or an unusable route."""
    if answer.error or answer.type in _UNUSABLE or answer.oif is None:
        return None
    try:
        iface = socket.if_indextoname(answer.oif)
    except OSError:  # the interface went away between the answer and now
        return None
    return Route(iface=iface, src=answer.prefsrc or "", via=answer.gateway, dst=dst,
                 local=answer.type == "local")


def _zoned_route(dst: str) -> Route | None:
    """A link-local address with its zone (``fe80::1%eth0``) is reached on that interface
    and no other (neither netlink's request nor ``ip route get`` takes a zone); None when no
    interface here has that name (edge: lists the interfaces)."""
    from ddpnet.net.interfaces import list_interfaces

    ip, _, zone = dst.partition("%")
    iface = next((i for i in list_interfaces() if zone in (i.name, _index(i.name))), None)
    if iface is None:
        return None
    src = next((a.ip for a in iface.addresses if a.family == 6 and a.is_link_local), "")
    return Route(iface=iface.name, src=src, via=None, dst=dst, local=iface.owns(ip))


def _index(name: str) -> str:
    try:
        return str(socket.if_nametoindex(name))
    except OSError:
        return ""


def _route_by_connect(dst: str) -> Route | None:
    """Fallback without iproute2: a connected UDP socket tells the source address."""
    from ddpnet.net.interfaces import list_interfaces

    family = socket.AF_INET6 if ipaddress.ip_address(dst).version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((dst, 9))
            src = s.getsockname()[0]
    except OSError:
        return None
    local = any(i.owns(dst) for i in list_interfaces())
    for iface in list_interfaces():
        if iface.owns(src):
            return Route(iface="lo" if local else iface.name, src=src, via=None, dst=dst,
                         local=local and not ipaddress.ip_address(dst).is_loopback)
    return None


def route_to(addr: str, timeout: float = 5.0) -> Route | None:
    """The route to ``addr`` (an IP address), or None when there is none (edge)."""
    ipaddress.ip_address(addr)  # ValueError on a name: resolve first (names.resolve_host)
    if "%" in addr:
        return _zoned_route(addr)
    answer = get_route(addr, timeout=timeout)
    if answer is not None:
        return from_answer(answer, addr)
    ip = shutil.which("ip")
    if ip is None:
        return _route_by_connect(addr)
    proc = run_command([ip, "-j", "route", "get", addr], timeout)
    if proc is None:
        return _route_by_connect(addr)
    if proc.returncode != 0:
        return None  # "Network is unreachable" and friends
    return parse_route_get(proc.stdout, addr)


def parse_default_route(text: str) -> str | None:
    """The interface of the IPv4 default route in ``/proc/net/route`` text (pure), or None.

    Columns: Iface Destination Gateway ...; the default route has destination 00000000.
    """
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 2 and fields[1] == "00000000":
            return fields[0]
    return None


def default_route_iface(proc: Path = Path("/proc")) -> str | None:
    """The interface carrying this host's default route, or None (edge; ``proc`` is a root
    for tests and for images under ``tune --root``)."""
    try:
        text = (proc / "net" / "route").read_text()
    except (OSError, UnicodeDecodeError):
        return None
    return parse_default_route(text)


#: neighbour states meaning "nobody answered ARP / neighbour discovery"
NEIGH_DEAD = ("FAILED", "INCOMPLETE")


def parse_neigh(text: str) -> str | None:
    """The state of the first entry of ``ip -j neigh show to ADDR`` (pure), e.g. REACHABLE."""
    try:
        entries = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(entries, list) or not entries:
        return None
    state = entries[0].get("state")
    if isinstance(state, list) and state:
        return str(state[0])
    return str(state) if state else None


def neighbor_state(addr: str, timeout: float = 5.0) -> str | None:
    """The kernel's neighbour-cache state for an on-link address (edge; sends nothing).

    After connects that timed out, FAILED/INCOMPLETE means no host has the address, while
    REACHABLE/STALE/DELAY means the host answered ARP and only the port is dropped.
    """
    ip = shutil.which("ip")
    if ip is None:
        return None
    proc = run_command([ip, "-j", "neigh", "show", "to", addr], timeout)
    return parse_neigh(proc.stdout) if proc is not None and proc.returncode == 0 else None


@dataclass(frozen=True)
class Lookup:
    """The kernel's answer to ``ip route get DST from SRC [iif IFACE]`` (a lookup that sends
    nothing): the route, or the error that stands for the kernel dropping such a packet.

    With ``iif`` it is the lookup a packet arriving on that interface gets, reverse-path
    filter included: ``Invalid argument`` (``Invalid cross-device link`` on older kernels)
    is ``rp_filter`` refusing it. Without, it is the route a reply from SRC takes (policy
    rules such as ``from SRC lookup T`` included: ``table`` names a table other than main).
    """

    command: str
    route: Route | None
    error: str = ""
    table: str = ""

    @property
    def ok(self) -> bool:
        return self.route is not None and not self.error

    def to_dict(self) -> dict[str, object]:
        r = self.route
        return {"command": self.command, "ok": self.ok, "error": self.error,
                "table": self.table, "dev": r.iface if r else None, "via": r.via if r else None}


def parse_lookup(command: str, returncode: int, stdout: str, stderr: str, dst: str) -> Lookup:
    """A :class:`Lookup` from ``ip -j route get`` output (pure)."""
    if returncode != 0:
        text = " ".join(stderr.replace("RTNETLINK answers:", "").split()) or f"exit {returncode}"
        return Lookup(command, None, text)
    route = parse_route_get(stdout, dst)
    table = ""
    try:
        entries = json.loads(stdout)
        if isinstance(entries, list) and entries and isinstance(entries[0], dict):
            table = str(entries[0].get("table", ""))
    except json.JSONDecodeError:
        pass
    if route is None:
        return Lookup(command, None, "no usable route (unreachable, blackhole or prohibit)")
    return Lookup(command, route, "", "" if table in ("main", "local") else table)


def lookup_of(command: str, answer: Answer, dst: str) -> Lookup:
    """A :class:`Lookup` from a netlink answer, as :func:`parse_lookup` reads ``ip``'s (pure
    but for the names of an interface's index and of a table)."""
    if answer.error:
        return Lookup(command, None, answer.reason)
    route = from_answer(answer, dst)
    if route is None:
        return Lookup(command, None, "no usable route (unreachable, blackhole or prohibit)")
    table = "" if answer.table in (0, *MAIN_TABLES) else table_name(answer.table)
    return Lookup(command, route, "", table)


def lookup(dst: str, src: str, iif: str | None = None, timeout: float = 2.0) -> Lookup | None:
    """What the kernel answers ``ip route get DST from SRC [iif IFACE]`` (edge, bounded):
    over netlink, else from iproute2; None when neither answers in ``timeout``."""
    tail = ["from", src, *(["iif", iif] if iif else [])]
    command = " ".join(["ip", "route", "get", dst, *tail])
    answer = get_route(dst, src, iif, timeout)
    if answer is not None and iif and answer.error == errno.ENODEV:
        return Lookup(command, None, f'Cannot find device "{iif}"')  # as ip says it
    if answer is not None:
        return lookup_of(command, answer, dst)
    ip = shutil.which("ip")
    if ip is None:
        return None
    proc = run_command([ip, "-j", "route", "get", dst, *tail], timeout)
    if proc is None:
        return None
    return parse_lookup(command, proc.returncode, proc.stdout, proc.stderr, dst)


# ---- who else answers ARP for an address (IPv4 duplicate address detection) -----------------

_ARP_ETHERTYPE = 0x0806


def arp_probe(own_mac: bytes, address: str) -> bytes:
    """An ARP probe for ``address`` (RFC 5227: sender address 0.0.0.0, so no host updates
    its cache from it), broadcast from ``own_mac`` (pure)."""
    import struct

    target = ipaddress.IPv4Address(address).packed
    return (b"\xff" * 6 + own_mac + struct.pack("!H", _ARP_ETHERTYPE)
            + struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + own_mac + b"\0" * 4
            + b"\0" * 6 + target)


def parse_arp_reply(frame: bytes, address: str, own_mac: bytes) -> str | None:
    """The MAC (``aa:bb:...``) of another host answering ARP for ``address`` in an Ethernet
    frame, or None (pure)."""
    import struct

    if len(frame) < 42 or struct.unpack("!H", frame[12:14])[0] != _ARP_ETHERTYPE:
        return None
    op = struct.unpack("!H", frame[20:22])[0]
    sha, spa = frame[22:28], frame[28:32]
    if op != 2 or spa != ipaddress.IPv4Address(address).packed or sha == own_mac:
        return None
    return ":".join(f"{b:02x}" for b in sha)


def address_owners(iface: str, address: str, timeout: float = 1.0,
                   sys_class: Path = Path("/sys/class/net")) -> tuple[str, ...] | None:
    """The MACs of other hosts on ``iface``'s segment that answer ARP for ``address`` (this
    host's own: any answer is a duplicate), or None when it cannot be asked (not root, not
    Ethernet, IPv6) (edge: two probes, bounded by ``timeout``)."""
    import time

    try:
        ipaddress.IPv4Address(address)
        own = bytes.fromhex((sys_class / iface / "address").read_text().strip()
                            .replace(":", ""))
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(_ARP_ETHERTYPE))
    except (OSError, ValueError, AttributeError):
        return None
    if len(own) != 6:
        sock.close()
        return None
    found: dict[str, None] = {}
    with sock:
        try:
            sock.bind((iface, 0))
            for _ in range(2):
                sock.send(arp_probe(own, address))
            deadline = time.monotonic() + timeout
            while (left := deadline - time.monotonic()) > 0:
                sock.settimeout(left)
                mac = parse_arp_reply(sock.recv(128), address, own)
                if mac:
                    found[mac] = None
        except TimeoutError:
            pass
        except OSError:
            return None
    return tuple(found)

"""The route this host would use to reach an address: interface, source address, gateway.

The kernel's answer (``ip -j route get``, a routing-table lookup that sends nothing) is the
truth gloo and NCCL will live with, so selection starts from it. ``parse_route_get`` is pure;
``route_to`` is the edge, with a UDP ``connect`` fallback (also sends nothing) where
iproute2 is absent. The default route comes from ``<proc>/net/route`` (``parse_default_route``
pure, ``default_route_iface`` the edge).
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

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

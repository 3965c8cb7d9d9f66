"""This host's side of a check, before the net/doctor pieces are wired: the selected
interface and address toward MASTER_ADDR, and the facts ranks compare (edge: psutil, sockets).
``ddpnet.net`` / ``ddpnet.doctor`` replace these when installed (see ``deps``)."""

from __future__ import annotations

import ipaddress
import platform
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ddpnet.config import DistConfig


@dataclass(frozen=True)
class Selected:
    """The interface and address this rank uses, and the variables that pin it."""

    interface: str
    address: str
    reason: str
    pinned: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    #: (cause, what, fix) for each variable that cannot work (e.g. GLOO_SOCKET_IFNAME=lo
    #: across nodes); reported through facts so rank 0 names it with the host
    problems: tuple[tuple[str, str, str], ...] = ()


def _iface_addresses() -> dict[str, list[tuple[str, str]]]:
    import psutil

    out: dict[str, list[tuple[str, str]]] = {}
    for name, addrs in psutil.net_if_addrs().items():
        for a in addrs:
            if a.family == socket.AF_INET and a.netmask:
                out.setdefault(name, []).append((a.address, a.netmask))
    return out


def _source_toward(host: str) -> str | None:
    try:
        infos = socket.getaddrinfo(host, 9, socket.AF_INET, socket.SOCK_DGRAM)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(infos[0][4])
            return str(s.getsockname()[0])
    except OSError:
        return None


def select_simple(cfg: DistConfig, environ: Mapping[str, str]) -> Selected:
    """GLOO_SOCKET_IFNAME when pinned, else the source address of the route to the master."""
    addrs = _iface_addresses()
    pinned = environ.get("GLOO_SOCKET_IFNAME") or environ.get("NCCL_SOCKET_IFNAME")
    if pinned:
        name = pinned.split(",")[0].lstrip("=^")
        if name in addrs:
            return Selected(name, addrs[name][0][0], f"pinned by GLOO_SOCKET_IFNAME={pinned}",
                            True, {"GLOO_SOCKET_IFNAME": name})
    src = _source_toward(cfg.master_addr) or "127.0.0.1"
    for name, pairs in addrs.items():
        if any(a == src for a, _ in pairs):
            return Selected(name, src, f"routes to MASTER_ADDR {cfg.master_addr} via src {src}",
                            False, {"GLOO_SOCKET_IFNAME": name})
    return Selected("lo", src, "fallback", False, {})


def basic_facts(sel: Selected) -> dict[str, Any]:
    """Versions, hostname and the selected interface's MTU and subnet."""
    import psutil

    facts: dict[str, Any] = {
        "python": platform.python_version(),
        "hostname": socket.gethostname(),
        "interface": sel.interface,
        "address": sel.address,
        "interface_pinned": sel.pinned,
        "selection_problems": [list(p) for p in sel.problems],
        "time": time.time(),
    }
    # the installed version without importing torch (this runs in a thread while the main
    # thread imports it; the doctor's probe adds CUDA and NCCL)
    from importlib import metadata

    try:
        facts["torch"] = metadata.version("torch")
    except metadata.PackageNotFoundError:
        facts["torch"] = None
    stats = psutil.net_if_stats().get(sel.interface)
    facts["mtu"] = stats.mtu if stats else None
    for a, mask in _iface_addresses().get(sel.interface, []):
        if a == sel.address:
            facts["subnet"] = str(ipaddress.ip_network(f"{a}/{mask}", strict=False))
    try:
        resolved = {ai[4][0] for ai in socket.getaddrinfo(socket.gethostname(), None)}
        facts["hostname_loopback"] = bool(resolved) and all(
            ipaddress.ip_address(str(x).split("%")[0]).is_loopback for x in resolved)
    except OSError:
        facts["hostname_loopback"] = None
    return facts

"""The edge that reads the host for ``ddpnet tune``: files under ``--root``, the live kernel
(sysctls, SELinux, firewalls) only when the root is ``/``, and the interface as
:func:`ddpnet.net.select.choose_for_host` chooses it (--iface, the user's *_SOCKET_IFNAME, the
cluster subnet, the route to MASTER_ADDR, the default route, the first usable NIC).

Under another root the root's own files win where they say something: the sysctl values its
sysctl.d/sysctl.conf set, the static address and MTU its network configuration gives the
chosen interface, its hostname. What only a running system knows (the interfaces, the link
speed, the route selection, SELinux's live mode) stays the live host's, and
``HostFacts.sources`` says for each fact where it came from."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ddpnet.errors import ConfigError
from ddpnet.tune.model import HostFacts, IPNetwork
from ddpnet.tune.sysctl import all_keys

PROBE_TIMEOUT_S = 5
LIVE = "live host"


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError,
            UnicodeDecodeError):
        return None


def _in_root(root: Path, rel: str) -> Path | None:
    """``rel`` under ``root`` with symlinks resolved, or None when it leads out of the root
    (tune never reads outside ``--root``)."""
    from ddpnet.tune.apply import under

    try:
        return under(root, rel)
    except ConfigError:
        return None


def _read_in(root: Path, rel: str) -> str | None:
    path = _in_root(root, rel)
    return None if path is None else _read(path)


def _tail(path: Path | None, size: int = 1 << 20) -> str | None:
    """The last ``size`` bytes of a log (recent denials), or None."""
    if path is None:
        return None
    try:
        with path.open("rb") as fh:
            fh.seek(max(0, path.stat().st_size - size))
            return fh.read().decode(errors="replace")
    except OSError:
        return None


def _glob(root: Path, pattern: str) -> list[str]:
    """Files matching ``pattern`` under the root, as absolute paths on the target system."""
    base = root.resolve()
    return sorted("/" + str(p.relative_to(base)) for p in base.glob(pattern))


@dataclass(frozen=True)
class _Iface:
    """The live interface selection's result."""

    name: str
    reason: str
    address: str | None
    mtu: int | None
    speed_mbps: int | None


def _choose_iface(iface: str | None, subnet: IPNetwork | None,
                  environ: Mapping[str, str] | None) -> _Iface:
    """The interface as ``ddpnet.net`` selects it on this (live) host."""
    from ddpnet.net.interfaces import list_interfaces
    from ddpnet.net.select import Ask, choose_for_host

    interfaces = list_interfaces()
    env = os.environ if environ is None else environ
    ask = Ask(flag=iface, flag_name="--iface", subnet=subnet, loopback_ok=False)
    choice = choose_for_host(ask, environ=env, route_master=bool(env.get("MASTER_ADDR")),
                             interfaces=interfaces)
    if choice.name is None:
        raise ConfigError(f"no usable network interface found ({choice.reason})",
                          "pass --iface NAME (the interface on the cluster network)")
    chosen = next(i for i in interfaces if i.name == choice.name)
    # the selector's address: the one in the subnet, the route's source toward MASTER_ADDR
    address = choice.address or next(
        (a.ip for a in chosen.addresses if (subnet is None or a.family == subnet.version)
         and not a.is_link_local and not a.is_loopback), None)
    return _Iface(chosen.name, choice.reason, address, chosen.mtu or None, chosen.speed_mbps)


@dataclass(frozen=True)
class _Kernel:
    """The sysctl values "now" and where they came from."""

    values: Mapping[str, str]
    source: str


def _kernel(root: Path, live: bool) -> _Kernel:
    """The live values in /proc/sys, or under another root what its sysctl files set."""
    from ddpnet.tune import sysctl

    if live:
        values: dict[str, str] = {}
        for key in (*all_keys(), "net.ipv4.ip_local_port_range"):
            text = _read(Path("/proc/sys", *key.split(".")))
            if text is not None:
                values[key] = " ".join(text.split())
        return _Kernel(values, f"{LIVE}: /proc/sys")
    found = [p.lstrip("/") for d in sysctl.CONF_DIRS for p in _glob(root, f"{d}/*.conf")]
    found += [sysctl.CONF_MAIN] if _in_root(root, sysctl.CONF_MAIN) else []
    order = [p for p in sysctl.load_order(found) if _read_in(root, p) is not None]
    texts = [_read_in(root, p) or "" for p in order]
    if not order:
        return _Kernel({}, f"root {root}: no sysctl files, kernel defaults")
    return _Kernel(sysctl.configured(texts),
                   f"root {root}: " + ", ".join("/" + p for p in order))


def _configured(root: Path, distro: str, iface: str,
                subnet: IPNetwork | None) -> tuple[str | None, int | None, str, str]:
    """The address and MTU the root's network configuration gives ``iface``."""
    from ddpnet.tune.netconf import CONFIG_GLOBS, read_configured

    files: dict[str, str] = {}
    for pattern, _ in CONFIG_GLOBS[distro]:
        for path in _glob(root, pattern):
            text = _read_in(root, path)
            if text is not None:
                files[path] = text
    return read_configured(distro, files, iface, subnet)


def gather(
    root: Path,
    *,
    iface: str | None = None,
    subnet: IPNetwork | None = None,
    distro: str,
    environ: Mapping[str, str] | None = None,
) -> HostFacts:
    """Read what the renderers need, and where each fact came from."""
    from ddpnet.tune.plan import files_to_read

    live = root.resolve() == Path("/")
    nic = _choose_iface(iface, subnet, environ)
    kernel = _kernel(root, live)
    where = LIVE if live else f"root {root}"
    sources = {"iface": f"{LIVE}: interface selection", "speed_mbps": LIVE,
               "sysctl": kernel.source, "files": where,
               "selinux_config": f"{where}: /etc/selinux/config",
               "audit_log": f"{where}: /var/log/audit/audit.log",
               "selinux_enforce": f"{LIVE}: /sys/fs/selinux" if live else
               "none: the root is not the running system"}
    hostname = _hostname(root, live, sources)
    address, mtu = nic.address, nic.mtu
    sources["address"] = sources["mtu"] = LIVE
    if not live:
        conf_addr, conf_mtu, addr_file, mtu_file = _configured(root, distro, nic.name, subnet)
        if conf_addr is not None:
            address, sources["address"] = conf_addr, f"root {root}: {addr_file}"
        if conf_mtu is not None:
            mtu, sources["mtu"] = conf_mtu, f"root {root}: {mtu_file}"
    port_range, reserved = _ports(kernel, sources)
    files = {p: t for p in files_to_read(distro, nic.name)
             if (t := _read_in(root, p)) is not None}
    return HostFacts(
        hostname=hostname, iface=nic.name, iface_reason=nic.reason, address=address,
        mtu=mtu, speed_mbps=nic.speed_mbps, port_range=port_range, reserved_ports=reserved,
        sysctl_now={k: v for k, v in kernel.values.items() if k in set(all_keys())},
        selinux_enforce=_read(Path("/sys/fs/selinux/enforce")) if live else None,
        selinux_config=_read_in(root, "etc/selinux/config"), files=files,
        audit_log=_tail(_in_root(root, "var/log/audit/audit.log")), sources=sources,
    )


def _hostname(root: Path, live: bool, sources: dict[str, str]) -> str:
    """The root's /etc/hostname under another root, else this host's name."""
    name = "" if live else (_read_in(root, "etc/hostname") or "").strip()
    sources["hostname"] = f"root {root}: /etc/hostname" if name else LIVE
    return name or socket.gethostname()


def _ports(kernel: _Kernel, sources: dict[str, str]) -> tuple[tuple[int, int], str]:
    """ip_local_port_range and ip_local_reserved_ports now; the kernel's defaults where
    neither the live kernel nor the root's files say."""
    default = "kernel default"
    text = kernel.values.get("net.ipv4.ip_local_port_range", "")
    parts = text.split()
    ok = (len(parts) == 2 and all(p.isdigit() and len(p) <= 5 for p in parts)
          and 1 <= int(parts[0]) <= int(parts[1]) <= 65535)
    port_range = (int(parts[0]), int(parts[1])) if ok else (32768, 60999)
    sources["port_range"] = kernel.source if ok else default
    reserved = kernel.values.get("net.ipv4.ip_local_reserved_ports")
    sources["reserved_ports"] = kernel.source if reserved is not None else default
    return port_range, reserved or ""

"""The edge that reads the host for ``ddpnet tune``: files under ``--root``, the live kernel
(sysctls, SELinux, firewalls) only when the root is ``/``, and the interface as
:func:`ddpnet.net.select.choose_for_host` chooses it (--iface, the user's *_SOCKET_IFNAME, the
cluster subnet, the route to MASTER_ADDR, the default route, the first usable NIC)."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path

from ddpnet.errors import ConfigError
from ddpnet.tune.model import HostFacts, IPNetwork
from ddpnet.tune.sysctl import all_keys

PROBE_TIMEOUT_S = 5


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (FileNotFoundError, NotADirectoryError, PermissionError, UnicodeDecodeError):
        return None


def _tail(path: Path, size: int = 1 << 20) -> str | None:
    """The last ``size`` bytes of a log (recent denials), or None."""
    try:
        with path.open("rb") as fh:
            fh.seek(max(0, path.stat().st_size - size))
            return fh.read().decode(errors="replace")
    except OSError:
        return None


def gather(
    root: Path,
    *,
    iface: str | None = None,
    subnet: IPNetwork | None = None,
    distro: str,
    environ: Mapping[str, str] | None = None,
) -> HostFacts:
    """Read what the renderers need; the network view is always this host's."""
    from ddpnet.net.interfaces import list_interfaces
    from ddpnet.net.select import Ask, choose_for_host
    from ddpnet.tune.plan import files_to_read

    live = root.resolve() == Path("/")
    interfaces = list_interfaces()
    env = os.environ if environ is None else environ
    ask = Ask(flag=iface, flag_name="--iface", subnet=subnet, loopback_ok=False)
    choice = choose_for_host(ask, environ=env, route_master=bool(env.get("MASTER_ADDR")),
                             interfaces=interfaces)
    if choice.name is None:
        raise ConfigError(f"no usable network interface found ({choice.reason})",
                          "pass --iface NAME (the interface on the cluster network)")
    chosen, why = next(i for i in interfaces if i.name == choice.name), choice.reason
    # the selector's address: the one in the subnet, the route's source toward MASTER_ADDR
    address = choice.address or next(
        (a.ip for a in chosen.addresses if (subnet is None or a.family == subnet.version)
         and not a.is_link_local and not a.is_loopback), None)
    hostname = (_read(root / "etc/hostname") or "").strip() if not live else ""
    hostname = hostname or socket.gethostname()
    proc_sys = Path("/proc/sys")
    # an image under --root gets the kernel's defaults, not this machine's values
    port_range = tuple(int(x) for x in ((_read(proc_sys / "net/ipv4/ip_local_port_range")
                                         if live else None) or "32768 60999").split())
    sysctl_now: dict[str, str] = {}
    if live:
        for key in all_keys():
            text = _read(proc_sys / key.replace(".", "/"))
            if text is not None:
                sysctl_now[key] = " ".join(text.split())
    enforce = _read(Path("/sys/fs/selinux/enforce")) if live else None
    files = {p: t for p in files_to_read(distro, chosen.name)
             if (t := _read(root / p.lstrip("/"))) is not None}
    return HostFacts(
        hostname=hostname, iface=chosen.name, iface_reason=why, address=address,
        mtu=chosen.mtu or None, speed_mbps=chosen.speed_mbps,
        port_range=(port_range[0], port_range[1]),
        reserved_ports=((_read(proc_sys / "net/ipv4/ip_local_reserved_ports") or "").strip()
                        if live else ""),
        sysctl_now=sysctl_now, selinux_enforce=enforce,
        selinux_config=_read(root / "etc/selinux/config"), files=files,
        audit_log=_tail(root / "var/log/audit/audit.log"),
    )

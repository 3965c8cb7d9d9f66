"""Static IP renderers, one per network stack: ifcfg (rhel7), a NetworkManager keyfile plus
the equivalent nmcli (rhel8/9), netplan (ubuntu), ifupdown (debian).

They write the configuration and never bring the interface down and up themselves: the
address may be the one this SSH session runs over. The activation command, with a rollback
where the stack has one (``netplan try``), is printed for the user.
"""

from __future__ import annotations

import fnmatch
import importlib
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

from ddpnet.tune.model import HostFacts, IPNetwork, Part, TuneRequest

#: distro -> renderer module
RENDERERS: dict[str, str] = {
    "rhel7": "ddpnet.tune.netconf.ifcfg",
    "rhel8": "ddpnet.tune.netconf.nm",
    "rhel9": "ddpnet.tune.netconf.nm",
    "ubuntu": "ddpnet.tune.netconf.netplan",
    "debian": "ddpnet.tune.netconf.ifupdown",
}


#: distro -> (glob under the root, the netconf module that reads it) for the files that
#: configure interfaces, in the order the distribution reads them
CONFIG_GLOBS: dict[str, tuple[tuple[str, str], ...]] = {
    "rhel7": (("etc/sysconfig/network-scripts/ifcfg-*", "ifcfg"),),
    "rhel8": (("etc/NetworkManager/system-connections/*.nmconnection", "nm"),
              ("etc/sysconfig/network-scripts/ifcfg-*", "ifcfg")),
    "ubuntu": (("etc/netplan/*.yaml", "netplan"), ("etc/netplan/*.yml", "netplan")),
    "debian": (("etc/network/interfaces", "ifupdown"), ("etc/network/interfaces.d/*", "ifupdown")),
}
CONFIG_GLOBS["rhel9"] = CONFIG_GLOBS["rhel8"]


@dataclass(frozen=True)
class Configured:
    """What a configuration file gives an interface: static addresses (``ADDR/PREFIX``
    as written) and the MTU."""

    addresses: tuple[str, ...] = ()
    mtu: int | None = None


def as_mtu(text: str | None) -> int | None:
    value = (text or "").strip().strip("'\"")
    return int(value) if value.isdigit() and len(value) <= 5 and 68 <= int(value) <= 65535 \
        else None


def read_configured(distro: str, files: Mapping[str, str], iface: str,
                    subnet: IPNetwork | None = None) -> tuple[str | None, int | None, str, str]:
    """``(address, mtu, address_file, mtu_file)`` the files (path -> text, in reading order)
    give ``iface``: the first address in ``subnet`` (or the first usable one), the last MTU
    (later files win, as in netplan); None/"" where no file says. Pure."""
    address, mtu, where_addr, where_mtu = None, None, "", ""
    for path, text in files.items():
        module = next((m for pattern, m in CONFIG_GLOBS[distro]
                       if fnmatch.fnmatch(path.lstrip("/"), pattern)), None)
        if module is None:
            continue
        reader = importlib.import_module(f"ddpnet.tune.netconf.{module}")
        found: Configured | None = reader.read_config(text, iface)
        if found is None:
            continue
        if found.mtu is not None:
            mtu, where_mtu = found.mtu, path
        ip = _pick(found.addresses, subnet)
        if address is None and ip is not None:
            address, where_addr = ip, path
    return address, mtu, where_addr, where_mtu


def _pick(addresses: tuple[str, ...], subnet: IPNetwork | None) -> str | None:
    """The address (no prefix) in ``subnet``, else the first that is not link-local or
    loopback (any, without a subnet)."""
    usable = []
    for a in addresses:
        try:
            ip = ipaddress.ip_interface(a.strip()).ip
        except ValueError:
            continue
        if not (ip.is_link_local or ip.is_loopback):
            usable.append(ip)
    inside = [ip for ip in usable if subnet is not None and ip in subnet]
    pool = inside or [ip for ip in usable if subnet is None or ip.version == subnet.version]
    return str(pool[0]) if pool else None


def common_warnings(req: TuneRequest, facts: HostFacts) -> tuple[str, ...]:
    out: list[str] = []
    ip = req.static_ip
    if ip is not None and req.cluster_subnet is not None and ip.ip not in req.cluster_subnet:
        out.append(f"static address {ip.ip} is not in the cluster subnet {req.cluster_subnet}: "
                   "the firewall rules will not admit this node's peers' view of it")
    if facts.mtu is None:
        out.append(f"MTU of {facts.iface} unknown: not set in the static configuration")
    return tuple(out)


def render(req: TuneRequest, facts: HostFacts) -> Part:
    if req.static_ip is None:
        return Part(name="static-ip", notes=("no --static-ip: network configuration untouched",))
    module = importlib.import_module(RENDERERS[req.distro])
    part: Part = module.render(req, facts)
    return part

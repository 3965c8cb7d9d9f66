"""rhel7: /etc/sysconfig/network-scripts/ifcfg-IF (initscripts and NetworkManager's ifcfg-rh
plugin both read it). HWADDR and UUID of an existing file are kept so the match stays."""

from __future__ import annotations

import re

from ddpnet.tune.model import FileChange, HostFacts, Part, TuneRequest
from ddpnet.tune.netconf import Configured, as_mtu, common_warnings

KEEP = ("HWADDR", "UUID")


def path_for(iface: str) -> str:
    return f"/etc/sysconfig/network-scripts/ifcfg-{iface}"


def parse(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and not key.startswith("#"):
            out[key.strip()] = value.strip().strip('"')
    return out


def read_config(text: str, iface: str) -> Configured | None:
    """The static addresses and MTU an ifcfg file gives its interface (pure)."""
    kv = parse(text)
    if kv.get("DEVICE", iface) != iface:
        return None
    addrs = [f"{kv[k]}/{kv.get('PREFIX' + k[6:]) or kv.get('NETMASK' + k[6:]) or '32'}"
             for k in sorted(kv) if re.fullmatch(r"IPADDR\d*", k)]
    addrs += [kv["IPV6ADDR"]] if "IPV6ADDR" in kv else []
    addrs += kv.get("IPV6ADDR_SECONDARIES", "").split()
    return Configured(tuple(addrs), as_mtu(kv.get("MTU")))


def render_ifcfg(req: TuneRequest, facts: HostFacts, existing: str | None) -> str:
    assert req.static_ip is not None
    ip = req.static_ip
    v4 = ip.version == 4
    old = parse(existing or "")
    lines = ["# Written by `ddpnet tune` (static address for training traffic).",
             f"DEVICE={facts.iface}", f"NAME={facts.iface}", "TYPE=Ethernet", "ONBOOT=yes",
             "BOOTPROTO=none"]
    lines += [f"{k}={old[k]}" for k in KEEP if k in old]
    if v4:
        lines += [f"IPADDR={ip.ip}", f"PREFIX={ip.network.prefixlen}"]
        if req.gateway:
            lines += [f"GATEWAY={req.gateway}", "DEFROUTE=yes"]
    else:
        lines += ["IPV6INIT=yes", "IPV6_AUTOCONF=no", f"IPV6ADDR={ip}"]
        if req.gateway:
            lines.append(f"IPV6_DEFAULTGW={req.gateway}")
    lines += [f"DNS{i}={d}" for i, d in enumerate(req.dns, 1)]
    if facts.mtu:
        lines.append(f"MTU={facts.mtu}")
    return "\n".join(lines) + "\n"


def render(req: TuneRequest, facts: HostFacts) -> Part:
    path = path_for(facts.iface)
    content = render_ifcfg(req, facts, facts.files.get(path))
    return Part(
        name="static-ip",
        files=(FileChange(path, content, 0o644, f"static {req.static_ip} on {facts.iface}"),),
        notes=(f"activate (from a console, not over {facts.iface}): "
               f"ifdown {facts.iface}; ifup {facts.iface}",),
        warnings=common_warnings(req, facts),
    )

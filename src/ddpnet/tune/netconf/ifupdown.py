"""debian: /etc/network/interfaces.d/ddpnet-IF (ifupdown; Debian's interfaces file sources
interfaces.d)."""

from __future__ import annotations

import re

from ddpnet.tune.model import FileChange, HostFacts, Part, TuneRequest
from ddpnet.tune.netconf import Configured, as_mtu, common_warnings

MAIN = "/etc/network/interfaces"


def path_for(iface: str) -> str:
    return f"/etc/network/interfaces.d/ddpnet-{iface}"


#: words that start a new stanza (anything else indented belongs to the open ``iface``)
_STANZAS = ("iface", "auto", "allow-", "source", "mapping", "no-auto-down", "no-scripts")


def read_config(text: str, iface: str) -> Configured | None:
    """The static addresses and MTU the ``iface IF inet[6] static`` stanzas give (pure)."""
    addrs: list[str] = []
    mtu: int | None = None
    found, inside, netmask = False, False, ""
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if words[0].startswith(_STANZAS):
            inside = words[0] == "iface" and len(words) >= 4 and words[1] == iface
            found = found or inside
        elif inside and words[0] == "address" and len(words) > 1:
            addrs.append(words[1])
        elif inside and words[0] == "netmask" and len(words) > 1:
            netmask = words[1]
        elif inside and words[0] == "mtu" and len(words) > 1:
            mtu = as_mtu(words[1])
    if netmask:
        addrs = [a if "/" in a else f"{a}/{netmask}" for a in addrs]
    return Configured(tuple(addrs), mtu) if found else None


def render_stanza(req: TuneRequest, facts: HostFacts) -> str:
    assert req.static_ip is not None
    ip = req.static_ip
    fam = "inet" if ip.version == 4 else "inet6"
    lines = ["# Written by `ddpnet tune` (static address for training traffic).",
             f"auto {facts.iface}", f"iface {facts.iface} {fam} static", f"    address {ip}"]
    if req.gateway:
        lines.append(f"    gateway {req.gateway}")
    if req.dns:
        lines.append("    dns-nameservers " + " ".join(req.dns))
    if facts.mtu:
        lines.append(f"    mtu {facts.mtu}")
    return "\n".join(lines) + "\n"


def render(req: TuneRequest, facts: HostFacts) -> Part:
    warnings = list(common_warnings(req, facts))
    main = facts.files.get(MAIN)
    if main is not None and re.search(rf"^\s*iface\s+{re.escape(facts.iface)}\s", main, re.M):
        warnings.append(f"{MAIN} configures {facts.iface} too: remove that stanza, ifupdown "
                        "refuses duplicates")
    if main is not None and "interfaces.d" not in main:
        warnings.append(f"{MAIN} does not source /etc/network/interfaces.d: add "
                        "`source /etc/network/interfaces.d/*`")
    return Part(
        name="static-ip",
        files=(FileChange(path_for(facts.iface), render_stanza(req, facts), 0o644,
                          f"static {req.static_ip} on {facts.iface}"),),
        notes=(f"activate (from a console, not over {facts.iface}): "
               f"ifdown {facts.iface}; ifup {facts.iface}",),
        warnings=tuple(warnings),
    )

"""debian: /etc/network/interfaces.d/ddpnet-IF (ifupdown; Debian's interfaces file sources
interfaces.d)."""

from __future__ import annotations

import re

from ddpnet.tune.model import FileChange, HostFacts, Part, TuneRequest
from ddpnet.tune.netconf import common_warnings

MAIN = "/etc/network/interfaces"


def path_for(iface: str) -> str:
    return f"/etc/network/interfaces.d/ddpnet-{iface}"


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

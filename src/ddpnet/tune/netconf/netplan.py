"""ubuntu: /etc/netplan/90-ddpnet.yaml (mode 0600, as netplan wants), activated with
``netplan try`` so a wrong address rolls back by itself."""

from __future__ import annotations

import re

from ddpnet.tune.model import FileChange, HostFacts, Part, TuneRequest
from ddpnet.tune.netconf import common_warnings

PATH = "/etc/netplan/90-ddpnet.yaml"


def render_yaml(req: TuneRequest, facts: HostFacts) -> str:
    assert req.static_ip is not None
    ip = req.static_ip
    lines = [
        "# Written by `ddpnet tune` (static address for training traffic).",
        "network:",
        "  version: 2",
        "  ethernets:",
        f"    {facts.iface}:",
        f"      dhcp{ip.version}: false",
        f'      addresses: ["{ip}"]',
    ]
    if req.gateway:
        default = "0.0.0.0/0" if ip.version == 4 else "::/0"
        lines += ["      routes:", f'        - to: "{default}"', f'          via: "{req.gateway}"']
    if req.dns:
        lines += ["      nameservers:",
                  "        addresses: [" + ", ".join(f'"{d}"' for d in req.dns) + "]"]
    if facts.mtu:
        lines.append(f"      mtu: {facts.mtu}")
    return "\n".join(lines) + "\n"


def render(req: TuneRequest, facts: HostFacts) -> Part:
    return Part(
        name="static-ip",
        files=(FileChange(PATH, render_yaml(req, facts), 0o600,
                          f"static {req.static_ip} on {facts.iface}"),),
        notes=("activate with `netplan try` (rolls back after 120 s unless you confirm), "
               "then `netplan apply`",
               f"other files in /etc/netplan that configure {facts.iface} merge with this one "
               "(later files win for scalars, lists such as addresses add up)"),
        warnings=common_warnings(req, facts) + cloud_init_warning(facts),
    )


def cloud_init_warning(facts: HostFacts) -> tuple[str, ...]:
    """cloud-init regenerates /etc/netplan/50-cloud-init.yaml (DHCP) unless told not to."""
    cloud = facts.files.get("/etc/cloud/cloud.cfg")
    if cloud is None or re.search(r"config:\s*disabled", cloud):
        return ()
    return ("cloud-init manages this node's network: add `network: {config: disabled}` to "
            "/etc/cloud/cloud.cfg.d/99-disable-network-config.cfg so it keeps this address",)

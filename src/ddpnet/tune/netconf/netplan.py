"""ubuntu: /etc/netplan/90-ddpnet.yaml (mode 0600, as netplan wants), activated with
``netplan try`` so a wrong address rolls back by itself."""

from __future__ import annotations

import re

from ddpnet.tune.model import FileChange, HostFacts, Part, TuneRequest
from ddpnet.tune.netconf import Configured, as_mtu, common_warnings

PATH = "/etc/netplan/90-ddpnet.yaml"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _block(lines: list[str], key: str, start: int = 0, end: int | None = None) -> range:
    """The lines of the mapping under ``key:`` (the first one at any depth), empty if absent."""
    end = len(lines) if end is None else end
    for i in range(start, end):
        if re.match(rf"\s*['\"]?{re.escape(key)}['\"]?\s*:", lines[i]):
            j, depth = i + 1, _indent(lines[i])
            while j < end and (not lines[j].strip() or _indent(lines[j]) > depth):
                j += 1
            return range(i, j)
    return range(0)


def _items(first: str, rest: list[str]) -> list[str]:
    """A YAML list written inline (``[a, "b"]``) or as ``- a`` lines; mapping items (the
    ``- ADDR: {lifetime: 0}`` form) give their key."""
    inline = first.split(":", 1)[1].strip()
    raw = (inline.strip("[]").split(",") if inline.startswith("[") else
           [ln.strip()[1:] for ln in rest if ln.strip().startswith("-")])
    out = [re.sub(r"\s*:\s*\{.*$|:\s*$", "", r.strip()).strip().strip("'\"") for r in raw]
    return [o for o in out if o]


def read_config(text: str, iface: str) -> Configured | None:
    """The addresses and MTU a netplan file gives ``iface`` under ``ethernets`` (pure; the
    subset of YAML netplan files use: block mappings, inline or dash lists)."""
    lines = [ln.split(" #", 1)[0].rstrip() for ln in text.splitlines()
             if not ln.lstrip().startswith("#")]
    eth = _block(lines, "ethernets")
    own = _block(lines, iface, eth.start + 1, eth.stop) if eth else range(0)
    if not own:
        return None
    body = lines[own.start + 1:own.stop]
    addrs = _block(body, "addresses")
    mtu = _block(body, "mtu")
    return Configured(
        tuple(_items(body[addrs.start], body[addrs.start + 1:addrs.stop])) if addrs else (),
        as_mtu(body[mtu.start].split(":", 1)[1]) if mtu else None)


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

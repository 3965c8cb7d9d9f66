"""/etc/hosts: when this host's name resolves to loopback, gloo binds and advertises 127.x and
peers cannot connect (the guides' "hostname -i" trap). Map the name to the routable address
instead; other names on the loopback line stay."""

from __future__ import annotations

import re

from ddpnet.net.names import HOSTS_MARK as MARK
from ddpnet.net.names import hosts_fix, is_loopback
from ddpnet.tune.model import FileChange, HostFacts, Part, TuneRequest

PATH = "/etc/hosts"
__all__ = ["MARK", "PATH", "fix_hosts", "render"]


def fix_hosts(content: str, hostname: str, address: str) -> tuple[str, str]:
    """``(new content, what changed)``: :func:`ddpnet.net.names.hosts_fix` (doctor proposes
    the same fix); unchanged content when nothing resolves wrong."""
    fix = hosts_fix(content, hostname, address)
    return fix.content, fix.what


def render(req: TuneRequest, facts: HostFacts) -> Part:
    address = str(req.static_ip.ip) if req.static_ip else facts.address
    current = facts.files.get(PATH)
    if current is None or not address or is_loopback(address):
        return Part(name="names", notes=(f"{PATH}: not read or no routable address; skipped",))
    new, what = fix_hosts(current, facts.hostname, address)
    if not what:
        return Part(name="names", notes=(f"{facts.hostname} does not resolve to loopback in "
                                         f"{PATH}: nothing to fix",))
    warnings: tuple[str, ...] = ()
    cloud = facts.files.get("/etc/cloud/cloud.cfg", "")
    if re.search(r"^\s*manage_etc_hosts:\s*(true|yes|localhost)", cloud, re.M | re.I):
        warnings = ("cloud-init rewrites /etc/hosts at every boot (manage_etc_hosts in "
                    "/etc/cloud/cloud.cfg): set it to false, or put this line in "
                    "/etc/cloud/templates/hosts.<distro>.tmpl",)
    return Part(name="names", files=(FileChange(PATH, new, 0o644, what),), notes=(what,),
                warnings=warnings)

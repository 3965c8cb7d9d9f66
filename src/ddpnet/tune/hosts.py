"""/etc/hosts: when this host's name resolves to loopback, gloo binds and advertises 127.x and
peers cannot connect (the guides' "hostname -i" trap). Map the name to the routable address
instead; other names on the loopback line stay."""

from __future__ import annotations

import re

from ddpnet.net.names import is_loopback
from ddpnet.tune.model import FileChange, HostFacts, Part, TuneRequest

PATH = "/etc/hosts"
MARK = "# ddpnet tune"


def fix_hosts(content: str, hostname: str, address: str) -> tuple[str, str]:
    """``(new content, what changed)``; unchanged content when nothing resolves wrong."""
    short = hostname.split(".")[0]
    names = {hostname, short}
    out: list[str] = []
    changed: list[str] = []
    has_routable = False
    for line in content.splitlines(keepends=True):
        body, _, comment = line.rstrip("\n").partition("#")
        fields = body.split()
        if len(fields) >= 2 and names & set(fields[1:]):
            if is_loopback(fields[0]):
                keep = [f for f in fields[1:] if f not in names]
                out.append(f"# {line.rstrip(chr(10))}  {MARK}: {hostname} is not loopback\n")
                if keep:
                    out.append(" ".join([fields[0], *keep]) + (f" #{comment}" if comment else "")
                               + "\n")
                changed.append(f"removed {hostname} from the {fields[0]} line")
                continue
            if fields[0] == address:
                has_routable = True
        out.append(line)
    if not changed:
        return content, ""
    if not has_routable:
        if out and not out[-1].endswith("\n"):
            out[-1] += "\n"
        aliases = hostname if short == hostname else f"{hostname} {short}"
        out.append(f"{address} {aliases}  {MARK}: gloo resolves this host's name\n")
        changed.append(f"mapped {hostname} to {address}")
    return "".join(out), "; ".join(changed)


def render(req: TuneRequest, facts: HostFacts) -> Part:
    address = str(req.static_ip.ip) if req.static_ip else facts.address
    current = facts.files.get(PATH)
    if current is None or not address:
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

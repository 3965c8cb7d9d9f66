"""SELinux: report the mode, never disable it, and give the specific remedy."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from ddpnet.tune.firewall import PortSpec
from ddpnet.tune.model import HostFacts, Part, TuneRequest


def mode(enforce: str | None, config: str | None) -> tuple[str, str]:
    """``(live mode, configured mode)``: enforcing|permissive|disabled|absent."""
    live = "absent"
    if enforce is not None:
        live = "enforcing" if enforce.strip() == "1" else "permissive"
    configured = "absent"
    if config is not None:
        m = re.search(r"^\s*SELINUX\s*=\s*(\w+)", config, re.MULTILINE)
        configured = m.group(1).lower() if m else "absent"
        if live == "absent" and configured != "absent":
            live = "disabled"
    return live, configured


_AVC = re.compile(r"avc:\s+denied\s+\{ (?P<perm>[^}]+) \}.*?comm=\"(?P<comm>[^\"]+)\"")
_FIELD = re.compile(r"\b(src|dest|scontext|tcontext|tclass)=(\S+)")


@dataclass(frozen=True)
class Denial:
    """One AVC denial of a TCP port: which program, in which domain, on which port."""

    perm: str  # name_bind | name_connect
    comm: str
    port: int
    domain: str  # the process's SELinux type, e.g. httpd_t
    port_type: str  # the port's type, e.g. unreserved_port_t


def port_denials(audit_log: str, ports: Callable[[int], bool]) -> tuple[Denial, ...]:
    """AVC denials on tcp_socket for the training ports, newest last, deduplicated."""
    seen: dict[tuple[str, str, int], Denial] = {}
    for line in audit_log.splitlines():
        m = _AVC.search(line)
        if not m:
            continue
        fields = dict(_FIELD.findall(line))
        if fields.get("tclass") != "tcp_socket":
            continue
        raw = fields.get("src") if "name_bind" in m["perm"] else fields.get("dest")
        if not raw or not raw.isdigit() or not ports(int(raw)):
            continue
        ctx = fields.get("scontext", "").split(":")
        tctx = fields.get("tcontext", "").split(":")
        d = Denial(m["perm"].strip(), m["comm"], int(raw), ctx[2] if len(ctx) > 2 else "?",
                   tctx[2] if len(tctx) > 2 else "?")
        seen[(d.comm, d.perm, d.port)] = d
    return tuple(seen.values())


def remedy(d: Denial) -> str:
    return (f"SELinux denied {d.comm} ({d.domain}) {d.perm} on tcp port {d.port} "
            f"({d.port_type}); allow exactly that: `ausearch -m avc -c {d.comm} --raw | "
            f"audit2allow -M ddpnet_{d.comm} && semodule -i ddpnet_{d.comm}.pp`")


def render(req: TuneRequest, facts: HostFacts, spec: PortSpec | None) -> Part:
    live, configured = mode(facts.selinux_enforce, facts.selinux_config)
    notes = [f"SELinux: {live} (configured: {configured}); ddpnet never disables it"]
    ranges = spec.ranges() if spec else ((req.master_port, req.master_port, ""),)
    denials = port_denials(facts.audit_log or "",
                           lambda p: any(lo <= p <= hi for lo, hi, _ in ranges))
    warnings = tuple(remedy(d) for d in denials)
    if live == "enforcing":
        ports = f"{req.master_port}" + (f" and {spec.ephemeral[0]}-{spec.ephemeral[1]}"
                                        if spec else "")
        notes += [
            "training started from a login shell runs unconfined: SELinux does not block its "
            f"TCP ports ({ports}); `setenforce 0` fixes nothing there",
            "if a confined service (a systemd unit with its own policy) is denied, read the "
            "denial with `ausearch -m avc -ts recent`, then allow that port for its type: "
            f"`semanage port -a -t <type>_port_t -p tcp {req.master_port}`, or run the job "
            "unconfined",
        ]
    return Part(name="selinux", notes=tuple(notes), warnings=warnings)

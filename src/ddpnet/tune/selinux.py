"""SELinux: report the mode, never disable it, and give the specific remedy."""

from __future__ import annotations

import re

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


def render(req: TuneRequest, facts: HostFacts, spec: PortSpec | None) -> Part:
    live, configured = mode(facts.selinux_enforce, facts.selinux_config)
    notes = [f"SELinux: {live} (configured: {configured}); ddpnet never disables it"]
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
    return Part(name="selinux", notes=tuple(notes))

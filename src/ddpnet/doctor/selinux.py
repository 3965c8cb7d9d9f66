"""selinux family: the mode, and when enforcing, AVC denials that mention the training ports.
We never advise disabling SELinux: the fix is a port label or a local policy module."""

from __future__ import annotations

import re

from ddpnet.doctor.base import Check, CheckResult, Host, Inputs
from ddpnet.env.jobport import C10D_PORT

_TAIL_BYTES = 2 << 20


def mode(host: Host) -> str:
    """enforcing / permissive / disabled / absent."""
    enforce = host.read(host.sys / "fs" / "selinux" / "enforce")
    if enforce is not None:
        return "enforcing" if enforce.strip() == "1" else "permissive"
    # a config file without /sys/fs/selinux: the kernel runs without SELinux
    return "absent" if host.read(host.etc / "selinux" / "config") is None else "disabled"


def port_denials(host: Host, ports: set[int]) -> list[str]:
    """AVC denial lines from the audit log naming one of ``ports`` (last 2 MiB read)."""
    path = host.var / "log" / "audit" / "audit.log"
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - _TAIL_BYTES))
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    found = []
    for line in text.splitlines():
        if "avc:" not in line or "denied" not in line:
            continue
        m = re.search(r"\b(?:src|dest|lport|rport)=(\d+)", line)
        if m and int(m.group(1)) in ports:
            found.append(line.strip())
    return found


class Mode(Check):
    id = "selinux.mode"
    family = "selinux"
    title = "SELinux"

    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        current = mode(host)
        facts = {"selinux": current}
        if current == "absent":
            return self.skip("SELinux not present", **facts)
        if current != "enforcing":
            return self.ok(f"SELinux {current}", **facts)
        ports = {inputs.master_port} | ({C10D_PORT} if inputs.c10d else set())
        denials = port_denials(host, ports)
        if not denials:
            return self.ok("SELinux enforcing, no AVC denial mentions the training ports",
                           f"ports checked: {', '.join(map(str, sorted(ports)))}", **facts)
        port = sorted(ports)[0]
        return self.fail(
            f"SELinux denied {len(denials)} access(es) to the training ports",
            denials[-1][:300],
            f"label the port: semanage port -a -t unreserved_port_t -p tcp {port} (or -m if "
            "defined); or build a local module from the denials: ausearch -m avc -ts recent "
            "| audit2allow -M ddpnet && semodule -i ddpnet.pp", **facts)


CHECKS: tuple[Check, ...] = (Mode(),)

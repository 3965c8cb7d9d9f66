"""selinux family: the mode, and when enforcing, AVC denials that mention the training ports.
We never advise disabling SELinux: the fix is a port label or a local policy module."""

from __future__ import annotations

from ddpnet.doctor.base import Check, CheckResult, Host, Inputs
from ddpnet.env.jobport import C10D_PORT
from ddpnet.tune.selinux import Denial
from ddpnet.tune.selinux import mode as parse_mode
from ddpnet.tune.selinux import port_denials as parse_denials

_TAIL_BYTES = 2 << 20


def mode(host: Host) -> str:
    """enforcing / permissive / disabled / absent (the one parser: ``tune.selinux.mode``)."""
    live, _configured = parse_mode(host.read(host.sys / "fs" / "selinux" / "enforce"),
                                   host.read(host.etc / "selinux" / "config"))
    return live


def port_denials(host: Host, ports: set[int]) -> tuple[Denial, ...]:
    """AVC denials of a TCP bind/connect on one of ``ports`` in the audit log (its last 2 MiB
    read; parsed by ``tune.selinux.port_denials``, the one AVC parser)."""
    path = host.var / "log" / "audit" / "audit.log"
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - _TAIL_BYTES))
            text = f.read().decode(errors="replace")
    except OSError:
        return ()
    return parse_denials(text, ports.__contains__)


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
        last = denials[-1]
        port = last.port
        return self.fail(
            f"SELinux denied {len(denials)} access(es) to the training ports",
            f"{last.comm} ({last.domain}) was denied {last.perm} on tcp port {port} "
            f"({last.port_type})",
            f"label the port: semanage port -a -t unreserved_port_t -p tcp {port} (or -m if "
            "defined); or build a local module from the denials: ausearch -m avc -ts recent "
            "| audit2allow -M ddpnet && semodule -i ddpnet.pp", **facts)


CHECKS: tuple[Check, ...] = (Mode(),)

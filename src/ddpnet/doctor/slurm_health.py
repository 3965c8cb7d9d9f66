"""``ddpnet doctor --slurm-health`` (edge): run the doctor on this node toward the SLURM
controller, then drain or resume this node as :func:`ddpnet.doctor.health.decide` says."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, replace
from typing import Any

from ddpnet.doctor.base import CheckResult
from ddpnet.doctor.health import (
    HealthAction,
    controller_address,
    decide,
    mtu_against_peers,
    parse_config,
    published_mtu,
    with_mtu,
)
from ddpnet.doctor.run import DoctorOptions, DoctorReport, run
from ddpnet.errors import RequirementError
from ddpnet.exitcodes import ExitCode
from ddpnet.launch import scontrol
from ddpnet.subproc import run_tool


@dataclass(frozen=True)
class HealthResult:
    action: HealthAction
    report: DoctorReport
    #: what scontrol answered when the node was drained or resumed ("" when not asked)
    applied: str = ""
    ok: bool = True

    @property
    def exit_code(self) -> int:
        if not self.ok:
            return int(ExitCode.CHECK_FAILED)
        return int(ExitCode.CHECK_FAILED if self.action.failing else ExitCode.OK)

    def to_dict(self) -> dict[str, Any]:
        return {**self.action.to_dict(), "applied": self.applied, "ok": self.ok,
                "doctor": self.report.to_dict()}


def render(result: HealthResult, console: Any) -> None:
    a = result.action
    verb = {"drain": "drained", "resume": "resumed", "none": "left as it is"}[a.action]
    if not result.ok:
        verb = f"could not be {verb} ({result.applied})"
    console.print(f"ddpnet doctor --slurm-health: {a.node} {verb}: {a.detail}", markup=False,
                  highlight=False, soft_wrap=True)


#: slurmd runs HealthCheckProgram with an empty environment: without PATH, Python finds
#: tools in /bin:/usr/bin only, and nft, iptables, ip in /usr/sbin look absent (a firewall
#: that drops every port read as "no firewall")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _node_name(node: str | None) -> str:
    return node or socket.gethostname().split(".")[0]


def slurm_health(node: str | None = None, master_addr: str | None = None,
                 cluster_subnet: str | None = None) -> HealthResult:
    """Check this node toward the controller (or ``master_addr``) and act on its state."""
    os.environ.setdefault("PATH", SYSTEM_PATH)
    name = _node_name(node)
    fields = scontrol.node_fields(name)
    if not fields:
        raise RequirementError(f"SLURM does not know node {name!r} (scontrol show node "
                               f"{name} answered nothing)",
                               "run it on a SLURM node (HealthCheckProgram) or pass --node NAME")
    if master_addr is None:
        out = run_tool(["scontrol", "show", "config"], scontrol.TIMEOUT_S)
        master_addr = controller_address(parse_config(out.stdout)) or None
    report = run(DoctorOptions(master_addr=master_addr, cluster_subnet=cluster_subnet))
    peers = _mtu_peers(name, report, fields.get("Extra", ""))
    if peers is not None:
        report = replace(report, checks=(*report.checks, peers))
    action = decide(name, report.checks, fields.get("State", ""), fields.get("Reason", ""))
    if action.action == "drain":
        answer = scontrol.drain(name, action.detail)
    elif action.action == "resume":
        answer = scontrol.resume(name)
    else:
        return HealthResult(action, report)
    return replace(HealthResult(action, report), applied=answer.detail, ok=answer.ok)


def _mtu_peers(name: str, report: DoctorReport, extra: str) -> CheckResult | None:
    """Publish this node's cluster interface MTU (its ``Extra`` field) and compare it with
    what the other nodes published; None when there is no interface to compare or the field
    holds someone else's text."""
    selected = next((c for c in report.checks if c.id == "interfaces.selected"), None)
    mtu = selected.facts.get("mtu") if selected is not None else None
    if not isinstance(mtu, int) or mtu <= 0 or selected is None:
        return None
    published = with_mtu(extra, mtu)
    if published is None:
        return None
    if published != extra:
        scontrol.set_extra(name, published)
    peers = {f.get("NodeName", ""): published_mtu(f.get("Extra", ""))
             for f in scontrol.all_nodes() if f.get("NodeName", "") != name}
    return mtu_against_peers(str(selected.facts.get("interface", "")), mtu,
                             {n: m for n, m in peers.items() if n and m is not None})

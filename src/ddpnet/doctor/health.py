"""``ddpnet doctor --slurm-health``: doctor as SLURM's HealthCheckProgram, what to do about
this node (pure: a doctor report and the node's SLURM state in, an action out).

Only the checks whose failure breaks a job on this node drain it: its cluster interface
(chosen toward the controller, as a job's would be toward MASTER_ADDR), its names, and a
firewall dropping ephemeral ports (every backend connection lands there). The rendezvous
port checks are left out: a job's MASTER_PORT is derived from its id, not 29500. A node is
drained only with a reason ddpnet writes (``ddpnet: doctor: ...``) and resumed only when its
reason is ddpnet's: a node someone else drained (maintenance, NHC, an operator) is never
touched, and a node that is also DOWN stays DOWN+DRAIN (whoever set DOWN lifts it: doctor
cannot tell SLURM's DOWN from an operator's). The resume is ``State=UNDRAIN``, which clears
the drain alone and never the node's base state.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ddpnet.doctor.base import CheckResult
from ddpnet.launch.blame import REASON_MAX, REASON_PREFIX, ddpnet_reason, fit_reason

#: families whose failures break any job on the node
HEALTH_FAMILIES = ("interfaces", "names")
#: single checks of other families that do
HEALTH_CHECKS = ("firewall.ephemeral",)

#: how a node publishes its cluster interface's MTU to its peers: its SLURM ``Extra`` field
MTU_TOKEN = "ddpnet-mtu="
MTU_CHECK = "interfaces.mtu-peers"

#: actions: drain this node, resume it, or leave it as it is
ACTIONS = ("drain", "resume", "none")


@dataclass(frozen=True)
class HealthAction:
    node: str
    action: str
    #: the drain reason, or why nothing (or a resume) is done
    detail: str
    failing: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "action": self.action, "detail": self.detail,
                "failing": list(self.failing)}


def breaking(checks: Sequence[CheckResult]) -> tuple[CheckResult, ...]:
    """The failed checks that would break a job here."""
    return tuple(c for c in checks if c.status == "fail"
                 and (c.family in HEALTH_FAMILIES or c.id in HEALTH_CHECKS))


def health_reason(failed: Sequence[CheckResult], limit: int = REASON_MAX) -> str:
    """``ddpnet: doctor: <check>: <summary>; fix: <fix>``, the first failure, one line within
    ``limit`` bytes: the fix only when it fits whole, the summary cut between words."""
    first = failed[0]
    more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
    return fit_reason(f"{REASON_PREFIX}doctor: {first.id}: {first.summary}{more}", first.fix,
                      limit, joiner="; fix: ")


def decide(node: str, checks: Sequence[CheckResult], state: str, reason: str) -> HealthAction:
    """What to do about ``node`` whose SLURM ``state`` (``IDLE+DRAIN``, ``MIXED``, ...) and
    ``reason`` are as given, after the doctor found ``checks``."""
    failed = breaking(checks)
    flags = set(state.upper().replace("*", "").split("+"))
    drained = bool(flags & {"DRAIN", "DRAINED", "DRAINING"})
    ours = ddpnet_reason(reason)
    if failed:
        text = health_reason(failed)
        ids = tuple(c.id for c in failed)
        if drained and not ours:
            return HealthAction(node, "none", f"failing ({', '.join(ids)}) but drained by "
                                f"someone else (reason: {reason or 'none'}): left alone", ids)
        if drained and reason == text:
            return HealthAction(node, "none", f"already drained: {reason}", ids)
        return HealthAction(node, "drain", text, ids)
    if drained and ours and "DOWN" in flags:
        return HealthAction(node, "none", f"passes every check that breaks a job, but it is "
                            f"DOWN (set by SLURM, an operator, or ddpnet for a node that "
                            f"answered on nothing): left DOWN+DRAIN for whoever set it; "
                            f"`scontrol update NodeName={node} State=RESUME` once its cause is "
                            f"gone (reason: {reason})")
    if drained and ours:
        return HealthAction(node, "resume", f"passes every check that breaks a job; it was "
                            f"drained by ddpnet: {reason}")
    if drained:
        return HealthAction(node, "none", f"healthy, but drained by someone else (reason: "
                            f"{reason or 'none'}): left alone")
    return HealthAction(node, "none", "healthy")


def controller_address(config: Mapping[str, str]) -> str:
    """The first SlurmctldHost's address from ``scontrol show config`` fields
    (``SlurmctldHost[0] = n0(198.18.0.1)``), else its name; "" when absent (pure)."""
    value = config.get("SlurmctldHost[0]", "")
    name, _, rest = value.partition("(")
    return rest.rstrip(")").strip() or name.strip()


def parse_config(text: str) -> dict[str, str]:
    """``scontrol show config`` lines (``Key = value``) as a dict (pure)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(" = ")
        if sep:
            out[key.strip()] = value.strip()
    return out


def published_mtu(extra: str) -> int | None:
    """The MTU a node published in its ``Extra`` field (``ddpnet-mtu=9000``), else None."""
    for token in extra.split(","):
        if token.startswith(MTU_TOKEN) and token[len(MTU_TOKEN):].isdigit():
            return int(token[len(MTU_TOKEN):])
    return None


def with_mtu(extra: str, mtu: int) -> str | None:
    """``Extra`` with this node's MTU published; None when it holds anyone else's text (a
    site's own use of the field is never overwritten: the node is then not compared)."""
    if extra in ("", "(null)") or (published_mtu(extra) is not None and "," not in extra):
        return f"{MTU_TOKEN}{mtu}"
    return None


def mtu_against_peers(iface: str, own: int, peers: Mapping[str, int]) -> CheckResult:
    """This node's MTU against the one most of its peers published (pure): a fail when two
    or more peers, more than half of them, agree on another MTU (the odd node out: frames
    one side sends the other drops; with no such majority no node is blamed)."""
    common = Counter(peers.values()).most_common(1)
    if not common:
        return CheckResult(MTU_CHECK, "interfaces", "skip",
                           "no peer published its MTU yet (each health check publishes its own)")
    mtu, count = common[0]
    agreeing = sorted(n for n, m in peers.items() if m == mtu)
    if mtu == own or count < 2 or 2 * count <= len(peers):
        return CheckResult(MTU_CHECK, "interfaces", "pass",
                           f"{iface} mtu {own}; peers: " + ", ".join(
                               f"{n} {m}" for n, m in sorted(peers.items())))
    side = "below" if own < mtu else "above"
    return CheckResult(
        MTU_CHECK, "interfaces", "fail",
        f"{iface} mtu {own} is {side} its peers' {mtu} ({count} of {len(peers)}: "
        f"{', '.join(agreeing)})",
        "frames larger than the smaller MTU are dropped between this node and its peers: "
        "large messages hang",
        f"ip link set {iface} mtu {mtu} (and persist it in the network configuration)")

"""``ddpnet tune``: from its options to a dry run (the plan and a diff per file), an apply
(with backups and a journal) or a revert; the result is what ``--json`` prints.

Planning is pure (:mod:`ddpnet.tune.plan`); the host is read through
:mod:`ddpnet.tune.facts` and :mod:`ddpnet.tune.machine`, and written by
:mod:`ddpnet.tune.apply`."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ddpnet.errors import ConfigError
from ddpnet.net.firewall import firewalld_default_zone, read_state
from ddpnet.tune import machine
from ddpnet.tune.apply import FileDiff, Journal, Outcome
from ddpnet.tune.facts import PROBE_TIMEOUT_S
from ddpnet.tune.model import HostFacts, Plan, TuneRequest


@dataclass(frozen=True)
class TuneOptions:
    """``ddpnet tune``'s flags (``auto``: detected; ``None``: not given)."""

    distro: str = "auto"
    cluster_subnet: str | None = None
    master_port: str = "29500"
    iface: str | None = None
    firewall: str = "auto"
    zone: str | None = None
    profile: str = "auto"
    port_range: str | None = None
    static_ip: str | None = None
    gateway: str | None = None
    dns: str | None = None
    root: Path = Path("/")
    apply: bool = False
    revert: bool = False


@dataclass(frozen=True)
class TuneResult:
    """A dry run (plan + diffs), an apply (plan + outcome) or a revert (outcome)."""

    mode: str
    root: Path
    plan: Plan | None = None
    diffs: tuple[FileDiff, ...] = ()
    outcome: Outcome | None = None
    sysctl_not_taken: tuple[str, ...] = field(default_factory=tuple)

    @property
    def exit_code(self) -> int:
        """1 when a revert could not undo everything; an apply's problems are warnings."""
        return 1 if self.mode == "revert" and self.outcome and self.outcome.failed else 0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": self.mode}
        if self.plan is not None:
            out.update(plan_dict(self.plan))
        if self.mode == "dry-run":
            out["files"] = [d.to_dict() for d in self.diffs]
        if self.outcome is not None:
            out["outcome"] = self.outcome.to_dict()
        if self.mode == "apply":
            out["sysctl_not_taken"] = list(self.sysctl_not_taken)
        return out


def plan_dict(plan: Plan) -> dict[str, Any]:
    """The request, the facts and the parts, as ``--json`` shows them."""
    req, facts = plan.request, plan.facts
    return {
        "request": {
            "distro": req.distro, "firewall": req.firewall, "profile": req.profile,
            "master_port": req.master_port,
            "cluster_subnet": str(req.cluster_subnet) if req.cluster_subnet else None,
            "port_range": list(req.port_range) if req.port_range else None,
            "static_ip": str(req.static_ip) if req.static_ip else None,
            "gateway": req.gateway, "dns": list(req.dns), "sources": dict(req.sources),
        },
        "facts": {
            "hostname": facts.hostname, "iface": facts.iface, "iface_reason": facts.iface_reason,
            "address": facts.address, "mtu": facts.mtu, "speed_mbps": facts.speed_mbps,
            "port_range": list(facts.port_range), "sources": dict(facts.sources),
        },
        "parts": [p.to_dict() for p in plan.parts],
    }


def run(options: TuneOptions) -> TuneResult:
    from ddpnet.tune import apply as ap

    if options.apply and options.revert:
        raise ConfigError("--apply and --revert together", "choose one")
    if options.apply or options.revert:
        machine.need_root("--apply" if options.apply else "--revert")
    root = options.root
    machine.check_root_dir(root)
    if options.revert:
        return TuneResult("revert", root, outcome=ap.revert(root))
    plan = build(options)
    if not options.apply:
        return TuneResult("dry-run", root, plan, tuple(ap.dry_run(plan, root)))
    outcome = ap.apply(plan, root)
    not_taken = sysctl_not_taken(plan) if _live(root) else ()
    return TuneResult("apply", root, plan, outcome=outcome, sysctl_not_taken=not_taken)


def _live(root: Path) -> bool:
    return root.resolve() == Path("/")


def build(options: TuneOptions) -> Plan:
    """The plan for this node: flags, then os-release and the active firewall, then the
    interface facts (they need the subnet), then the full request."""
    from ddpnet.tune.facts import gather
    from ddpnet.tune.plan import build_plan

    root, live = options.root, _live(options.root)
    os_release, os_release_path = machine.read_os_release(root)
    firewall, fw_source, active = _firewall(options, live)
    # first pass for distro/firewall/subnet (cheap, pure); then facts; then the full request
    pre = _request(options, distro=options.distro, firewall=firewall, profile="guide",
                   os_release=os_release, os_release_path=str(os_release_path),
                   firewall_active=active)
    facts = gather(root, iface=options.iface, subnet=pre.cluster_subnet, distro=pre.distro)
    facts = with_values_before(facts, Journal.load(root))
    req = _request(options, distro=pre.distro if options.distro == "auto" else options.distro,
                   firewall=pre.firewall if firewall == "auto" else firewall,
                   profile=options.profile, speed_mbps=facts.speed_mbps)
    req = replace(req, sources={**req.sources, "distro": pre.sources["distro"],
                                "firewall": fw_source or pre.sources["firewall"]})
    if req.firewall == "firewalld" and options.zone is None and live:
        req = replace(req, zone=firewalld_default_zone(PROBE_TIMEOUT_S))
    return build_plan(req, facts)


def with_values_before(facts: HostFacts, journal: Journal | None) -> HostFacts:
    """After an apply, the sysctls "now" are ddpnet's own: compare with the values the host
    had before (the journal's first revert), so tune keeps what the host had higher but a
    lower --profile can still lower what ddpnet itself raised."""
    from ddpnet.tune.sysctl import values_before

    entry = journal.parts.get("sysctl") if journal is not None else None
    before = values_before(entry.get("revert")) if isinstance(entry, dict) else {}
    if not before:
        return facts
    where = facts.sources.get("sysctl", "this host")
    return replace(facts, sysctl_now={**facts.sysctl_now, **before},
                   sources={**facts.sources, "sysctl": f"{where}, before ddpnet's first "
                            "--apply (journal)"})


def _request(options: TuneOptions, **given: Any) -> TuneRequest:
    """The request from the flags every pass shares, plus ``given``."""
    from ddpnet.tune.plan import build_request

    return build_request(master_port=options.master_port,
                         cluster_subnet=options.cluster_subnet, port_range=options.port_range,
                         static_ip=options.static_ip, gateway=options.gateway, dns=options.dns,
                         zone=options.zone or "public", **given)


def _firewall(options: TuneOptions, live: bool) -> tuple[str, str, dict[str, bool]]:
    """The firewall to render for, where that came from, and which firewalls are active."""
    if options.firewall != "auto":
        return options.firewall, "", {}
    active = read_state(options.root, live=live, timeout=PROBE_TIMEOUT_S).active()
    # our own table/chain does not count as "a firewall is active", but what we applied
    # before is what a re-run must render again
    previous = previous_firewall(Journal.load(options.root))
    if previous and not any(active.values()):
        return previous, "applied by an earlier --apply (journal)", active
    return "auto", "", active


def previous_firewall(journal: Journal | None) -> str | None:
    """The firewall an earlier --apply loaded, from its journal."""
    if journal is None or "firewall" not in journal.parts:
        return None
    tool = journal.parts["firewall"]["apply"][0]["argv"][0]
    return {"nft": "nftables", "iptables-restore": "iptables", "ip6tables-restore": "iptables",
            "firewall-cmd": "firewalld", "ufw": "ufw"}.get(tool)


def sysctl_not_taken(plan: Plan) -> tuple[str, ...]:
    """Keys of the loaded drop-in whose value /proc/sys does not show."""
    from ddpnet.tune import sysctl

    part = plan.part("sysctl")
    if part is None or not part.files:
        return ()
    content = part.files[0].content
    return sysctl.mismatches(content, machine.read_sysctls(sysctl.settings_in(content)))

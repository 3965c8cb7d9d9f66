"""``ddpnet tune``: render the guides' system set-up for this node, show it as unified diffs
and commands, apply it (``--apply``, root) with backups and a journal, undo it (``--revert``)."""

from __future__ import annotations

import os
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from ddpnet.errors import RequirementError
from ddpnet.tune.model import DISTROS, FIREWALLS, PROFILES, Plan


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise RequirementError(
            f"ddpnet tune {what} needs root: it writes under /etc and loads kernel and "
            "firewall settings",
            f"run `sudo ddpnet tune {what} ...`, or leave out {what} for a dry run")


def plan_dict(plan: Plan) -> dict[str, Any]:
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
            "port_range": list(facts.port_range),
        },
        "parts": [p.to_dict() for p in plan.parts],
    }


def _print_plan(plan: Plan, diffs: list[Any], root: Path) -> None:
    from ddpnet.output import console

    out = console()
    req, facts = plan.request, plan.facts
    out.print(f"[bold]ddpnet tune[/] (dry run) for [bold]{facts.hostname}[/]"
              + (f" under {root}" if str(root) != "/" else ""))
    out.print(f"  distro   {req.distro}  [dim]({req.sources.get('distro')})[/]")
    out.print(f"  firewall {req.firewall}  [dim]({req.sources.get('firewall')})[/]")
    out.print(f"  profile  {req.profile}  [dim]({req.sources.get('profile')})[/]")
    out.print(f"  iface    {facts.iface}  [dim]({facts.iface_reason})[/]")
    by_path = {d.path: d for d in diffs}
    for part in plan.parts:
        out.print(f"\n[bold]== {part.name}[/]")
        for fc in part.files:
            d = by_path[fc.path]
            if d.action == "unchanged":
                out.print(f"{fc.path}: unchanged")
            else:
                out.print(d.diff, markup=False, end="")
        for c in part.apply:
            out.print("would run: " + shlex.join(c.argv), markup=False)
        for n in part.notes:
            out.print("note: " + n, markup=False)
        for w in part.warnings:
            out.print("[yellow]warning:[/] ", end="")
            out.print(w, markup=False)
    out.print("\nNothing was changed. Apply with --apply (root); undo later with --revert.")


def _print_outcome(title: str, outcome: Any) -> None:
    from ddpnet.output import console

    out = console()
    out.print(f"[bold]{title}[/]")
    for f in outcome.files:
        out.print(f"  {f['action']:<10} {f['path']}", markup=False)
    for c in outcome.commands:
        out.print(f"  {c['status']:<10} {shlex.join(c['argv'])}", markup=False)
    for f in outcome.failed:
        out.print(f"  [red]problem:[/] {f}")
    if not outcome.files and not outcome.commands:
        out.print("  nothing to do")


@click.command("tune")
@click.option("--distro", type=click.Choice(["auto", *DISTROS]), default="auto",
              show_default=True, help="Target distribution (auto: /etc/os-release).")
@click.option("--cluster-subnet", default=None, metavar="CIDR",
              help="The only network the training ports are opened to.")
@click.option("--master-port", default="29500", show_default=True, help="MASTER_PORT.")
@click.option("--iface", default=None, help="Cluster interface (auto: ddpnet.net selection).")
@click.option("--firewall", type=click.Choice(["auto", *FIREWALLS]), default="auto",
              show_default=True, help="Firewall to render rules for (auto: the active one).")
@click.option("--zone", default=None,
              help="firewalld zone for the rules (default: firewalld's default zone).")
@click.option("--profile", type=click.Choice(["auto", *PROFILES]), default="auto",
              show_default=True, help="sysctl profile (auto: from the NIC's speed).")
@click.option("--port-range", default=None, metavar="LO-HI",
              help="Narrow ip_local_port_range and open only these ephemeral ports.")
@click.option("--static-ip", default=None, metavar="ADDR/PREFIX", help="Static address.")
@click.option("--gateway", default=None, help="Default gateway for --static-ip.")
@click.option("--dns", default=None, metavar="A,B", help="DNS servers for --static-ip.")
@click.option("--root", "root_dir", default="/", show_default=True, metavar="DIR",
              type=click.Path(file_okay=False, path_type=Path),
              help="Render into an alternate root (images, tests); commands are not run.")
@click.option("--apply", "do_apply", is_flag=True, help="Write and load it (root).")
@click.option("--revert", "do_revert", is_flag=True,
              help="Undo every --apply: restore files byte for byte, remove what was added.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def command(
    distro: str, cluster_subnet: str | None, master_port: str, iface: str | None,
    firewall: str, zone: str | None, profile: str, port_range: str | None, static_ip: str | None,
    gateway: str | None, dns: str | None, root_dir: Path, do_apply: bool, do_revert: bool,
    as_json: bool,
) -> int:
    """Tune this node for multi-node training: sysctl drop-in, firewall rules open only to
    the cluster subnet, SELinux report, static IP, /etc/hosts fix, GLOO/NCCL env file.

    Without --apply it is a dry run: a unified diff per file and the commands it would run.
    """
    from ddpnet.errors import ConfigError
    from ddpnet.output import emit_json
    from ddpnet.tune import apply as ap

    if do_apply and do_revert:
        raise ConfigError("--apply and --revert together", "choose one")
    if do_apply or do_revert:
        _need_root("--apply" if do_apply else "--revert")
    try:
        if not root_dir.is_dir():
            raise ConfigError(f"--root {root_dir} is not a directory", "create it first")
        os.listdir(root_dir)
    except PermissionError:
        raise ConfigError(f"--root {root_dir} is not readable by this user",
                          "run as a user who can read it (or as root)") from None
    if do_revert:
        outcome = ap.revert(root_dir)
        if as_json:
            emit_json({"mode": "revert", "outcome": outcome.to_dict()})
        else:
            _print_outcome("ddpnet tune --revert", outcome)
        return 1 if outcome.failed else 0

    from ddpnet.tune.facts import firewall_active, gather
    from ddpnet.tune.plan import build_plan, build_request

    os_release, os_release_path = None, root_dir / "etc/os-release"
    for rel in ("etc/os-release", "usr/lib/os-release"):
        p = root_dir / rel
        if p.is_file():
            os_release, os_release_path = p.read_text(errors="replace"), p
            break
    live = root_dir.resolve() == Path("/")
    active = firewall_active(root_dir, live) if firewall == "auto" else {}
    fw_source = ""
    if firewall == "auto":
        # our own table/chain does not count as "a firewall is active", but what we applied
        # before is what a re-run must render again
        previous = _previous_firewall(ap.Journal.load(root_dir))
        if previous and not any(active.values()):
            firewall, fw_source = previous, "applied by an earlier --apply (journal)"
    # first pass for distro/firewall/subnet (cheap, pure); then facts; then the full request
    pre = build_request(distro=distro, firewall=firewall, profile="guide",
                        master_port=master_port, cluster_subnet=cluster_subnet,
                        port_range=port_range, static_ip=static_ip, gateway=gateway, dns=dns,
                        zone=zone or "public", os_release=os_release,
                        os_release_path=str(os_release_path), firewall_active=active)
    facts = gather(root_dir, iface=iface, subnet=pre.cluster_subnet, distro=pre.distro)
    req = build_request(distro=pre.distro if distro == "auto" else distro,
                        firewall=pre.firewall if firewall == "auto" else firewall,
                        profile=profile, master_port=master_port,
                        cluster_subnet=cluster_subnet, port_range=port_range,
                        static_ip=static_ip, gateway=gateway, dns=dns, zone=zone or "public",
                        speed_mbps=facts.speed_mbps)
    req = replace(req, sources={**req.sources, "distro": pre.sources["distro"],
                                "firewall": fw_source or pre.sources["firewall"]})
    if req.firewall == "firewalld" and zone is None and live:
        req = replace(req, zone=_firewalld_default_zone())
    plan = build_plan(req, facts)
    if not do_apply:
        diffs = ap.dry_run(plan, root_dir)
        if as_json:
            emit_json({"mode": "dry-run", **plan_dict(plan),
                       "files": [d.to_dict() for d in diffs]})
        else:
            _print_plan(plan, diffs, root_dir)
        return 0
    outcome = ap.apply(plan, root_dir)
    not_taken = _sysctl_not_taken(plan) if live else ()
    if as_json:
        emit_json({"mode": "apply", **plan_dict(plan), "outcome": outcome.to_dict(),
                   "sysctl_not_taken": list(not_taken)})
    else:
        _print_outcome("ddpnet tune --apply" + ("" if outcome.changed else " (no changes)"),
                       outcome)
        for part in plan.parts:
            for w in part.warnings:
                click.echo(f"warning: {w}")
        for m in not_taken:
            click.echo(f"warning: sysctl {m}")
    return 0


def _firewalld_default_zone() -> str:
    from ddpnet.subproc import run_command
    from ddpnet.tune.facts import PROBE_TIMEOUT_S

    proc = run_command(("firewall-cmd", "--get-default-zone"), PROBE_TIMEOUT_S)
    zone = proc.stdout.strip() if proc is not None and proc.returncode == 0 else ""
    return zone or "public"


def _previous_firewall(journal: Any) -> str | None:
    """The firewall an earlier --apply loaded, from its journal."""
    if journal is None or "firewall" not in journal.parts:
        return None
    tool = journal.parts["firewall"]["apply"][0]["argv"][0]
    return {"nft": "nftables", "iptables-restore": "iptables", "ip6tables-restore": "iptables",
            "firewall-cmd": "firewalld", "ufw": "ufw"}.get(tool)


def _sysctl_not_taken(plan: Plan) -> tuple[str, ...]:
    """Read back every key of the drop-in from /proc/sys after it was loaded."""
    from ddpnet.tune import sysctl

    part = plan.part("sysctl")
    if part is None or not part.files:
        return ()
    content = part.files[0].content
    live: dict[str, str | None] = {}
    for key in sysctl.settings_in(content):
        try:
            live[key] = Path("/proc/sys", *key.split(".")).read_text()
        except OSError:
            live[key] = None
    return sysctl.mismatches(content, live)

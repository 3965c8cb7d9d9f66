"""What ``ddpnet tune`` prints for people (pure): the dry run's diffs and would-run commands
per part, and what an apply or revert did."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ddpnet.tune.apply import FileDiff, Outcome
from ddpnet.tune.facts import LIVE
from ddpnet.tune.model import Plan
from ddpnet.tune.run import TuneResult

if TYPE_CHECKING:
    from rich.console import Console


def render(result: TuneResult, out: Console) -> None:
    if result.mode == "revert":
        assert result.outcome is not None
        print_outcome("ddpnet tune --revert", result.outcome, out)
    elif result.mode == "dry-run":
        assert result.plan is not None
        print_plan(result.plan, result.diffs, result.root, out)
    else:
        assert result.plan is not None and result.outcome is not None
        changed = "" if result.outcome.changed else " (no changes)"
        print_outcome("ddpnet tune --apply" + changed, result.outcome, out)
        for part in result.plan.parts:
            for w in part.warnings:
                out.print(f"warning: {w}", markup=False)
        for m in result.sysctl_not_taken:
            out.print(f"warning: sysctl {m}", markup=False)


def print_plan(plan: Plan, diffs: Sequence[FileDiff], root: Path, out: Console) -> None:
    """The request and where each value came from, then per part its diffs, commands, notes
    and warnings; nothing was changed."""
    req, facts = plan.request, plan.facts
    out.print(f"[bold]ddpnet tune[/] (dry run) for [bold]{facts.hostname}[/]"
              + (f" under {root}" if str(root) != "/" else ""))
    out.print(f"  distro   {req.distro}  [dim]({req.sources.get('distro')})[/]")
    out.print(f"  firewall {req.firewall}  [dim]({req.sources.get('firewall')})[/]")
    out.print(f"  profile  {req.profile}  [dim]({req.sources.get('profile')})[/]")
    out.print(f"  iface    {facts.iface}  [dim]({facts.iface_reason})[/]")
    for where, names in facts_by_source(plan).items():
        out.print(f"  read     {', '.join(names)}  ", end="")
        out.print(f"({where})", style="dim", markup=False)
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


def facts_by_source(plan: Plan) -> dict[str, list[str]]:
    """Source -> the facts read there, so a --root run shows what came from the live host."""
    sources = plan.facts.sources
    if sources and all(w.startswith(LIVE) for w in sources.values()):
        return {LIVE: ["every fact"]}
    out: dict[str, list[str]] = {}
    for fact, where in sources.items():
        out.setdefault(where, []).append(fact)
    return out


def print_outcome(title: str, outcome: Outcome, out: Console) -> None:
    out.print(f"[bold]{title}[/]")
    for f in outcome.files:
        out.print(f"  {f['action']:<10} {f['path']}", markup=False)
    for c in outcome.commands:
        out.print(f"  {c['status']:<10} {shlex.join(c['argv'])}", markup=False)
    for problem in outcome.failed:
        out.print(f"  [red]problem:[/] {problem}")
    if not outcome.files and not outcome.commands:
        out.print("  nothing to do")

"""``ddpnet env``'s report: the resolved configuration and this host's interface choice.

It lives in net/ because net/ is the lowest floor that sees both halves (the selection takes
a resolved :class:`~ddpnet.config.DistConfig`); env/ stays free of net/."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ddpnet.config import DistConfig
from ddpnet.env.report import EnvOptions, render_config
from ddpnet.net.select import Selection

if TYPE_CHECKING:
    from rich.console import Console


@dataclass(frozen=True)
class EnvReport:
    """What ``ddpnet env`` prints; always exit 0 (a bad selection is shown, not fatal)."""

    config: DistConfig
    network: Selection
    exit_code: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {**self.config.to_dict(), "network": self.network.to_dict()}


def run(options: EnvOptions, environ: Mapping[str, str] | None = None) -> EnvReport:
    """Resolve the configuration from the launcher's variables and select the interface
    (edge: reads this host's port range, interfaces and routes)."""
    from ddpnet.env.jobport import read_port_range
    from ddpnet.env.resolve import resolve_config
    from ddpnet.net.select import select_for_host

    env = os.environ if environ is None else environ
    cfg = resolve_config(env, options.overrides(), port_range=read_port_range())
    return EnvReport(cfg, select_for_host(_as_job(cfg), env))


def _as_job(cfg: DistConfig) -> DistConfig:
    """A job script's interface is the one its job's ranks use here: toward the job's
    master, across its nodes (not the loopback of its own world of one)."""
    job = cfg.job_script
    if job is None:
        return cfg
    return replace(cfg, master_addr=job.master_addr, master_port=job.master_port,
                   num_nodes=job.nodes, world_size=job.nodes * job.nproc_per_node)


def render(report: EnvReport, out: Console) -> None:
    """The configuration table, then the network table."""
    render_config(report.config, out)
    render_selection(report.network, out)


def render_selection(sel: Selection, out: Console) -> None:
    """The interface choice per variable, with source and reason; problems with their fix."""
    from ddpnet.output import table as new_table

    where = f"{sel.interface} ({sel.address})" if sel.address else str(sel.interface)
    table = new_table(f"network: {where}", ("variable", "value"))
    table.add_column("source", style="dim")
    table.add_column("reason")
    for var, choice in sel.choices().items():
        value = choice.value if choice.value is not None else "(unset)"
        reason = choice.reason if choice.ok else f"[red]{choice.cause}[/]: {choice.reason}"
        table.add_row(var, value, choice.source, reason)
    out.print(table)
    for var, choice in sel.problems().items():
        out.print(f"[red]problem:[/] {var}: {choice.reason}", markup=True)
        out.print(f"  hint: {choice.hint}", markup=False)
    for note in sel.notes:
        out.print(f"[dim]note:[/] {note}")
    if sel.env():
        out.print("ddpnet.init() sets: " + " ".join(
            f"{k}={shlex.quote(v)}" for k, v in sel.env().items()), markup=False)

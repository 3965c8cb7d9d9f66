"""``ddpnet env``: show the resolved configuration, where each value came from, and the
``export`` lines and ``torchrun`` command that reproduce it on each node."""

from __future__ import annotations

import os
import shlex
from typing import Any

import click

from ddpnet.config import SOURCED_KEYS, DistConfig
from ddpnet.env.base import Sourced
from ddpnet.env.jobport import read_port_range
from ddpnet.env.resolve import resolve_config
from ddpnet.net.select import Selection, select_for_host


def overrides_from_flags(**flags: Any) -> dict[str, Sourced]:
    """CLI flags as overrides, each sourced by its flag name (``--world-size``)."""
    return {
        key: (value, "--" + key.replace("_", "-"))
        for key, value in flags.items()
        if value is not None
    }


def export_lines(cfg: DistConfig) -> str:
    """The guides' exports for this process."""
    pairs = [
        ("MASTER_ADDR", cfg.master_addr),
        ("MASTER_PORT", str(cfg.master_port)),
        ("WORLD_SIZE", str(cfg.world_size)),
        ("RANK", str(cfg.rank)),
        ("LOCAL_RANK", str(cfg.local_rank)),
        ("LOCAL_WORLD_SIZE", str(cfg.local_world_size)),
    ]
    return "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in pairs)


def torchrun_line(cfg: DistConfig) -> str:
    """The torchrun command for this node (static rendezvous: rank 0 stays on MASTER_ADDR)."""
    return (
        f"torchrun --nnodes {cfg.num_nodes} --nproc-per-node {cfg.local_world_size} "
        f"--node-rank {cfg.node_rank} --master-addr {shlex.quote(cfg.master_addr)} "
        f"--master-port {cfg.master_port} YOUR_SCRIPT.py"
    )


def render_network(sel: Selection) -> None:
    """The interface choice per variable, with source and reason; problems with their fix."""
    from rich.table import Table

    from ddpnet.output import console

    out = console()
    where = f"{sel.interface} ({sel.address})" if sel.address else str(sel.interface)
    table = Table(title=f"network: {where}", show_header=True, header_style="bold")
    table.add_column("variable")
    table.add_column("value")
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


def render(cfg: DistConfig) -> None:
    from rich.table import Table

    from ddpnet.output import console

    out = console()
    table = Table(title="ddpnet env", show_header=True, header_style="bold")
    table.add_column("setting")
    table.add_column("value")
    table.add_column("source", style="dim")
    shown = cfg.to_dict()
    for key in SOURCED_KEYS:
        value = shown[key]
        if key == "hosts":
            if not value:
                continue
            from ddpnet.env.hostlist import compress

            value = f"{compress(value)} ({len(value)})"
        table.add_row(key, str(value), cfg.sources.get(key, ""))
    out.print(table)
    for note in cfg.notes:
        out.print(f"[dim]note:[/] {note}")
    out.print("\n[bold]Equivalent exports on this process:[/]")
    out.print(export_lines(cfg), markup=False)
    out.print("\n[bold]Equivalent torchrun on this node[/] (change --node-rank on each node):")
    out.print(torchrun_line(cfg), markup=False)


@click.command("env")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--init-method", default=None, help="env://, tcp://HOST:PORT or file:///PATH.")
@click.option("--rank", default=None, help="Override the rank.")
@click.option("--world-size", default=None, help="Override the world size.")
@click.option("--master-addr", default=None, help="Override MASTER_ADDR.")
@click.option("--master-port", default=None, help="Override MASTER_PORT.")
def command(
    as_json: bool,
    init_method: str | None,
    rank: str | None,
    world_size: str | None,
    master_addr: str | None,
    master_port: str | None,
) -> int:
    """Resolve rank, world size and master from whatever launched this process.

    Launchers, in priority order: torchrun, openmpi, mpich, mvapich, slurm, lsf, manual
    (RANK/WORLD_SIZE exported), local. Flags override the launcher.
    """
    overrides = overrides_from_flags(
        init_method=init_method, rank=rank, world_size=world_size,
        master_addr=master_addr, master_port=master_port,
    )
    cfg = resolve_config(os.environ, overrides, port_range=read_port_range())
    sel = select_for_host(cfg, os.environ)
    if as_json:
        from ddpnet.output import emit_json

        emit_json({**cfg.to_dict(), "network": sel.to_dict()})
    else:
        render(cfg)
        render_network(sel)
    return 0

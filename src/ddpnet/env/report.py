"""What ``ddpnet env`` shows of the resolved configuration (pure): the options it was given,
the ``export`` lines and ``torchrun`` command that reproduce it, and its human table.

The network part of ``ddpnet env`` lives in :mod:`ddpnet.net.report`: env/ sits below net/."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ddpnet.config import SOURCED_KEYS, DistConfig
from ddpnet.env.base import Sourced

if TYPE_CHECKING:
    from rich.console import Console


@dataclass(frozen=True)
class EnvOptions:
    """``ddpnet env``'s flags; each given one overrides what the launcher says."""

    init_method: str | None = None
    rank: str | None = None
    world_size: str | None = None
    master_addr: str | None = None
    master_port: str | None = None

    def overrides(self) -> dict[str, Sourced]:
        return overrides_from_flags(
            init_method=self.init_method, rank=self.rank, world_size=self.world_size,
            master_addr=self.master_addr, master_port=self.master_port)


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


def render_config(cfg: DistConfig, out: Console) -> None:
    """Each setting with its source, the notes, and the equivalent exports and torchrun."""
    from rich.markup import escape

    from ddpnet.env.hostlist import compress
    from ddpnet.output import table as new_table

    table = new_table("ddpnet env", ("setting", "value"))
    table.add_column("source", style="dim")
    shown = cfg.to_dict()
    for key in SOURCED_KEYS:
        value = shown[key]
        if key == "hosts":
            if not value:
                continue
            value = f"{compress(value)} ({len(value)})"
        table.add_row(key, str(value), cfg.sources.get(key, ""))
    out.print(table)
    for other in cfg.ambiguous:
        out.print("[bold yellow]warning:[/] " + escape(other.describe(cfg.launcher)))
    for note in cfg.notes:
        out.print(f"[dim]note:[/] {note}")
    out.print("\n[bold]Equivalent exports on this process:[/]")
    out.print(export_lines(cfg), markup=False)
    out.print("\n[bold]Equivalent torchrun on this node[/] (change --node-rank on each node):")
    out.print(torchrun_line(cfg), markup=False)

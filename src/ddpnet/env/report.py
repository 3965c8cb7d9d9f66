"""What ``ddpnet env`` shows of the resolved configuration (pure): the options it was given,
the ``export`` lines and ``torchrun`` command that reproduce it, and its human table.

The network part of ``ddpnet env`` lives in :mod:`ddpnet.net.report`: env/ sits below net/."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ddpnet.config import SOURCED_KEYS, DistConfig, JobScript
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
    """Each setting with its source, the notes, and the equivalent exports and torchrun; in a
    job script, the job it launches and the command per node instead."""
    if cfg.job_script is not None:
        render_job_script(cfg, cfg.job_script, out)
        return

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
    _warnings_and_notes(cfg, out)
    out.print("\n[bold]Equivalent exports on this process:[/]")
    out.print(export_lines(cfg), markup=False)
    out.print("\n[bold]Equivalent torchrun on this node[/] (change --node-rank on each node):")
    out.print(torchrun_line(cfg), markup=False)


def render_job_script(cfg: DistConfig, job: JobScript, out: Console) -> None:
    """A job script is the launching script, not a world of one: the job's layout, then the
    torchrun command for each node and the scheduler's way to start them all."""
    from ddpnet.env.hostlist import compress
    from ddpnet.output import table as new_table

    table = new_table(f"ddpnet env: the launching script of {job.scheduler} job "
                      f"{job.job_id} (not a rank)", ("setting", "value"))
    table.add_column("source", style="dim")
    slots = str(job.nproc_per_node) if len(set(job.slots)) == 1 else \
        f"{job.nproc_per_node} (smallest of {', '.join(map(str, job.slots))})"
    for key, value, source in (
            ("launcher", cfg.launcher, cfg.sources.get("launcher", "")),
            ("job", job.job_id, ""),
            ("hosts", f"{compress(job.hosts)} ({job.nodes})", job.source),
            ("master_addr", job.master_addr, f"the first host of {job.source}"),
            ("master_port", str(job.master_port), "derived from the job id"),
            ("nodes", str(job.nodes), job.source),
            ("slots per node", slots, job.source)):
        table.add_row(key, value, source)
    out.print(table)
    _warnings_and_notes(cfg, out)
    out.print("\n[bold]On each node[/] (node rank i on host i of the job):")
    for host, line in zip(job.hosts, job.node_commands(), strict=True):
        out.print(f"{host}: {line}", markup=False, soft_wrap=True)
    out.print("\n[bold]Or from this script, on every node at once:[/]")
    out.print(job.fan_out(), markup=False, soft_wrap=True)


def _warnings_and_notes(cfg: DistConfig, out: Console) -> None:
    """Below either view's table: the other launchers that also matched, and the notes."""
    from rich.markup import escape

    for other in cfg.ambiguous:
        out.print("[bold yellow]warning:[/] " + escape(other.describe(cfg.launcher)))
    for note in cfg.notes:
        out.print(f"[dim]note:[/] {escape(note)}")

"""What ``ddpnet launch`` prints for people (pure): the command per node of a dry run, and
the warnings about where rank 0 will run (on stderr, before the engine starts)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, TextIO

from ddpnet.launch.run import LaunchPlan

if TYPE_CHECKING:
    from rich.console import Console


def plan_lines(plan: LaunchPlan) -> list[str]:
    """``# node 1 (ranks 4-7)`` then its shell command, per node; then the notes."""
    lines = []
    for node in plan.nodes:
        where = "this node" if node["node_rank"] is None else f"node {node['node_rank']}"
        if plan.engine == "mpirun":
            where = "the launching host (mpirun starts every rank)"
        if plan.engine == "ssh":
            where = f"host {node['host']}, node {node['node_rank']}, over SSH"
        ranks = node["ranks"]
        suffix = f" (ranks {ranks[0]}-{ranks[-1]})" if ranks else ""
        lines += [f"# {where}{suffix}", node["command"]]
    return lines + [f"# note: {note}" for note in plan.notes]


def render(result: Any, out: Console) -> None:
    """A dry run's plan; nothing after a real run (the engine's ranks printed their own)."""
    if isinstance(result, LaunchPlan):
        for line in plan_lines(result):
            out.print(line, markup=False, emoji=False, highlight=False)


def print_warnings(warnings: tuple[str, ...], err: TextIO | None = None) -> None:
    stream = err or sys.stderr
    for w in warnings:
        stream.write(f"ddpnet: warning: {w}\n")
    stream.flush()


def render_sbatch(result: Any, out: Console) -> None:
    """The job id after ``--submit``; else the script, unless it went to ``--script``."""
    if result.job_id is not None:
        out.print(result.job_id, markup=False, emoji=False, highlight=False)
    elif result.script_path is None:
        out.print(result.script, markup=False, emoji=False, highlight=False, end="")

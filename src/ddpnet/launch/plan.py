"""From flags and the resolved environment to a :class:`LaunchConfig` (pure), and the
per-node rendering ``--dry-run`` prints."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from ddpnet.config import DistConfig
from ddpnet.errors import ConfigError
from ddpnet.launch.command import LaunchConfig, NNodes, Target, build_torchrun, shell_line


def auto_nproc(environ: Mapping[str, str], dev_entries: Iterable[str]) -> tuple[int, str]:
    """``--nproc-per-node auto``: one process per visible GPU, else one.

    ``dev_entries`` are the names in /dev (read at the edge); torch is not imported.
    """
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() not in ("", "-1", "NoDevFiles"):
        n = len([d for d in visible.split(",") if d.strip()])
        return n, f"auto: {n} GPU(s) in CUDA_VISIBLE_DEVICES"
    gpus = [d for d in dev_entries if re.fullmatch(r"nvidia\d+", d)]
    if gpus:
        return len(gpus), f"auto: {len(gpus)} GPU(s) in /dev"
    return 1, "auto: no GPU, one process per node"


def parse_nproc(text: str | None, environ: Mapping[str, str],
                dev_entries: Iterable[str]) -> tuple[int, str]:
    if text is None or text == "auto":
        return auto_nproc(environ, dev_entries)
    try:
        n = int(text)
    except ValueError:
        raise ConfigError(f"--nproc-per-node {text!r} is not a number or 'auto'",
                          "use --nproc-per-node N (processes per node) or auto (one per GPU)"
                          ) from None
    if n < 1:
        raise ConfigError(f"--nproc-per-node {n} is below 1",
                          "give at least one process per node, e.g. --nproc-per-node 1")
    return n, "--nproc-per-node"


#: launchers that start one process per slot: several on a node mean several torchruns
PER_PROCESS_LAUNCHERS = ("slurm", "openmpi", "mpich", "mvapich", "lsf", "azureml", "pbs", "sge")


def make_config(dist: DistConfig, *, target: Target, nproc: tuple[int, str],
                nnodes: NNodes, rdzv: str, max_restarts: int, python: str,
                iface_env: Mapping[str, str], notes: Iterable[str] = (),
                watch_env: Mapping[str, str] | None = None) -> LaunchConfig:
    """The node's launch from the resolved environment (flags already folded into ``dist``)."""
    if dist.launcher in PER_PROCESS_LAUNCHERS and dist.local_world_size > 1:
        raise ConfigError(
            f"{dist.launcher} started {dist.local_world_size} ddpnet launch processes on this "
            f"node (rank {dist.rank}); each would start its own torchrun",
            "start one ddpnet launch per node (srun --ntasks-per-node=1 ddpnet launch ...) "
            "and let --nproc-per-node start the ranks")
    sources: dict[str, Any] = {
        "nproc_per_node": nproc[1],
        "nnodes": dist.sources.get("num_nodes", "default"),
        "node_rank": dist.sources.get("node_rank", "default"),
        "master_addr": dist.sources.get("master_addr", "default"),
        "master_port": dist.sources.get("master_port", "default"),
        "launcher": dist.launcher,
    }
    return LaunchConfig(
        target=target, nproc_per_node=nproc[0], nnodes=nnodes, node_rank=dist.node_rank,
        master_addr=dist.master_addr, master_port=dist.master_port, rdzv=rdzv,
        max_restarts=max_restarts, python=python, run_id=dist.job_id or "ddpnet",
        iface_env=MappingProxyType(dict(iface_env)), sources=MappingProxyType(sources),
        notes=(*dist.notes, *notes), watch_env=MappingProxyType(dict(watch_env or {})),
    )


def per_node(cfg: LaunchConfig, all_nodes: bool) -> list[dict[str, Any]]:
    """The command each node runs: every node rank for a static launch with ``all_nodes``
    (a dry run from one machine), else just this node."""
    ranks = range(cfg.nnodes.max) if all_nodes and cfg.rdzv == "static" else [cfg.node_rank]
    out = []
    for r in ranks:
        node_cfg = dataclasses.replace(cfg, node_rank=r)
        argv, env = build_torchrun(node_cfg)
        out.append({"node_rank": r if cfg.rdzv == "static" else None, "argv": argv, "env": env,
                    "command": shell_line(argv, env),
                    "ranks": [r * cfg.nproc_per_node + i for i in range(cfg.nproc_per_node)]
                    if cfg.rdzv == "static" else None})
    return out

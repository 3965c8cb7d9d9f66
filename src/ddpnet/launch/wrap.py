"""The exec wrapper: whatever started this process (mpirun, srun, torchrun, by hand), export
the torch variables an unmodified ``init_process_group("gloo")`` script reads, then exec it.

``torch_env`` is pure; :func:`exec_target` (the edge) replaces this process, so signals and
the exit code belong to the script itself.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from ddpnet.config import DistConfig
from ddpnet.launch.command import Target


def torch_env(cfg: DistConfig, iface_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables ``env://`` and torchrun-style scripts read, from a resolved config."""
    env = {
        "RANK": str(cfg.rank),
        "WORLD_SIZE": str(cfg.world_size),
        "LOCAL_RANK": str(cfg.local_rank),
        "LOCAL_WORLD_SIZE": str(cfg.local_world_size),
        "NODE_RANK": str(cfg.node_rank),
        "GROUP_RANK": str(cfg.node_rank),
        "NNODES": str(cfg.num_nodes),
        "MASTER_ADDR": cfg.master_addr,
        "MASTER_PORT": str(cfg.master_port),
        "DDPNET_LAUNCHER": cfg.launcher,
    }
    env.update(iface_env or {})
    return env


def exec_target(target: Target, env: Mapping[str, str]) -> None:
    """Replace this process with ``target`` (edge); never returns."""
    argv = target.python_argv(sys.executable)
    merged = dict(os.environ)
    merged.update(env)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(argv[0], argv, merged)


@dataclass(frozen=True)
class ExecOptions:
    """``ddpnet exec``: what to run, and the interface to pin (None: the selection's)."""

    program: tuple[str, ...]
    ifname: str | None = None
    #: the hang watch attached to the program (``--no-watch``: off)
    watch: bool = True


def run(options: ExecOptions) -> None:
    """Resolve the job from this process's launcher, then exec the program (edge; returns
    only by raising: a bad program or configuration is a ConfigError before the exec)."""
    from ddpnet.env.jobport import read_port_range
    from ddpnet.env.resolve import resolve_config
    from ddpnet.launch import iface
    from ddpnet.launch.run import check_program
    from ddpnet.watch.attach import ranks_env

    target = Target.parse(options.program)
    check_program(target)  # Python's own "can't open file" is no ddpnet error line
    cfg = resolve_config(os.environ, {}, port_range=read_port_range())
    choice = iface.choose(cfg, os.environ, options.ifname)
    exec_target(target, {**torch_env(cfg, choice.env), **ranks_env(os.environ, options.watch)})

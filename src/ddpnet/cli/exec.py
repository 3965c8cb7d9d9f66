"""``ddpnet exec``: export the torch variables resolved from any launcher, then exec."""

from __future__ import annotations

import os

import click


@click.command("exec", context_settings={"ignore_unknown_options": True,
                                         "allow_interspersed_args": False})
@click.option("--ifname", default=None, help="Interface for GLOO/NCCL/TP_SOCKET_IFNAME.")
@click.argument("program", nargs=-1, required=True, type=click.UNPROCESSED)
def command(ifname: str | None, program: tuple[str, ...]) -> int:
    """Run PROGRAM with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT and the interface variables exported, whatever started this process
    (srun, mpirun, torchrun, by hand): an unmodified env:// script then just works.

    \b
    srun -N 2 --ntasks-per-node 4 ddpnet exec -- train.py
    mpirun -np 8 -x MASTER_ADDR ddpnet exec -- train.py
    """
    from ddpnet.env.jobport import read_port_range
    from ddpnet.env.resolve import resolve_config
    from ddpnet.launch import iface
    from ddpnet.launch.command import Target
    from ddpnet.launch.wrap import exec_target, torch_env

    target = Target.parse(program)
    cfg = resolve_config(os.environ, {}, port_range=read_port_range())
    choice = iface.choose(cfg, os.environ, ifname)
    exec_target(target, torch_env(cfg, choice.env))
    return 0  # pragma: no cover - exec does not return

"""``ddpnet exec``: export the torch variables resolved from any launcher, then exec."""

from __future__ import annotations

import click

from ddpnet.cli.flags import iface_option, refuse_own_option


@click.command("exec", context_settings={"ignore_unknown_options": True,
                                         "allow_interspersed_args": False})
@iface_option("ifname", "Interface for GLOO/NCCL/TP_SOCKET_IFNAME.", default=None)
@click.option("--watch/--no-watch", default=True, show_default=True,
              help="Attach the hang watch to the program's own init_process_group "
              "(docs/watch.md); --no-watch: no watch, ddpnet.init()'s too.")
@click.argument("program", nargs=-1, required=True, type=click.UNPROCESSED)
def command(ifname: str | None, watch: bool, program: tuple[str, ...]) -> int:
    """Run PROGRAM with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT and the interface variables exported, whatever started this process
    (srun, mpirun, torchrun, by hand): an unmodified env:// script then just works, with
    the hang watch attached to its init_process_group.

    \b
    srun -N 2 --ntasks-per-node 4 ddpnet exec -- train.py
    mpirun -np 8 -x MASTER_ADDR ddpnet exec -- train.py
    """
    from ddpnet.launch.wrap import ExecOptions, run

    refuse_own_option(program)
    run(ExecOptions(program=program, ifname=ifname, watch=watch))
    return 0  # pragma: no cover - exec does not return

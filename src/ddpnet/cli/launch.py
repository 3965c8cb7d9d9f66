"""``ddpnet launch``: torchrun (or Open MPI) with the settings resolved for this node."""

from __future__ import annotations

from typing import Any

import click

from ddpnet.cli.flags import iface_option, refuse_own_option
from ddpnet.cli.sshflags import hostfile_options, ssh_flags


@click.command("launch", context_settings={"ignore_unknown_options": True,
                                           "allow_interspersed_args": False})
@click.option("--nproc-per-node", default=None, metavar="auto|N",
              help="Processes per node (default auto: one per GPU, else 1).")
@click.option("--nnodes", default=None, metavar="N|MIN:MAX",
              help="Node count (default: from the launcher, e.g. SLURM_NNODES, else 1).")
@click.option("--node-rank", default=None, help="This node's rank (default: SLURM_NODEID, "
              "NODE_RANK, else 0).")
@click.option("--master-addr", default=None, help="Rank-0 host (default: first host of the "
              "node list, MASTER_ADDR, else 127.0.0.1).")
@click.option("--master-port", default=None, help="Default: MASTER_PORT, derived from the "
              "SLURM job id, else 29500.")
@click.option("--rdzv", type=click.Choice(["static", "c10d"]), default=None,
              help="static (default) pins rank 0 to node rank 0 (MASTER_ADDR); c10d (default "
              "with --max-restarts) gives a fresh store to every restart.")
@click.option("--max-restarts", type=int, default=0, show_default=True,
              help="torchrun restarts of the worker group after a failure.")
@click.option("--local", "local", type=int, default=None, metavar="N",
              help="N processes on this machine only (the mp.spawn pattern).")
@click.option("--via", type=click.Choice(["torchrun", "mpirun"]), default="torchrun",
              show_default=True, help="The engine that starts the ranks.")
@click.option("--hosts", default=None, metavar="H1:N,H2:N",
              help="mpirun hosts and slots (with --via mpirun).")
@iface_option("ifname", "Interface for GLOO/NCCL/TP_SOCKET_IFNAME (default: selected "
              "toward MASTER_ADDR).", default=None)
@click.option("--allow-run-as-root", is_flag=True, help="Passed to mpirun.")
@click.option("--oversubscribe", is_flag=True, help="Passed to mpirun.")
@click.option("--watch/--no-watch", default=True, show_default=True,
              help="Attach the hang watch to the script's own init_process_group "
              "(docs/watch.md); --no-watch: no watch, ddpnet.init()'s too.")
@click.option("--metrics-port", type=click.IntRange(1, 65535), default=None,
              help="Rank 0's watch serves the job's Prometheus metrics on this port, on the "
              "job's interface (docs/watch.md; sets DDPNET_METRICS_PORT for the ranks).")
@click.option("--dry-run", is_flag=True, help="Print the command and environment per node.")
@click.option("--json", "as_json", is_flag=True, help="With --dry-run: one JSON object.")
@ssh_flags
@click.argument("program", nargs=-1, type=click.UNPROCESSED)
def command(nproc_per_node: str | None, nnodes: str | None, node_rank: str | None,
            master_addr: str | None, master_port: str | None, rdzv: str | None,
            max_restarts: int, local: int | None, via: str, hosts: str | None,
            ifname: str | None, allow_run_as_root: bool, oversubscribe: bool, watch: bool,
            metrics_port: int | None, dry_run: bool,
            as_json: bool, program: tuple[str, ...], **ssh: Any) -> int:
    """Run SCRIPT (or -m MODULE) on every rank of this node with torchrun, or on all ranks
    with mpirun, with MASTER_ADDR, ranks and interface variables filled in.

    \b
    ddpnet launch --nproc-per-node 4 -- train.py --epochs 3
    ddpnet launch --nnodes 2 --node-rank 1 --master-addr node0 -- train.py
    srun --ntasks-per-node=1 ddpnet launch -- train.py        (all from SLURM)
    ddpnet launch --via mpirun --hosts node0:4,node1:4 -- train.py
    ddpnet launch --local 4 -- train.py                         (one machine)
    ddpnet launch --hostfile hosts -- train.py              (every host, over SSH)
    """
    from ddpnet.launch.render import print_warnings, render
    from ddpnet.launch.run import LaunchOptions, prepare, run
    from ddpnet.output import finish

    refuse_own_option(program)
    plan = prepare(LaunchOptions(
        program=program, nproc_per_node=nproc_per_node, nnodes=nnodes, node_rank=node_rank,
        master_addr=master_addr, master_port=master_port, rdzv=rdzv,
        max_restarts=max_restarts, local=local, via=via, hosts=hosts, ifname=ifname,
        allow_run_as_root=allow_run_as_root, oversubscribe=oversubscribe, watch=watch,
        metrics_port=metrics_port, dry_run=dry_run,
        as_json=as_json, hostfile=hostfile_options(**ssh)))
    print_warnings(plan.warnings)
    return finish(run(plan), as_json, render)

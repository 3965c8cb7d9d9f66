"""``ddpnet sbatch``: render a SLURM batch script for a ddpnet job; optionally submit it."""

from __future__ import annotations

import sys

import click

from ddpnet.cli.flags import iface_option, program_target


@click.command("sbatch", context_settings={"ignore_unknown_options": True,
                                           "allow_interspersed_args": False})
@click.option("--nodes", type=int, required=True, help="Nodes in the allocation.")
@click.option("--ntasks-per-node", type=int, default=None, help="Ranks per node (default 1).")
@click.option("--ntasks", type=int, default=None,
              help="Total ranks (must equal nodes x ntasks-per-node; prefer the latter).")
@click.option("--gpus-per-node", type=int, default=None)
@click.option("--cpus-per-task", type=int, default=None)
@click.option("--partition", default=None)
@click.option("--time", default=None, help="Time limit, e.g. 02:00:00.")
@click.option("--output", default="ddpnet-%j.out", show_default=True)
@click.option("--job-name", default="ddpnet", show_default=True)
@click.option("--engine", type=click.Choice(["torchrun", "srun"]), default="torchrun",
              show_default=True,
              help="torchrun: one srun task per node runs ddpnet launch; srun: one task per "
              "rank runs ddpnet exec.")
@click.option("--max-restarts", type=int, default=0, show_default=True,
              help="torchrun restarts (engine torchrun).")
@iface_option("ifname", "Pin GLOO/NCCL/TP_SOCKET_IFNAME on every node.", default=None)
@click.option("--preflight", is_flag=True, help="Run `ddpnet check` on every node first.")
@click.option("--requeue/--no-requeue", default=False, show_default=True,
              help="#SBATCH --requeue; requeue the job when its step exits 75 (checkpoint "
              "saved on the --preempt-signal warning).")
@click.option("--max-recoveries", type=int, default=2, show_default=True,
              help="With --requeue: when the watch blames a node (link down, unreachable, "
              "a rank on it dead or frozen), drain it (or exclude it) and requeue, resuming "
              "from the newest checkpoint, at most this many times (0: never).")
@click.option("--spare-nodes", type=int, default=0, show_default=True,
              help="With --requeue: allocate this many nodes more than --nodes (#SBATCH "
              "--no-kill); when the watch blames a node, drain it and start the step again "
              "on the others inside the allocation from the newest checkpoint, no requeue.")
@click.option("--preempt-signal", default=None,
              help="[B:]SIG@SECONDS warning before the time limit [default with --requeue: "
              "USR1@90, to every rank; B: signals only the script, which forwards it].")
@click.option("--script", "script_path", type=click.Path(dir_okay=False), default=None,
              help="Write the script here instead of stdout.")
@click.option("--submit", is_flag=True, help="Submit with sbatch and print the job id.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object: script, script_path, job_id (errors too).")
@click.argument("program", nargs=-1, type=click.UNPROCESSED)
def command(nodes: int, ntasks_per_node: int | None, ntasks: int | None,
            gpus_per_node: int | None, cpus_per_task: int | None, partition: str | None,
            time: str | None, output: str, job_name: str, engine: str, max_restarts: int,
            ifname: str | None, preflight: bool, requeue: bool, max_recoveries: int,
            spare_nodes: int, preempt_signal: str | None,
            script_path: str | None, submit: bool, as_json: bool,
            program: tuple[str, ...]) -> int:
    """Render a batch script that runs SCRIPT (or -m MODULE) on every rank.

    \b
    ddpnet sbatch --nodes 2 --ntasks-per-node 4 --gpus-per-node 4 -- train.py > job.sh
    ddpnet sbatch --nodes 2 --ntasks-per-node 4 --preflight --submit -- train.py
    """
    from ddpnet.launch.render import render_sbatch
    from ddpnet.launch.sbatch import SbatchConfig
    from ddpnet.launch.submit import SbatchOptions, run
    from ddpnet.output import finish

    cfg = SbatchConfig(
        target=program_target(program), nodes=nodes, ntasks_per_node=ntasks_per_node,
        ntasks=ntasks, gpus_per_node=gpus_per_node, cpus_per_task=cpus_per_task,
        partition=partition, time=time, output=output, job_name=job_name, engine=engine,
        preflight=preflight, requeue=requeue, preempt_signal=preempt_signal, ifname=ifname,
        max_restarts=max_restarts, max_recoveries=max_recoveries, spare_nodes=spare_nodes,
        python=sys.executable,
    )
    result = run(SbatchOptions(cfg, script_path=script_path, submit=submit))
    return finish(result, as_json, render_sbatch)

"""``ddpnet env``: show the resolved configuration, where each value came from, and the
``export`` lines and ``torchrun`` command that reproduce it on each node."""

from __future__ import annotations

import click


@click.command("env")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--init-method", default=None, help="env://, tcp://HOST:PORT or file:///PATH.")
@click.option("--rank", default=None, help="Override the rank.")
@click.option("--world-size", default=None, help="Override the world size.")
@click.option("--master-addr", default=None, help="Override MASTER_ADDR.")
@click.option("--master-port", default=None, help="Override MASTER_PORT.")
def command(as_json: bool, init_method: str | None, rank: str | None, world_size: str | None,
            master_addr: str | None, master_port: str | None) -> int:
    """Resolve rank, world size and master from whatever launched this process.

    Launchers, in priority order: torchrun, azureml, openmpi, mpich, mvapich, trainjob,
    pytorchjob, jobset, sagemaker, slurm, lsf, pbs, sge, manual (RANK/WORLD_SIZE exported),
    local. Two that do not nest by design are reported as ambiguous. Flags override the
    launcher.
    """
    from ddpnet.env.report import EnvOptions
    from ddpnet.net.report import render, run
    from ddpnet.output import finish

    options = EnvOptions(init_method=init_method, rank=rank, world_size=world_size,
                         master_addr=master_addr, master_port=master_port)
    return finish(run(options), as_json, render)

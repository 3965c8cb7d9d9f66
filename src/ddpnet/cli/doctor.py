"""``ddpnet doctor``: check this node for every cause of a hang or a slow job, with fixes."""

from __future__ import annotations

import functools

import click


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--master-addr", default=None, help="MASTER_ADDR (default: ddpnet env's).")
@click.option("--master-port", default=None, type=click.IntRange(1, 65535),
              help="MASTER_PORT (default: ddpnet env's).")
@click.option("--cluster-subnet", default=None, metavar="CIDR",
              help="Subnet of the cluster (default: the training interface's).")
@click.option("-v", "--verbose", is_flag=True, help="Show detail under every row.")
@click.option("--slurm-health", is_flag=True,
              help="Serve as SLURM's HealthCheckProgram: drain this node when a check that "
              "breaks a job fails (its cluster interface toward the controller, names, "
              "ephemeral ports), the check and fix as reason; resume it once it passes if "
              "ddpnet drained it; never touch a node drained by someone else.")
@click.option("--node", default=None, help="This node's SLURM name (default: the short "
              "hostname), with --slurm-health.")
def command(as_json: bool, master_addr: str | None, master_port: int | None,
            cluster_subnet: str | None, verbose: bool, slurm_health: bool,
            node: str | None) -> int:
    """Check this node: rendezvous, names, interfaces, firewall, SELinux, sysctls, software,
    RDMA and environment leftovers, each pass/warn/fail with the fix. Exit 1 when any fails.
    """
    from ddpnet.doctor.render import render
    from ddpnet.doctor.run import DoctorOptions, run
    from ddpnet.output import finish

    if slurm_health:
        from ddpnet.doctor import slurm_health as health

        return finish(health.slurm_health(node, master_addr, cluster_subnet), as_json,
                      health.render)

    options = DoctorOptions(master_addr=master_addr, master_port=master_port,
                            cluster_subnet=cluster_subnet)
    return finish(run(options), as_json, functools.partial(render, verbose=verbose))

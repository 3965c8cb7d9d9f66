"""``ddpnet tune``: render the guides' system set-up for this node, show it as unified diffs
and commands, apply it (``--apply``, root) with backups and a journal, undo it (``--revert``)."""

from __future__ import annotations

from pathlib import Path

import click

from ddpnet.cli.flags import iface_option
from ddpnet.tune.model import DISTROS, FIREWALLS, PROFILES


@click.command("tune")
@click.option("--distro", type=click.Choice(["auto", *DISTROS]), default="auto",
              show_default=True, help="Target distribution (auto: /etc/os-release).")
@click.option("--cluster-subnet", default=None, metavar="CIDR",
              help="The only network the training ports are opened to.")
@click.option("--master-port", default="29500", show_default=True, help="MASTER_PORT.")
@iface_option("iface", "Cluster interface (auto: ddpnet.net selection).", default=None)
@click.option("--firewall", type=click.Choice(["auto", *FIREWALLS]), default="auto",
              show_default=True, help="Firewall to render rules for (auto: the active one).")
@click.option("--zone", default=None,
              help="firewalld zone for the rules (default: firewalld's default zone).")
@click.option("--profile", type=click.Choice(["auto", *PROFILES]), default="auto",
              show_default=True, help="sysctl profile (auto: from the NIC's speed).")
@click.option("--port-range", default=None, metavar="LO-HI",
              help="Narrow ip_local_port_range and open only these ephemeral ports.")
@click.option("--static-ip", default=None, metavar="ADDR/PREFIX", help="Static address.")
@click.option("--gateway", default=None, help="Default gateway for --static-ip.")
@click.option("--dns", default=None, metavar="A,B", help="DNS servers for --static-ip.")
@click.option("--root", "root_dir", default="/", show_default=True, metavar="DIR",
              type=click.Path(file_okay=False, path_type=Path),
              help="Render into an alternate root (images, tests); commands are not run.")
@click.option("--apply", "do_apply", is_flag=True, help="Write and load it (root).")
@click.option("--revert", "do_revert", is_flag=True,
              help="Undo every --apply: restore files byte for byte, remove what was added.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def command(
    distro: str, cluster_subnet: str | None, master_port: str, iface: str | None,
    firewall: str, zone: str | None, profile: str, port_range: str | None, static_ip: str | None,
    gateway: str | None, dns: str | None, root_dir: Path, do_apply: bool, do_revert: bool,
    as_json: bool,
) -> int:
    """Tune this node for multi-node training: sysctl drop-in, firewall rules open only to
    the cluster subnet, SELinux report, static IP, /etc/hosts fix, GLOO/NCCL env file.

    Without --apply it is a dry run: a unified diff per file and the commands it would run.
    """
    from ddpnet.output import finish
    from ddpnet.tune.render import render
    from ddpnet.tune.run import TuneOptions, run

    options = TuneOptions(
        distro=distro, cluster_subnet=cluster_subnet, master_port=master_port, iface=iface,
        firewall=firewall, zone=zone, profile=profile, port_range=port_range,
        static_ip=static_ip, gateway=gateway, dns=dns, root=root_dir, apply=do_apply,
        revert=do_revert)
    return finish(run(options), as_json, render)

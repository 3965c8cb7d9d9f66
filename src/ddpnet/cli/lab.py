"""``ddpnet lab``: a virtual multi-node cluster in network namespaces (up/run/fault/status/down).

Every subcommand finds its lab by ``--name`` from the state file, so they work from any shell.
"""

from __future__ import annotations

from typing import Any

import click

from ddpnet.lab import ops, render
from ddpnet.lab.ops import MAX_RUN_TIMEOUT
from ddpnet.output import finish

_NAME = click.option("--name", default="lab", show_default=True, metavar="NAME",
                     help="Lab name (several labs coexist by name).")


@click.group("lab")
def command() -> None:
    """A virtual multi-node cluster in Linux network namespaces, with fault injection.

    \b
    ddpnet lab up --nodes 4 --rate 1gbit
    ddpnet lab run -- python train.py        # NNODES NODE_RANK MASTER_ADDR ... exported
    ddpnet lab fault block-port --node 1 --port 29500
    ddpnet lab status
    ddpnet lab down
    """


@command.command("up")
@_NAME
@click.option("--nodes", "nodes", type=int, required=True, help="Number of nodes.")
@click.option("--subnet", default="198.18.0.0/24", show_default=True,
              help="Lab subnet, inside 198.18.0.0/15; node i gets host address i+1.")
@click.option("--rate", default=None,
              help="Link rate of every node's first NIC, tc units (1gbit, 200mbit).")
@click.option("--delay", default=None,
              help="Delay added to what every node sends on its first NIC (0.1ms).")
@click.option("--loss", default=None,
              help="Percent of what every node sends on its first NIC that is dropped.")
@click.option("--mtu", default=1500, show_default=True, type=int, help="Link MTU.")
@click.option("--ifname", default="eth0", show_default=True, help="Name of each node's NIC.")
@click.option("--json", "as_json", is_flag=True, help="Print the lab as one JSON object.")
@click.option("--slurm", is_flag=True, help="Also start SLURM: a slurmd per node, slurmctld on 0.")
@click.option("--nat", default=None, metavar="NODES",
              help="Put these nodes (0,2-3) on an inner subnet behind a NAT router.")
@click.option("--routed", default=None, metavar="NODES",
              help="The same behind a plain router (forwards, no NAT).")
@click.option("--port-forward", "port_forward", multiple=True, metavar="PORT:NODE",
              help="Router's outer address:PORT DNAT'd to an inner NODE (repeatable).")
@click.option("--second-net", default=None, metavar="SUBNET",
              help="A second network (inside 198.18.0.0/15): each node gets a second NIC on "
              "it, host i+1; /etc/hosts stays on the first.")
@click.option("--second-ifname", default="eth1", show_default=True,
              help="Name of each node's second NIC.")
@click.option("--second-rate", default=None, help="Link rate of the second NIC (tc units).")
@click.option("--second-first", default=None, metavar="NODES",
              help="On these nodes the second NIC is created first (lower ifindex).")
def up_cmd(name: str, nodes: int, as_json: bool, port_forward: tuple[str, ...],
           **opts: Any) -> int:
    """Build the lab (a no-op when it is already up with this shape)."""
    options = ops.UpOptions(name=name, nodes=nodes, port_forward=port_forward, **opts)
    return finish(ops.up(options), as_json, render.render_up)


@command.command("run", context_settings={"ignore_unknown_options": True},
                 short_help="Run CMD in every node at once, lines prefixed by node.")
@_NAME
@click.option("--nodes", "nodes", default="all", show_default=True,
              help="Nodes to run on: all, or a list such as 0,2-3.")
@click.option("--timeout", type=click.FloatRange(0, MAX_RUN_TIMEOUT, min_open=True),
              default=None, help="Kill the command after S seconds (exit 124); default: no "
              "limit.")
@click.option("--env", "env", multiple=True, metavar="K=V", help="Extra variable (repeatable).")
@click.option("--master-port", default=29500, show_default=True, type=click.IntRange(1, 65535),
              help="MASTER_PORT exported to every node.")
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
def run_cmd(name: str, nodes: str, timeout: float | None, env: tuple[str, ...],
            master_port: int, argv: tuple[str, ...]) -> int:
    """Run CMD in every chosen node at once; lines prefixed with the node; exit = the worst.

    Exports NNODES, NODE_RANK, MASTER_ADDR (node 0, or the first chosen node), MASTER_PORT,
    RANK and WORLD_SIZE (one process per node).
    """
    options = ops.RunOptions(name=name, argv=argv, nodes=nodes, timeout=timeout, env=env,
                         master_port=master_port)
    return finish(ops.run(options), False)


@command.command("fault", short_help="Inject a fault on a node, or clear faults.")
@_NAME
@click.argument("kind", metavar="KIND")
@click.option("--node", "node", required=True, help="Node index (clear also takes 'all').")
@click.option("--port", type=int, default=None, help="block-port: the TCP port; "
              "block-ephemeral: MASTER_PORT to keep open (29500).")
@click.option("--reject", is_flag=True, default=None,
              help="block-port, block-ephemeral: refuse (TCP reset) instead of drop.")
@click.option("--for", "for_s", type=float, default=None, help="link-down: back up after S s.")
@click.option("--rate", default=None, help="rate: the link rate (100mbit).")
@click.option("--percent", type=float, default=None, help="loss: percent dropped.")
@click.option("--ms", type=float, default=None, help="delay: milliseconds added.")
@click.option("--jitter", "jitter_ms", type=float, default=None,
              help="delay: each packet's delay varies by up to this many ms either way.")
@click.option("--mtu", type=int, default=None,
              help="mtu: the node's interface MTU; port-mtu: its switch port's.")
@click.option("--iface", default=None,
              help="extra-iface: its name (docker0); twin-nic: its name (eth1).")
@click.option("--host", default=None, help="hosts-entry: the name to map.")
@click.option("--address", default=None,
              help="hosts-entry: the address it maps to; vip: the VIP; extra-iface, "
              "twin-nic, address: a CIDR.")
@click.option("--json", "as_json", is_flag=True, help="Print the node's faults as JSON.")
def fault_cmd(name: str, kind: str, node: str, as_json: bool, **opts: Any) -> int:
    """Inject a fault on one node, or `clear` a node's (or all nodes') faults.

    Link faults act on the first NIC (never --second-net's); block-* firewall the node.

    \b
    KIND: block-port --port P [--reject] | block-ephemeral [--port MASTER_PORT] [--reject]
          link-down [--for S] | rate --rate R | loss --percent X
          delay --ms X [--jitter J]
          mtu --mtu M | port-mtu --mtu M | hostname-loopback
          extra-iface [--iface NAME] | hosts-entry --host NAME --address IP
          vip --address IP | twin-nic --address CIDR [--iface eth1]
          policy-route | no-route | address --address CIDR | clear
    """
    options = ops.FaultOptions(name=name, kind=kind, node=node, params=opts)
    return finish(ops.fault(options), as_json, render.render_fault)


@command.command("status")
@_NAME
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def status_cmd(name: str, as_json: bool) -> int:
    """Show the lab's nodes, addresses, shaping and faults."""
    return finish(ops.status(name), as_json, render.render_status)


@command.command("down", short_help="Remove the lab and everything it made.")
@_NAME
def down_cmd(name: str) -> int:
    """Remove the lab: its namespaces, veths, /etc/netns files, processes (also half-built)."""
    return finish(ops.down(name), False, render.render_down)

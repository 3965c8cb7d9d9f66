"""``ddpnet lab``: a virtual multi-node cluster in network namespaces (up/run/fault/status/down).

Every subcommand finds its lab by ``--name`` from the state file, so they work from any shell.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import click

from ddpnet.errors import ConfigError
from ddpnet.exitcodes import ExitCode

_NAME = click.option("--name", default="lab", show_default=True, metavar="NAME",
                     help="Lab name (several labs coexist by name).")


def _attach(name: str) -> Any:
    from ddpnet.lab import Lab
    from ddpnet.lab import state as statemod

    if statemod.load(name) is None:
        others = statemod.names()
        hint = (f"labs that are up: {', '.join(others)} (use --name)" if others
                else f"start one: ddpnet lab up --name {name} --nodes N")
        raise ConfigError(f"no lab named {name!r} is up", hint)
    return Lab.attach(name)


def _print_nodes(status: dict[str, Any]) -> None:
    from rich.table import Table

    from ddpnet.lab.faults import describe
    from ddpnet.output import console

    table = Table(title=f"lab {status['name']} ({status['subnet']})", header_style="bold")
    for col in ("node", "hostname", "address", "ifname", "shaping", "faults"):
        table.add_column(col)
    for n in status["nodes"]:
        sh = n["shaping"]
        shaping = ", ".join(
            f"{k} {v}" for k, v in (("rate", sh["rate"]),
                                    ("delay", f"{sh['delay_ms']:g}ms" if sh["delay_ms"] else None),
                                    ("loss", f"{sh['loss_pct']:g}%" if sh["loss_pct"] else None))
            if v) or "-"
        addrs = " ".join([n["address"], *n.get("extra_addresses", [])])
        faults = ", ".join(describe(f) for f in n["faults"]) or "-"
        table.add_row(n["namespace"], n["hostname"], addrs, n["ifname"], shaping, faults)
    console().print(table)


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
@click.option("--rate", default=None, help="Link rate of every node, tc units (1gbit, 200mbit).")
@click.option("--delay", default=None, help="Delay added to what every node sends (0.1ms).")
@click.option("--loss", default=None, help="Percent of what every node sends that is dropped.")
@click.option("--mtu", default=1500, show_default=True, type=int, help="Link MTU.")
@click.option("--ifname", default="eth0", show_default=True, help="Name of each node's NIC.")
@click.option("--json", "as_json", is_flag=True, help="Print the lab as one JSON object.")
@click.option("--slurm", is_flag=True, help="Also start SLURM: a slurmd per node, slurmctld on 0.")
def up_cmd(name: str, nodes: int, subnet: str, rate: str | None, delay: str | None,
           loss: str | None, mtu: int, ifname: str, as_json: bool, slurm: bool = False) -> int:
    """Build the lab (a no-op when it is already up with this shape)."""
    import time

    from ddpnet.lab import Lab

    lab = Lab(name=name, nodes=nodes, subnet=subnet, rate=rate, delay=delay, loss=loss,
              mtu=mtu, ifname=ifname)
    started = time.monotonic()
    built = lab.up()
    if slurm:  # SLURM on the lab lives in ddpnet.lab.slurm (owner: launch)
        from ddpnet.lab import slurm as labslurm

        labslurm.start(lab)
    took = time.monotonic() - started
    status = lab.status()
    if as_json:
        from ddpnet.output import emit_json

        emit_json({**status, "created": built, "seconds": round(took, 3)})
        return int(ExitCode.OK)
    from ddpnet.output import console

    _print_nodes(status)
    console().print(f"lab {name}: {'up' if built else 'already up'} "
                    f"({len(lab.nodes)} nodes, {took:.2f} s); "
                    f"run: ddpnet lab run --name {name} -- CMD; remove: ddpnet lab down "
                    f"--name {name}", markup=False)
    if slurm:
        console().print(labslurm.describe(name), markup=False)
    return int(ExitCode.OK)


def _parse_env(pairs: tuple[str, ...]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"bad --env {pair!r}: expected KEY=VALUE",
                              "e.g. --env NCCL_DEBUG=INFO")
        env[key] = value
    return env


@command.command("run", context_settings={"ignore_unknown_options": True})
@_NAME
@click.option("--nodes", "nodes", default="all", show_default=True,
              help="Nodes to run on: all, or a list such as 0,2-3.")
@click.option("--timeout", type=click.FloatRange(0, 1e9, min_open=True), default=None,
              help="Kill the command after S seconds (exit 124); default: no limit.")
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
    from ddpnet.lab.topology import LabNode

    lab = _attach(name)
    lab.node(0)
    extra = _parse_env(env)
    width = max(len(n.name) for n in lab.nodes)
    lock = threading.Lock()

    def sink(node: LabNode, stream: str, line: str) -> None:
        out = sys.stdout if stream == "stdout" else sys.stderr
        with lock:
            out.write(f"{node.name:<{width}} | {line}\n")
            out.flush()

    results = lab.run(list(argv), nodes=nodes, env=extra, timeout=timeout,
                      master_port=master_port, on_line=sink)
    for r in results:
        if r.timed_out:
            sink(r.node, "stderr", f"killed after the {timeout:g} s timeout (exit 124)")
        elif r.returncode != 0:
            sink(r.node, "stderr", f"exit {r.returncode}")
    codes = [r.returncode if r.returncode >= 0 else 128 - r.returncode for r in results]
    return int(max(codes))


@command.command("fault")
@_NAME
@click.argument("kind", metavar="KIND")
@click.option("--node", "node", required=True, help="Node index (clear also takes 'all').")
@click.option("--port", type=int, default=None, help="block-port: the TCP port; "
              "block-ephemeral: MASTER_PORT to keep open (29500).")
@click.option("--reject", is_flag=True, default=None, help="block-port: refuse instead of drop.")
@click.option("--for", "for_s", type=float, default=None, help="link-down: back up after S s.")
@click.option("--rate", default=None, help="rate: the link rate (100mbit).")
@click.option("--percent", type=float, default=None, help="loss: percent dropped.")
@click.option("--ms", type=float, default=None, help="delay: milliseconds added.")
@click.option("--mtu", type=int, default=None, help="mtu: the node's interface MTU.")
@click.option("--iface", default=None, help="extra-iface: its name (docker0).")
@click.option("--json", "as_json", is_flag=True, help="Print the node's faults as JSON.")
def fault_cmd(name: str, kind: str, node: str, as_json: bool, **opts: Any) -> int:
    """Inject a fault on one node, or `clear` a node's (or all nodes') faults.

    \b
    KIND: block-port --port P [--reject] | block-ephemeral [--port MASTER_PORT]
          link-down [--for S] | rate --rate R | loss --percent X | delay --ms X
          mtu --mtu M | hostname-loopback | extra-iface [--iface NAME] | clear
    """
    from ddpnet.lab.faults import KINDS, describe
    from ddpnet.output import console, emit_json

    if kind != "clear" and kind not in KINDS:
        raise ConfigError(f"unknown fault kind {kind!r}",
                          "kinds: " + ", ".join(KINDS) + ", clear")
    lab = _attach(name)
    if kind == "clear":
        target = None if node == "all" else _node_index(node)
        lab.clear(target)
        if as_json:
            emit_json({"name": name, "cleared": "all" if target is None else target})
        else:
            console().print(f"lab {name}: cleared faults on "
                            f"{'all nodes' if target is None else lab.node(target).name}",
                            markup=False)
        return int(ExitCode.OK)
    index = _node_index(node)
    rec = lab.fault(kind, index, **{k: v for k, v in opts.items() if v is not None})
    if as_json:
        emit_json({"name": name, "node": index, "fault": rec, "faults": lab.faults(index)})
    else:
        console().print(f"lab {name}: {lab.node(index).name}: {describe(rec)}", markup=False)
    return int(ExitCode.OK)


def _node_index(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"bad --node {text!r}: expected a node index",
                          "for example --node 1 (clear also takes --node all)") from None


@command.command("status")
@_NAME
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def status_cmd(name: str, as_json: bool) -> int:
    """Show the lab's nodes, addresses, shaping and faults."""
    status = _attach(name).status()
    if as_json:
        from ddpnet.output import emit_json

        emit_json(status)
    else:
        _print_nodes(status)
    return int(ExitCode.OK)


@command.command("down")
@_NAME
def down_cmd(name: str) -> int:
    """Remove the lab: its namespaces, veths, /etc/netns files, processes (also half-built)."""
    from ddpnet.lab import slurm as labslurm
    from ddpnet.lab.lab import remove_lab
    from ddpnet.output import console

    labslurm.stop(name)
    remove_lab(name)
    console().print(f"lab {name}: down", markup=False)
    return int(ExitCode.OK)

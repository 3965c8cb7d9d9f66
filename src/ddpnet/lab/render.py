"""What ``ddpnet lab`` prints for people: the nodes table, one line per change, and the
output of ``lab run`` prefixed with each node's name as it comes."""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ddpnet.lab.result import DownResult, FaultResult, StatusResult, UpResult
from ddpnet.lab.topology import LabNode

if TYPE_CHECKING:
    from rich.console import Console


def shaping_text(shaping: Mapping[str, Any]) -> str:
    """``rate 1gbit, delay 0.1ms, loss 1%`` (only what is set), or ``-``."""
    return ", ".join(
        f"{k} {v}" for k, v in (
            ("rate", shaping["rate"]),
            ("delay", f"{shaping['delay_ms']:g}ms" if shaping["delay_ms"] else None),
            ("jitter", f"{shaping['jitter_ms']:g}ms" if shaping.get("jitter_ms") else None),
            ("loss", f"{shaping['loss_pct']:g}%" if shaping["loss_pct"] else None))
        if v) or "-"


def nodes_table(status: Mapping[str, Any], out: Console) -> None:
    from ddpnet.lab.faults import describe
    from ddpnet.output import table as new_table

    second = status.get("second_net")
    nets = f"{status['subnet']}" + (f", second {second}" if second else "")
    table = new_table(f"lab {status['name']} ({nets})",
                      ("node", "hostname", "address", "ifname",
                       *(("second",) if second else ()), "shaping", "faults"))
    for n in status["nodes"]:
        addrs = " ".join([n["address"], *n.get("extra_addresses", [])])
        faults = ", ".join(describe(f) for f in n["faults"]) or "-"
        extra = (second_text(n),) if second else ()
        table.add_row(n["namespace"], n["hostname"], addrs, n["ifname"], *extra,
                      shaping_text(n["shaping"]), faults)
    out.print(table)
    if status.get("router"):
        out.print(router_line(status["router"]), markup=False)


def second_text(node: Mapping[str, Any]) -> str:
    """``eth1 198.18.2.1`` and its shaping when it has one (the ``second`` column)."""
    shaping = node.get("second_shaping")
    rate = shaping_text(shaping) if shaping else "-"
    return f"{node.get('second_ifname')} {node.get('second_address')}" + (
        f" ({rate})" if rate != "-" else "")


def router_line(rt: Mapping[str, Any]) -> str:
    """``router lab-rt (nat): 198.18.0.254 | 198.19.1.1 (198.19.1.0/24); 29500 -> ...``."""
    line = (f"router {rt['namespace']} ({rt['mode']}): {rt['outer']} outside, {rt['inner']} "
            f"on {rt['subnet']}")
    forwards = ", ".join(f"{f['port']} -> {f['to']}" for f in rt.get("forwards") or ())
    return line + (f"; port forwards {forwards}" if forwards else "")


def render_up(result: UpResult, out: Console) -> None:
    name = result.status["name"]
    nodes_table(result.status, out)
    out.print(f"lab {name}: {'up' if result.created else 'already up'} "
              f"({len(result.status['nodes'])} nodes, {result.seconds:.2f} s); "
              f"run: ddpnet lab run --name {name} -- CMD; remove: ddpnet lab down "
              f"--name {name}", markup=False)
    if result.slurm:
        out.print(result.slurm, markup=False)


def render_fault(result: FaultResult, out: Console) -> None:
    from ddpnet.lab.faults import describe

    if result.fault is None:
        where = "all nodes" if result.node is None else result.node_name
        out.print(f"lab {result.name}: cleared faults on {where}", markup=False)
    else:
        out.print(f"lab {result.name}: {result.node_name}: {describe(result.fault)}",
                  markup=False)


def render_status(result: StatusResult, out: Console) -> None:
    nodes_table(result.status, out)


def render_down(result: DownResult, out: Console) -> None:
    out.print(f"lab {result.name}: down", markup=False)


class PrefixedLines:
    """``node | line`` on our stdout or stderr as each node writes it (one lock: lines of
    concurrent nodes never interleave mid-line)."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.lock = threading.Lock()

    def __call__(self, node: LabNode, stream: str, line: str) -> None:
        out = sys.stdout if stream == "stdout" else sys.stderr
        with self.lock:
            out.write(f"{node.name:<{self.width}} | {line}\n")
            out.flush()

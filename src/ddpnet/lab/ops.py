"""``ddpnet lab``'s subcommands: up, run, fault, status, down. Each takes frozen options
and returns a result that ``--json`` prints; every one finds its lab by name (validated
first: a name is also a file name under /run and a namespace prefix)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ddpnet.errors import ConfigError
from ddpnet.lab.lab import Lab
from ddpnet.lab.result import DownResult, FaultResult, RunResult, StatusResult, UpResult
from ddpnet.lab.topology import validate_name


def attach(name: str) -> Lab:
    """The lab ``name`` that is up; a ConfigError naming the labs that are, if it is not."""
    from ddpnet.lab import state as statemod

    validate_name(name)
    if statemod.load(name) is None:
        others = statemod.names()
        hint = (f"labs that are up: {', '.join(others)} (use --name)" if others
                else f"start one: ddpnet lab up --name {name} --nodes N")
        raise ConfigError(f"no lab named {name!r} is up", hint)
    return Lab.attach(name)


@dataclass(frozen=True)
class UpOptions:
    name: str
    nodes: int
    subnet: str
    rate: str | None = None
    delay: str | None = None
    loss: str | None = None
    mtu: int = 1500
    ifname: str = "eth0"
    slurm: bool = False
    #: nodes behind a NAT router (``--nat 1,2``) or a plain router (``--routed 1,2``)
    nat: str | None = None
    routed: str | None = None
    port_forward: tuple[str, ...] = ()
    #: a second network: every node's second NIC, its rate, and the nodes it comes first on
    second_net: str | None = None
    second_ifname: str = "eth1"
    second_rate: str | None = None
    second_first: str | None = None


def up(options: UpOptions) -> UpResult:
    """Build the lab (a no-op when it is already up with this shape), SLURM on it if asked."""
    validate_name(options.name)
    behind, router = router_nodes(options)
    lab = Lab(name=options.name, nodes=options.nodes, subnet=options.subnet,
              rate=options.rate, delay=options.delay, loss=options.loss, mtu=options.mtu,
              ifname=options.ifname, behind=behind, router=router,
              forwards=[parse_forward(text) for text in options.port_forward],
              second_net=options.second_net, second_ifname=options.second_ifname,
              second_rate=options.second_rate, second_first=second_first(options))
    started = time.monotonic()
    built = lab.up()
    note = None
    if options.slurm:  # SLURM on the lab lives in ddpnet.lab.slurm (owner: launch)
        from ddpnet.lab import slurm as labslurm

        labslurm.start(lab)
        note = labslurm.describe(options.name)
    return UpResult(lab.status(), built, time.monotonic() - started, note)


def router_nodes(options: UpOptions) -> tuple[tuple[int, ...], str]:
    """``--nat`` / ``--routed``: the nodes behind the router and its mode."""
    from ddpnet.lab.topology import ROUTER_NAT, ROUTER_ROUTED, parse_nodes

    if options.nat and options.routed:
        raise ConfigError("--nat and --routed both given: one router per lab",
                          "--nat NODES (masquerade) or --routed NODES (forward only)")
    text, mode = (options.routed, ROUTER_ROUTED) if options.routed else (options.nat, ROUTER_NAT)
    if not text:
        return (), ROUTER_NAT
    if text.strip() == "all" or not isinstance(options.nodes, int) or options.nodes < 1:
        raise ConfigError(f"bad node list {text!r} behind the router",
                          "name some nodes, e.g. --nat 1,2 (the others stay outside)")
    return parse_nodes(text, options.nodes), mode


def second_first(options: UpOptions) -> tuple[int, ...]:
    """``--second-first NODES``: the nodes whose second NIC comes first (``all`` allowed)."""
    from ddpnet.lab.topology import parse_nodes

    if not options.second_first:
        return ()
    if not isinstance(options.nodes, int) or options.nodes < 1:
        return ()  # the lab's own check names the bad node count
    return parse_nodes(options.second_first, options.nodes)


def parse_forward(text: str) -> tuple[int, int]:
    """``--port-forward PORT:NODE``."""
    port, sep, node = text.partition(":")
    if not (sep and port.strip().isdigit() and node.strip().isdigit()) or len(text) > 20:
        raise ConfigError(f"bad --port-forward {text!r}: expected PORT:NODE",
                          "e.g. --nat 0 --port-forward 29500:0")
    return int(port), int(node)


def parse_env(pairs: tuple[str, ...]) -> dict[str, str]:
    """``--env K=V`` pairs."""
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"bad --env {pair!r}: expected KEY=VALUE",
                              "e.g. --env NCCL_DEBUG=INFO")
        env[key] = value
    return env


#: the longest ``lab run --timeout`` (seconds; a day)
MAX_RUN_TIMEOUT = 86400.0


@dataclass(frozen=True)
class RunOptions:
    name: str
    argv: tuple[str, ...]
    nodes: str = "all"
    timeout: float | None = None
    env: tuple[str, ...] = ()
    master_port: int = 29500

    def __post_init__(self) -> None:
        # before the lab is looked up; click's FloatRange lets NaN through
        if self.timeout is not None and not 0 < self.timeout <= MAX_RUN_TIMEOUT:
            raise ConfigError(f"--timeout {self.timeout:g} is outside (0, {MAX_RUN_TIMEOUT:g}] s",
                              "e.g. --timeout 300, or leave it out for no limit")
        if not 1 <= self.master_port <= 65535:
            raise ConfigError(f"--master-port {self.master_port} is outside 1..65535",
                              "e.g. --master-port 29500")


def run(options: RunOptions) -> RunResult:
    """Run the command in every chosen node at once, its lines prefixed with the node as
    they come; then a line per node that failed or was killed at the timeout."""
    from ddpnet.lab.render import PrefixedLines

    lab = attach(options.name)
    lab.node(0)
    extra = parse_env(options.env)
    sink = PrefixedLines(max(len(n.name) for n in lab.nodes))
    results = lab.run(list(options.argv), nodes=options.nodes, env=extra,
                      timeout=options.timeout, master_port=options.master_port, on_line=sink)
    for r in results:
        if r.timed_out:
            sink(r.node, "stderr", f"killed after the {options.timeout:g} s timeout (exit 124)")
        elif r.returncode != 0:
            sink(r.node, "stderr", f"exit {r.returncode}")
    codes = {r.node.name: r.returncode if r.returncode >= 0 else 128 - r.returncode
             for r in results}
    return RunResult(options.name, codes, tuple(r.node.name for r in results if r.timed_out))


@dataclass(frozen=True)
class FaultOptions:
    name: str
    kind: str
    node: str
    params: Mapping[str, Any] = field(default_factory=dict)


def fault(options: FaultOptions) -> FaultResult:
    """Inject ``kind`` on one node, or ``clear`` one node's (or every node's) faults."""
    from ddpnet.lab.faults import KINDS, normalize

    if options.kind != "clear" and options.kind not in KINDS:
        raise ConfigError(f"unknown fault kind {options.kind!r}",
                          "kinds: " + ", ".join(KINDS) + ", clear")
    params = {k: v for k, v in options.params.items() if v is not None}
    if options.kind != "clear":
        normalize(options.kind, params, now=0.0)  # bad options before the lab is looked up
    lab = attach(options.name)
    if options.kind == "clear":
        target = None if options.node == "all" else node_index(options.node)
        lab.clear(target)
        return FaultResult(options.name, target,
                           None if target is None else lab.node(target).name)
    index = node_index(options.node)
    rec = lab.fault(options.kind, index, **params)
    return FaultResult(options.name, index, lab.node(index).name, rec,
                       tuple(lab.faults(index)))


def node_index(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"bad --node {text!r}: expected a node index",
                          "for example --node 1 (clear also takes --node all)") from None


def status(name: str) -> StatusResult:
    return StatusResult(attach(name).status())


def down(name: str) -> DownResult:
    """Remove the lab whatever its state (SLURM on it first)."""
    from ddpnet.lab import slurm as labslurm
    from ddpnet.lab.lab import remove_lab

    validate_name(name)
    labslurm.stop(name)
    remove_lab(name)
    return DownResult(name)

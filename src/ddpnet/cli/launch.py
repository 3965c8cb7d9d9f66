"""``ddpnet launch``: torchrun (or Open MPI) with the settings resolved for this node."""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

import click

from ddpnet.errors import ConfigError
from ddpnet.launch.command import NNodes, Target, rank0_warnings


def _local_names() -> frozenset[str]:
    """This host's names and addresses (edge)."""
    names = {socket.gethostname(), socket.getfqdn(), "localhost"}
    try:
        import psutil

        for addrs in psutil.net_if_addrs().values():
            names.update(a.address.split("%")[0] for a in addrs
                         if a.family in (socket.AF_INET, socket.AF_INET6))
    except Exception:  # pragma: no cover - psutil missing or /proc unreadable
        pass
    return frozenset(names)


def _resolve_addresses(host: str, timeout: float = 2.0) -> frozenset[str]:
    """MASTER_ADDR's addresses, bounded in time (edge)."""
    import concurrent.futures

    def lookup() -> frozenset[str]:
        return frozenset(str(i[4][0]) for i in socket.getaddrinfo(host, None))

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(lookup).result(timeout=timeout)
    except Exception:
        return frozenset()
    finally:
        pool.shutdown(wait=False)


def _warn(message: str) -> None:
    sys.stderr.write(f"ddpnet: warning: {message}\n")


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
@click.option("--ifname", default=None, help="Interface for GLOO/NCCL/TP_SOCKET_IFNAME "
              "(default: selected toward MASTER_ADDR).")
@click.option("--allow-run-as-root", is_flag=True, help="Passed to mpirun.")
@click.option("--oversubscribe", is_flag=True, help="Passed to mpirun.")
@click.option("--dry-run", is_flag=True, help="Print the command and environment per node.")
@click.option("--json", "as_json", is_flag=True, help="With --dry-run: one JSON object.")
@click.argument("program", nargs=-1, type=click.UNPROCESSED)
def command(nproc_per_node: str | None, nnodes: str | None, node_rank: str | None,
            master_addr: str | None, master_port: str | None, rdzv: str | None,
            max_restarts: int,
            local: int | None, via: str, hosts: str | None, ifname: str | None,
            allow_run_as_root: bool, oversubscribe: bool, dry_run: bool, as_json: bool,
            program: tuple[str, ...]) -> int:
    """Run SCRIPT (or -m MODULE) on every rank of this node with torchrun, or on all ranks
    with mpirun, with MASTER_ADDR, ranks and interface variables filled in.

    \b
    ddpnet launch --nproc-per-node 4 -- train.py --epochs 3
    ddpnet launch --nnodes 2 --node-rank 1 --master-addr node0 -- train.py
    srun --ntasks-per-node=1 ddpnet launch -- train.py        (all from SLURM)
    ddpnet launch --via mpirun --hosts node0:4,node1:4 -- train.py
    ddpnet launch --local 4 -- train.py                         (one machine)
    """
    from ddpnet.env.jobport import read_port_range
    from ddpnet.env.resolve import resolve_config
    from ddpnet.launch import engine, iface
    from ddpnet.launch.plan import make_config, parse_nproc, per_node

    if as_json and not dry_run:
        raise ConfigError("--json prints the plan and needs --dry-run",
                          "add --dry-run, or drop --json to run the job")
    target = Target.parse(program)
    environ: dict[str, str] = dict(os.environ)
    if local is not None:
        if local < 1:
            raise ConfigError(f"--local {local} is below 1", "e.g. --local 2 for two processes")
        if nnodes not in (None, "1") or hosts:
            raise ConfigError("--local runs on this machine only; it excludes --nnodes/--hosts",
                              "drop --local, or drop --nnodes/--hosts")
        nproc_per_node, nnodes, node_rank = str(local), "1", "0"
        master_addr = master_addr or "127.0.0.1"
        # a launch on one machine ignores the scheduler's view of the job
        environ = {k: v for k, v in environ.items() if not k.startswith(("SLURM_", "OMPI_"))}
    if hosts is not None and via != "mpirun":
        raise ConfigError("--hosts is for --via mpirun",
                          "add --via mpirun, or launch torchrun on each node with --node-rank")
    nn = NNodes.parse(nnodes) if nnodes is not None else None
    rdzv_note = []
    if rdzv is None and via == "torchrun":
        rdzv = "c10d" if max_restarts > 0 or (nn is not None and nn.elastic) else "static"
        if rdzv == "c10d":
            rdzv_note.append("rendezvous c10d: --max-restarts/elastic --nnodes need a fresh "
                             "store per round (static reuses one)")
    if via == "mpirun":
        for flag, value, why in (
                ("--node-rank", node_rank, "mpirun starts every node's ranks from one host"),
                ("--max-restarts", max_restarts or None, "mpirun does not restart failed ranks"),
                ("--rdzv", rdzv,
                 "mpirun ranks rendezvous at MASTER_ADDR (rank 0)")):
            if value is not None:
                raise ConfigError(f"{flag} does not apply to --via mpirun: {why}",
                                  f"drop {flag}, or launch with torchrun (the default engine)")
        return _mpirun(target, environ, nproc_per_node, nn, hosts, master_addr, master_port,
                       ifname, allow_run_as_root, oversubscribe, dry_run, as_json)

    overrides: dict[str, Any] = {}
    for key, value, flag in (("num_nodes", nn.max if nn else None, "--nnodes"),
                             ("node_rank", node_rank, "--node-rank"),
                             ("master_addr", master_addr, "--master-addr"),
                             ("master_port", master_port, "--master-port")):
        if value is not None:
            overrides[key] = (value, flag)
    if nn is not None and node_rank is not None:
        try:
            rank_given = int(node_rank)
        except ValueError:
            rank_given = -1
        if not 0 <= rank_given < nn.max:
            raise ConfigError(
                f"--node-rank {node_rank} is outside 0..{nn.max - 1} for --nnodes {nn}",
                "node ranks run from 0 to NNODES-1; give each node its own --node-rank")
    from ddpnet.env.slurm import batch_nodes

    job_nodes = batch_nodes(environ)
    if job_nodes and job_nodes > 1 and nn is None:
        raise ConfigError(
            f"ddpnet launch runs in the batch script of a {job_nodes}-node SLURM job: only "
            "this node would train",
            "start it on every node: srun --ntasks-per-node=1 ddpnet launch ... "
            "(ddpnet sbatch renders this)")
    dist = resolve_config(_without_torch_vars(environ), overrides,
                          port_range=read_port_range())
    nproc = parse_nproc(nproc_per_node, environ, _dev_entries())
    choice = iface.choose(dist, environ, ifname)
    assert rdzv is not None
    cfg = make_config(dist, target=target, nproc=nproc, nnodes=nn or NNodes(dist.num_nodes,
                      dist.num_nodes), rdzv=rdzv, max_restarts=max_restarts,
                      python=sys.executable, iface_env=choice.env,
                      notes=[*rdzv_note, f"interface: {choice.reason}"])
    all_nodes = dry_run and dist.launcher in ("local", "manual") and node_rank is None
    # a dry run that shows every node's command is not about this host: no placement warning
    warnings = [] if all_nodes else rank0_warnings(cfg, _local_names(),
                                                   _resolve_addresses(cfg.master_addr))
    for w in warnings:
        _warn(w)
    if dry_run:
        nodes = per_node(cfg, all_nodes=all_nodes)
        _print_plan("torchrun", nodes, cfg.sources, cfg.notes, warnings, as_json)
        return 0
    from ddpnet.launch.command import build_torchrun

    argv, env = build_torchrun(cfg)
    return engine.run(argv, env)


def _without_torch_vars(environ: dict[str, str]) -> dict[str, str]:
    """Inside a torchrun worker, ``launch`` starts a new job: ignore the worker's variables."""
    if "TORCHELASTIC_RUN_ID" not in environ:
        return environ
    return {k: v for k, v in environ.items()
            if not k.startswith("TORCHELASTIC_") and k not in ("RANK", "LOCAL_RANK",
                                                               "GROUP_RANK", "WORLD_SIZE")}


def _dev_entries() -> list[str]:
    try:
        return os.listdir("/dev")
    except OSError:  # pragma: no cover
        return []


def _mpirun(target: Target, environ: dict[str, str], nproc_per_node: str | None,
            nn: NNodes | None, hosts_text: str | None, master_addr: str | None,
            master_port: str | None, ifname: str | None, allow_root: bool,
            oversubscribe: bool, dry_run: bool, as_json: bool) -> int:
    from ddpnet.env.base import parse_int
    from ddpnet.env.jobport import TORCH_DEFAULT_PORT
    from ddpnet.launch import engine, iface
    from ddpnet.launch.command import MpirunConfig, build_mpirun, parse_hosts, shell_line
    from ddpnet.launch.plan import parse_nproc

    hosts = parse_hosts(hosts_text) if hosts_text else ()
    if nn is not None and hosts and nn.max != len(hosts):
        raise ConfigError(f"--nnodes {nn} contradicts the {len(hosts)} hosts of --hosts",
                          "drop --nnodes: with --via mpirun the node count is len(--hosts)")
    if hosts:
        np = sum(h.slots for h in hosts)
        if nproc_per_node not in (None, "auto"):
            per = parse_nproc(nproc_per_node, environ, [])[0]
            np = per * len(hosts)
    else:
        np = parse_nproc(nproc_per_node, environ, _dev_entries())[0] * (nn.max if nn else 1)
    master = master_addr or (hosts[0].name.strip("[]") if hosts
                             else environ.get("MASTER_ADDR", "127.0.0.1"))
    port = parse_int(master_port, "--master-port", minimum=1) if master_port else \
        parse_int(environ.get("MASTER_PORT", str(TORCH_DEFAULT_PORT)), "MASTER_PORT",
                  minimum=1)
    choice = iface.choose(None, {**environ, "MASTER_ADDR": master, "MASTER_PORT": str(port)},
                          ifname)
    cfg = MpirunConfig(target=target, np=np, master_addr=master, master_port=port,
                       hosts=hosts, interface=choice.name, python=sys.executable,
                       iface_env=choice.env, allow_run_as_root=allow_root,
                       oversubscribe=oversubscribe)
    warnings = []
    if hosts and master_addr and master_addr != hosts[0].name:
        warnings.append(f"--master-addr {master_addr} is not the first host of --hosts "
                        f"({hosts[0].name}): mpirun maps rank 0 to {hosts[0].name}")
    for w in warnings:
        _warn(w)
    argv, env = build_mpirun(cfg, environ)
    if dry_run:
        nodes = [{"node_rank": None, "argv": argv, "env": env, "command": shell_line(argv, env),
                  "ranks": list(range(np))}]
        _print_plan("mpirun", nodes, {"interface": choice.reason}, (), warnings, as_json)
        return 0
    return engine.run(argv, env)


def _print_plan(engine: str, nodes: list[dict[str, Any]], sources: Any, notes: Any,
                warnings: list[str], as_json: bool) -> None:
    if as_json:
        from ddpnet.output import emit_json

        emit_json({"engine": engine, "nodes": nodes, "sources": dict(sources),
                   "notes": list(notes), "warnings": warnings})
        return
    for node in nodes:
        where = "this node" if node["node_rank"] is None else f"node {node['node_rank']}"
        if engine == "mpirun":
            where = "the launching host (mpirun starts every rank)"
        ranks = node["ranks"]
        suffix = f" (ranks {ranks[0]}-{ranks[-1]})" if ranks else ""
        click.echo(f"# {where}{suffix}")
        click.echo(node["command"])
    for note in notes:
        click.echo(f"# note: {note}")

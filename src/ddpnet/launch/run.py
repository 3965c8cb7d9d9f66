"""``ddpnet launch``: its options, the plan they resolve to (the engine's argv and added
environment; each node's command for ``--dry-run``), and the engine run as a child.

:func:`prepare` reads this host through small edges (the environment, /dev, its names, the
interface selection); :func:`run` starts the engine unless it is a dry run."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ddpnet.errors import ConfigError
from ddpnet.launch.command import NNodes, Target

if TYPE_CHECKING:
    from ddpnet.config import DistConfig
    from ddpnet.launch.hostlaunch import SshLaunch
    from ddpnet.launch.ssh import HostfileOptions


@dataclass(frozen=True)
class LaunchOptions:
    """``ddpnet launch``'s flags, as given (``None``: from the launcher or a default)."""

    program: tuple[str, ...]
    nproc_per_node: str | None = None
    nnodes: str | None = None
    node_rank: str | None = None
    master_addr: str | None = None
    master_port: str | None = None
    rdzv: str | None = None
    max_restarts: int = 0
    local: int | None = None
    via: str = "torchrun"
    hosts: str | None = None
    ifname: str | None = None
    allow_run_as_root: bool = False
    oversubscribe: bool = False
    dry_run: bool = False
    as_json: bool = False
    #: ``--hostfile`` and the SSH flags: every host's torchrun started over SSH
    hostfile: HostfileOptions | None = None
    #: the hang watch in every rank (``--no-watch``: off, ``ddpnet.init()`` scripts' too)
    watch: bool = True
    #: ``--metrics-port``: rank 0's watch serves the job's metrics there
    metrics_port: int | None = None


@dataclass(frozen=True)
class LaunchPlan:
    """What the engine runs, and with ``dry_run`` the command per node (``--dry-run``'s
    JSON object); warnings are about where rank 0 will run."""

    engine: str
    dry_run: bool
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    nodes: tuple[dict[str, Any], ...] = ()
    sources: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    exit_code: int = 0
    #: with ``--hostfile``: what every host runs over SSH
    ssh: SshLaunch | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "nodes": list(self.nodes), "sources": dict(self.sources),
                "notes": list(self.notes), "warnings": list(self.warnings)}


@dataclass(frozen=True)
class Ran:
    """The engine's exit status (128+N when a signal ended it)."""

    exit_code: int

    def to_dict(self) -> dict[str, Any]:
        return {"exit_code": self.exit_code}


def prepare(options: LaunchOptions, environ: Mapping[str, str] | None = None) -> LaunchPlan:
    """Check the flags against each other, resolve the job and build the engine's command."""
    if options.as_json and not options.dry_run:
        raise ConfigError("--json prints the plan and needs --dry-run",
                          "add --dry-run, or drop --json to run the job")
    target = Target.parse(options.program)
    if options.hostfile is not None and options.local is not None:
        raise ConfigError("--local runs on this machine only; it excludes --hostfile",
                          "drop --local, or drop --hostfile")
    opts, env = _fold_local(options, dict(os.environ if environ is None else environ))
    if opts.hosts is not None and opts.via != "mpirun":
        raise ConfigError("--hosts is for --via mpirun",
                          "add --via mpirun, or launch torchrun on each node with --node-rank")
    nn = NNodes.parse(opts.nnodes) if opts.nnodes is not None else None
    if opts.hostfile is not None:
        return _ssh_plan(opts, target, env, nn)
    if opts.via == "mpirun":
        _refuse_for_mpirun(opts)
        return _mpirun_plan(opts, target, env, nn)
    return _torchrun_plan(opts, target, env, nn)


def run(plan: LaunchPlan) -> LaunchPlan | Ran:
    """Start the engine and wait for it (edge); a dry run is its own result."""
    if plan.dry_run:
        return plan
    if plan.ssh is not None:
        from ddpnet.launch import hostlaunch

        return Ran(hostlaunch.execute(plan.ssh))
    from ddpnet.launch import engine

    return Ran(engine.run(plan.argv, plan.env))


def _fold_local(options: LaunchOptions, environ: dict[str, str]
                ) -> tuple[LaunchOptions, dict[str, str]]:
    """``--local N`` is one node of N processes on loopback, whatever the scheduler says."""
    if options.local is None:
        return options, environ
    from ddpnet.local import check_world

    check_world(options.local)
    if options.nnodes not in (None, "1") or options.hosts:
        raise ConfigError("--local runs on this machine only; it excludes --nnodes/--hosts",
                          "drop --local, or drop --nnodes/--hosts")
    from ddpnet.net.ports import free_port

    # a free port, as check --local picks one: two local launches side by side never collide
    opts = replace(options, nproc_per_node=str(options.local), nnodes="1", node_rank="0",
                   master_addr=options.master_addr or "127.0.0.1",
                   master_port=options.master_port or str(free_port()))
    # a launch on one machine ignores the scheduler's view of the job
    return opts, {k: v for k, v in environ.items() if not k.startswith(("SLURM_", "OMPI_"))}


def _watch_env(opts: LaunchOptions, environ: Mapping[str, str]) -> dict[str, str]:
    """The ranks' variables that attach the watch to the script (or, ``--no-watch``, keep it
    off): ``ddpnet.watch.attach``."""
    from ddpnet.watch.attach import ranks_env

    if opts.metrics_port and not opts.watch:
        raise ConfigError(f"--metrics-port {opts.metrics_port} needs the watch: its hub serves "
                          "the metrics", "drop --no-watch, or drop --metrics-port")
    return ranks_env(environ, opts.watch, opts.metrics_port)


def _refuse_for_mpirun(opts: LaunchOptions) -> None:
    for flag, value, why in (
            ("--node-rank", opts.node_rank, "mpirun starts every node's ranks from one host"),
            ("--max-restarts", opts.max_restarts or None, "mpirun does not restart failed ranks"),
            ("--rdzv", opts.rdzv, "mpirun ranks rendezvous at MASTER_ADDR (rank 0)")):
        if value is not None:
            raise ConfigError(f"{flag} does not apply to --via mpirun: {why}",
                              f"drop {flag}, or launch with torchrun (the default engine)")


def _rdzv(opts: LaunchOptions, nn: NNodes | None) -> tuple[str, list[str]]:
    """``--rdzv``, else c10d when torchrun may restart or the node count is elastic."""
    if opts.rdzv is not None:
        return opts.rdzv, []
    if opts.max_restarts > 0 or (nn is not None and nn.elastic):
        return "c10d", ["rendezvous c10d: --max-restarts/elastic --nnodes need a fresh "
                        "store per round (static reuses one)"]
    return "static", []


def _overrides(opts: LaunchOptions, nn: NNodes | None) -> dict[str, tuple[Any, str]]:
    overrides: dict[str, tuple[Any, str]] = {}
    for key, value, flag in (("num_nodes", nn.max if nn else None, "--nnodes"),
                             ("node_rank", opts.node_rank, "--node-rank"),
                             ("master_addr", opts.master_addr, "--master-addr"),
                             ("master_port", opts.master_port, "--master-port")):
        if value is not None:
            overrides[key] = (value, flag)
    return overrides


def _check_node_rank(node_rank: str | None, nn: NNodes | None) -> None:
    if nn is None or node_rank is None:
        return
    try:
        rank_given = int(node_rank)
    except ValueError:
        rank_given = -1
    if not 0 <= rank_given < nn.max:
        raise ConfigError(
            f"--node-rank {node_rank} is outside 0..{nn.max - 1} for --nnodes {nn}",
            "node ranks run from 0 to NNODES-1; give each node its own --node-rank")


def _refuse_batch_step(environ: Mapping[str, str], nn: NNodes | None) -> None:
    """In a multi-node batch script only this node would train: say how to start all."""
    from ddpnet.env.slurm import batch_nodes

    job_nodes = batch_nodes(environ)
    if job_nodes and job_nodes > 1 and nn is None:
        raise ConfigError(
            f"ddpnet launch runs in the batch script of a {job_nodes}-node SLURM job: only "
            "this node would train",
            "start it on every node: srun --ntasks-per-node=1 ddpnet launch ... "
            "(ddpnet sbatch renders this)")


def _refuse_job_script(dist: DistConfig, nn: NNodes | None) -> None:
    """The same in the job script of a multi-node PBS, Grid Engine or LSF job: the job's
    view (``ddpnet env``) has the command that starts every node."""
    job = dist.job_script
    if job is None or job.nodes <= 1 or nn is not None:
        return
    raise ConfigError(
        f"ddpnet launch runs in the job script of a {job.nodes}-node {job.scheduler} job "
        f"{job.job_id}: only this node would train",
        f"start torchrun on every node, e.g. {job.fan_out()} (ddpnet env shows each node's "
        "command), or give --nnodes/--node-rank yourself")


def _without_torch_vars(environ: Mapping[str, str]) -> Mapping[str, str]:
    """Inside a torchrun worker, ``launch`` starts a new job: ignore the worker's variables."""
    if "TORCHELASTIC_RUN_ID" not in environ:
        return environ
    return {k: v for k, v in environ.items()
            if not k.startswith("TORCHELASTIC_") and k not in ("RANK", "LOCAL_RANK",
                                                               "GROUP_RANK", "WORLD_SIZE")}


def _torchrun_plan(opts: LaunchOptions, target: Target, environ: Mapping[str, str],
                   nn: NNodes | None) -> LaunchPlan:
    from ddpnet.env.jobport import read_port_range
    from ddpnet.env.resolve import resolve_config
    from ddpnet.launch import host, iface
    from ddpnet.launch.command import build_torchrun, rank0_warnings
    from ddpnet.launch.plan import make_config, parse_nproc, per_node
    from ddpnet.launch.requeue import torchrun_signals

    rdzv, rdzv_note = _rdzv(opts, nn)
    _check_node_rank(opts.node_rank, nn)
    _refuse_batch_step(environ, nn)
    dist = resolve_config(_without_torch_vars(environ), _overrides(opts, nn),
                          port_range=read_port_range())
    _refuse_job_script(dist, nn)
    nproc = parse_nproc(opts.nproc_per_node, environ, host.dev_entries())
    choice = iface.choose(dist, environ, opts.ifname, here=True)
    cfg = make_config(dist, target=target, nproc=nproc, nnodes=nn or NNodes(dist.num_nodes,
                      dist.num_nodes), rdzv=rdzv, max_restarts=opts.max_restarts,
                      python=sys.executable, iface_env=choice.env,
                      notes=[*rdzv_note, f"interface: {choice.reason}"],
                      watch_env=_watch_env(opts, environ))
    all_nodes = opts.dry_run and dist.launcher in ("local", "manual") and opts.node_rank is None
    # a dry run that shows every node's command is not about this host: no placement warning
    warnings = () if all_nodes else tuple(rank0_warnings(
        cfg, host.local_names(), host.resolve_addresses(cfg.master_addr)))
    plan = LaunchPlan("torchrun", opts.dry_run, sources=cfg.sources, notes=cfg.notes,
                      warnings=warnings)
    if opts.dry_run:
        return replace(plan, nodes=tuple(per_node(cfg, all_nodes=all_nodes)))
    check_program(target)
    preflight(replace(dist, rank=cfg.node_rank * nproc[0],
                      world_size=cfg.nnodes.max * nproc[0], local_world_size=nproc[0],
                      num_nodes=cfg.nnodes.max),
              environ, opts.ifname, hosts_store=cfg.node_rank == 0 if rdzv == "static" else None)
    argv, env = build_torchrun(cfg, torchrun_module(environ))
    if "TORCHELASTIC_SIGNALS_TO_HANDLE" not in environ:  # SLURM's --signal=USR1@90 warning
        env["TORCHELASTIC_SIGNALS_TO_HANDLE"] = torchrun_signals()
    return replace(plan, argv=tuple(argv), env=env)


def torchrun_module(environ: Mapping[str, str]) -> str:
    """The torchrun this node runs: ddpnet's (the job's exit code, whole rank-prefixed lines)
    except inside a SLURM job, where the preemption warning (USR1) must reach torchrun's own
    signal handling with the ranks writing to the job log directly: through the wrapper's
    tee, a rank's last lines ("preempted ... at step N") were lost and the step ended 138
    instead of being requeued (tests/launch/test_slurm_requeue.py)."""
    return "torch.distributed.run" if "SLURM_JOB_ID" in environ else \
        "ddpnet.launch.torchrun_main"


def preflight(node: DistConfig, environ: Mapping[str, str], ifname: str | None, *,
              hosts_store: bool | None) -> None:
    """What ``ddpnet.init()``'s preflight would name in every rank, named once before any
    rank starts (edge): the interface here, MASTER_ADDR resolvable, and on the store's node
    MASTER_PORT free (who holds it). ``node`` is this node's view (its first rank, the job's
    world size). A user's configuration to fix, so exit 2, never torch's traceback."""
    from ddpnet.errors import RendezvousError
    from ddpnet.net.probe import launch_preflight
    from ddpnet.net.select import select_for_host

    try:
        launch_preflight(node, select_for_host(node, environ, ifname=ifname),
                         hosts_store=hosts_store)
    except RendezvousError as exc:
        hint = exc.hint
        if exc.cause == "port-in-use":
            hint += " (or ddpnet launch --master-port PORT; --local picks a free one)"
        error = ConfigError(exc.message, hint)
        error.error_id = exc.cause
        raise error from None


def check_program(target: Target) -> None:
    """The script (or executable) this node's ranks run exists here, before anything starts
    (edge): torchrun would start every rank to fail each with a ChildFailedError traceback."""
    import shutil
    from pathlib import Path

    if target.module:
        return  # importable or not is the interpreter's answer, in the ranks' environment
    if target.is_python:
        if not Path(target.program).is_file():
            raise ConfigError(
                f"script {target.program} not found (in {os.getcwd()})",
                "check the path: the ranks run it relative to the current directory, "
                "or give -m MODULE")
    elif shutil.which(target.program) is None:
        raise ConfigError(f"program {target.program} not found on PATH or as a file",
                          "give a path to it, or a Python script (train.py)")


def _mpirun_np(opts: LaunchOptions, environ: Mapping[str, str], hosts: tuple[Any, ...],
               nn: NNodes | None) -> int:
    """Ranks in all: the hosts' slots (or nproc per host), else nproc x nodes."""
    from ddpnet.launch import host
    from ddpnet.launch.plan import parse_nproc

    if nn is not None and hosts and nn.max != len(hosts):
        raise ConfigError(f"--nnodes {nn} contradicts the {len(hosts)} hosts of --hosts",
                          "drop --nnodes: with --via mpirun the node count is len(--hosts)")
    if not hosts:
        return parse_nproc(opts.nproc_per_node, environ, host.dev_entries())[0] * (
            nn.max if nn else 1)
    if opts.nproc_per_node not in (None, "auto"):
        return parse_nproc(opts.nproc_per_node, environ, [])[0] * len(hosts)
    return sum(h.slots for h in hosts)


def _mpirun_port(opts: LaunchOptions, environ: Mapping[str, str]) -> int:
    from ddpnet.env.base import parse_int
    from ddpnet.env.jobport import TORCH_DEFAULT_PORT

    if opts.master_port:
        return parse_int(opts.master_port, "--master-port", minimum=1)
    return parse_int(environ.get("MASTER_PORT", str(TORCH_DEFAULT_PORT)), "MASTER_PORT",
                     minimum=1)


def _mpirun_plan(opts: LaunchOptions, target: Target, environ: Mapping[str, str],
                 nn: NNodes | None) -> LaunchPlan:
    from ddpnet.launch import iface
    from ddpnet.launch.command import MpirunConfig, build_mpirun, parse_hosts, shell_line

    hosts = parse_hosts(opts.hosts) if opts.hosts else ()
    np = _mpirun_np(opts, environ, hosts, nn)
    master = opts.master_addr or (hosts[0].name.strip("[]") if hosts
                                  else environ.get("MASTER_ADDR", "127.0.0.1"))
    port = _mpirun_port(opts, environ)
    # without --hosts every rank runs here
    choice = iface.choose(None, {**environ, "MASTER_ADDR": master, "MASTER_PORT": str(port)},
                          opts.ifname, here=not hosts)
    cfg = MpirunConfig(target=target, np=np, master_addr=master, master_port=port,
                       hosts=hosts, interface=choice.name, python=sys.executable,
                       iface_env=choice.env, allow_run_as_root=opts.allow_run_as_root,
                       oversubscribe=opts.oversubscribe, watch_env=_watch_env(opts, environ))
    warnings = []
    if hosts and opts.master_addr and opts.master_addr != hosts[0].name:
        warnings.append(f"--master-addr {opts.master_addr} is not the first host of --hosts "
                        f"({hosts[0].name}): mpirun maps rank 0 to {hosts[0].name}")
    if not opts.dry_run:
        refuse_root_mpirun(opts.allow_run_as_root, environ, os.geteuid())
    if not hosts and not opts.dry_run:
        from ddpnet.env.resolve import resolve_config

        job = resolve_config({}, {"master_addr": (master, "--master-addr"),
                                  "master_port": (port, "--master-port")})
        preflight(replace(job, world_size=np, local_world_size=np), environ, opts.ifname,
                  hosts_store=True)
    argv, env = build_mpirun(cfg, environ)
    nodes = ({"node_rank": None, "argv": argv, "env": env, "command": shell_line(argv, env),
              "ranks": list(range(np))},) if opts.dry_run else ()
    return LaunchPlan("mpirun", opts.dry_run, tuple(argv), env, nodes,
                      {"interface": choice.reason}, (), tuple(warnings))


def refuse_root_mpirun(allowed: bool, environ: Mapping[str, str], euid: int) -> None:
    """Open MPI refuses root unless told (pure): say so with our flag before it prints its
    page-long refusal from every host."""
    told = allowed or (environ.get("OMPI_ALLOW_RUN_AS_ROOT") == "1"
                       and environ.get("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM") == "1")
    if euid == 0 and not told:
        raise ConfigError("mpirun (Open MPI) refuses to run as root, and this launch is root's",
                          "add --allow-run-as-root (as in a container), or launch as a normal "
                          "user")


def _ssh_plan(opts: LaunchOptions, target: Target, environ: Mapping[str, str],
              nn: NNodes | None) -> LaunchPlan:
    """``--hostfile``: torchrun on every host over SSH (:mod:`ddpnet.launch.hostlaunch`)."""
    from ddpnet.launch import hostlaunch, iface
    from ddpnet.launch.hostfile import check_master, read_hostfile

    assert opts.hostfile is not None
    hosts = read_hostfile(opts.hostfile.path)
    _refuse_for_hostfile(opts, nn, len(hosts))
    check_master(hosts, opts.master_addr)
    rdzv, rdzv_note = _rdzv(opts, None)
    iface_env = iface.choose(None, environ, opts.ifname).env if opts.ifname else {}
    nproc = None
    if opts.nproc_per_node not in (None, "auto"):
        from ddpnet.launch.plan import parse_nproc

        nproc = parse_nproc(opts.nproc_per_node, environ, [])[0]
    settings = hostlaunch.HostSettings(target, nproc, opts.master_addr,
                                       _mpirun_port(opts, environ), rdzv, opts.max_restarts,
                                       iface_env, _watch_env(opts, environ))
    launch = hostlaunch.plan(opts.hostfile, hosts, settings, environ, os.getcwd(),
                             opts.hostfile.python or sys.executable)
    return LaunchPlan("ssh", opts.dry_run, nodes=launch.nodes if opts.dry_run else (),
                      sources={"hostfile": opts.hostfile.path}, notes=tuple(rdzv_note),
                      ssh=launch)


def _refuse_for_hostfile(opts: LaunchOptions, nn: NNodes | None, count: int) -> None:
    """Flags the hostfile decides, or that start the job another way."""
    if nn is not None and nn.max != count:
        raise ConfigError(f"--nnodes {nn} contradicts the {count} hosts of --hostfile",
                          "drop --nnodes: with --hostfile every listed host is a node")
    for flag, given in (("--node-rank", opts.node_rank is not None),
                        ("--hosts", opts.hosts is not None),
                        ("--via mpirun", opts.via == "mpirun")):
        if given:
            raise ConfigError(f"{flag} does not apply to --hostfile: every host's node rank "
                              "is its line in the file and torchrun starts its ranks",
                              f"drop {flag}, or drop --hostfile")

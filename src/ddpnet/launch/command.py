"""Pure builders: a :class:`LaunchConfig` in, the engine's ``(argv, env)`` out.

``env`` is what ddpnet *adds* to the caller's environment (interface variables, the rendezvous
variables); the runner merges it over ``os.environ``. Nothing here reads the host.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from ddpnet.errors import ConfigError

#: the interface variables every engine must carry to every rank
IFACE_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
#: variables an Open MPI launch forwards with ``-x`` when they are set
FORWARDED_VARS = ("MASTER_ADDR", "MASTER_PORT", *IFACE_VARS, "NCCL_DEBUG", "NCCL_IB_DISABLE",
                  "OMP_NUM_THREADS", "PYTHONPATH", "PATH", "LD_LIBRARY_PATH")
RDZV = ("static", "c10d")
#: bounds on what a user can make big (docs/launch.md): nodes of a job (python-hostlist's own
#: limit on a node list) and processes on one node
MAX_NODES = 100_000
MAX_PROCS_PER_NODE = 1024


@dataclass(frozen=True)
class Target:
    """What to run on every rank: a script (``train.py``), a module (``-m pkg``) or any
    executable, with its arguments."""

    program: str
    args: tuple[str, ...] = ()
    module: bool = False

    @classmethod
    def parse(cls, argv: Sequence[str]) -> Target:
        args = list(argv)
        if args and args[0] == "--":
            args = args[1:]
        if not args:
            raise ConfigError("nothing to launch: no script or -m MODULE given",
                              "put the program after --, e.g. ddpnet launch -- train.py --lr 0.1")
        if args[0] == "-m":
            if len(args) < 2:
                raise ConfigError("-m needs a module name", "e.g. ddpnet launch -- -m mypkg.train")
            return cls(args[1], tuple(args[2:]), module=True)
        if args[0].startswith("-"):  # a mistyped option of ours, not a program
            raise ConfigError(f"no such option: {args[0]!r} (it would be run as the program)",
                              "put ddpnet's options before -- and the program after it, "
                              "e.g. ddpnet launch --nnodes 2 -- train.py")
        return cls(args[0], tuple(args[1:]))

    @property
    def is_python(self) -> bool:
        return self.module or self.program.endswith(".py")

    def torchrun_args(self) -> list[str]:
        """How torchrun takes it: ``script.py args``, ``-m mod args``, ``--no-python exe args``."""
        if self.module:
            return ["-m", self.program, *self.args]
        if self.is_python:
            return [self.program, *self.args]
        return ["--no-python", self.program, *self.args]

    def raw(self) -> list[str]:
        """As the user wrote it: ``script.py args`` or ``-m mod args``."""
        return ["-m", self.program, *self.args] if self.module else [self.program, *self.args]

    def python_argv(self, python: str) -> list[str]:
        """The argv that runs it directly (under a wrapper, mpirun or srun)."""
        if self.module:
            return [python, "-m", self.program, *self.args]
        if self.is_python:
            return [python, self.program, *self.args]
        return [self.program, *self.args]


@dataclass(frozen=True)
class NNodes:
    """``--nnodes N`` or an elastic ``MIN:MAX``."""

    min: int
    max: int

    @classmethod
    def parse(cls, text: str | int, source: str = "--nnodes") -> NNodes:
        raw = str(text).strip()
        m = re.fullmatch(r"(\d{1,9})(?::(\d{1,9}))?", raw)  # int() refuses 4300+ digits
        if not m:
            raise ConfigError(f"{source} {raw!r} is not a node count",
                              f"use {source} N or {source} MIN:MAX, e.g. {source} 2")
        low = int(m.group(1))
        high = int(m.group(2)) if m.group(2) else low
        if low < 1:
            raise ConfigError(f"{source} {raw} asks for {low} nodes",
                              f"a job needs at least one node: {source} 1 or more")
        if high > MAX_NODES:
            raise ConfigError(f"{source} {raw}: more than {MAX_NODES} nodes",
                              f"use at most {source} {MAX_NODES}")
        if high < low:
            raise ConfigError(f"{source} {raw}: the maximum {high} is below the minimum {low}",
                              f"write {source} MIN:MAX with MIN <= MAX, e.g. {low}:{low}")
        return cls(low, high)

    @property
    def elastic(self) -> bool:
        return self.min != self.max

    def __str__(self) -> str:
        return str(self.min) if not self.elastic else f"{self.min}:{self.max}"


@dataclass(frozen=True)
class LaunchConfig:
    """One node's launch, fully resolved (each value's origin in ``sources``)."""

    target: Target
    nproc_per_node: int
    nnodes: NNodes
    node_rank: int
    master_addr: str
    master_port: int
    rdzv: str = "static"
    max_restarts: int = 0
    python: str = "python3"
    run_id: str = "ddpnet"
    #: interface variables from the selection (or the user), exported to every rank
    iface_env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    sources: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    notes: tuple[str, ...] = ()
    #: what turns the watch on (or off) in every rank (``ddpnet.watch.attach.ranks_env``)
    watch_env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        validate(self)


def validate(cfg: LaunchConfig) -> None:
    """Bad combinations, each a ConfigError (exit 2) with the fix."""
    if cfg.rdzv not in RDZV:
        raise ConfigError(f"--rdzv {cfg.rdzv!r} is not one of {', '.join(RDZV)}",
                          "use --rdzv static (node ranks fixed) or --rdzv c10d (elastic)")
    if not 1 <= cfg.nproc_per_node <= MAX_PROCS_PER_NODE:
        raise ConfigError(f"--nproc-per-node {cfg.nproc_per_node} is outside "
                          f"1..{MAX_PROCS_PER_NODE}",
                          "give the processes per node (GPUs per node), e.g. --nproc-per-node 8")
    if cfg.max_restarts < 0:
        raise ConfigError(f"--max-restarts {cfg.max_restarts} is negative",
                          "use 0 (no restarts) or a positive count")
    if cfg.rdzv == "static":
        if cfg.max_restarts > 0:
            raise ConfigError(
                f"--max-restarts {cfg.max_restarts} with static rendezvous: torchrun's static "
                "handler keeps one store for every attempt, so a restarted worker can read the "
                "previous attempt's addresses and fail to connect",
                "use --rdzv c10d (the default with --max-restarts: a fresh store each round)")
        if cfg.nnodes.elastic:
            raise ConfigError(
                f"--nnodes {cfg.nnodes} is elastic but the rendezvous is static",
                "elastic node counts need --rdzv c10d; or give a fixed --nnodes N")
        if not 0 <= cfg.node_rank < cfg.nnodes.max:
            src = cfg.sources.get("node_rank", "--node-rank")
            raise ConfigError(
                f"node rank {cfg.node_rank} ({src}) is outside 0..{cfg.nnodes.max - 1} "
                f"for {cfg.nnodes.max} node(s)",
                "node ranks run from 0 to NNODES-1; give each node its own --node-rank")
    if not 1 <= cfg.master_port <= 65535:
        raise ConfigError(f"--master-port {cfg.master_port} is outside 1..65535",
                          "pick a free port such as 29500, the same on every node")


def build_torchrun(cfg: LaunchConfig, module: str = "torch.distributed.run"
                   ) -> tuple[list[str], dict[str, str]]:
    """torchrun's argv (``python -m torch.distributed.run ...``; ``module`` is
    :mod:`ddpnet.launch.torchrun_main` where ``launch`` runs it here) and the added environment.

    Static rendezvous passes ``--node-rank`` and ``--master-addr``: global rank 0 then runs on
    node rank 0, which is MASTER_ADDR. c10d assigns node ranks in arrival order, so rank 0 can
    land on any node (``rank0_warnings`` says so); it is required for restarts, because the
    static handler reuses one store across attempts.
    """
    argv = [cfg.python, "-m", module,
            "--nnodes", str(cfg.nnodes), "--nproc-per-node", str(cfg.nproc_per_node)]
    if cfg.rdzv == "static":
        argv += ["--node-rank", str(cfg.node_rank), "--master-addr", cfg.master_addr,
                 "--master-port", str(cfg.master_port)]
    else:
        argv += ["--rdzv-backend", "c10d", "--rdzv-endpoint",
                 f"{_bracket(cfg.master_addr)}:{cfg.master_port}", "--rdzv-id", cfg.run_id]
    argv += ["--max-restarts", str(cfg.max_restarts)]
    argv += cfg.target.torchrun_args()
    env = {**cfg.iface_env, **cfg.watch_env}
    if cfg.rdzv == "c10d" and cfg.max_restarts > 0:
        # the workers' store is then created per rendezvous round, not shared with the agent:
        # a shared store mixes keys of different attempts after a restart (pytorch#135712)
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    # our own variables for the workers and for the wrapper: which engine and node this is
    env["DDPNET_LAUNCH_ENGINE"] = "torchrun"
    return argv, env


def _bracket(addr: str) -> str:
    return f"[{addr}]" if ":" in addr and not addr.startswith("[") else addr


# ---- mpirun --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Host:
    name: str
    slots: int


def split_slots(token: str) -> tuple[str, str | None]:
    """``HOST[:N]`` -> (host, N or None) for every host form (pure): ``node1:4``,
    ``[fd00::1]:4``, a bare IPv6 ``fd00::1`` (no count: its colons are the address's)."""
    if token.startswith("[") and "]:" in token:
        host, _, count = token[1:].partition("]:")
        return host, count
    if token.startswith("[") and token.endswith("]"):
        return token[1:-1], None
    if token.count(":") >= 2:
        return token, None
    host, sep, count = token.partition(":")
    return host, count if sep else None


def host_name(text: str, where: str) -> str:
    """A launch host as ssh, torchrun and MASTER_ADDR take it (IPv6 unbracketed, with its
    zone), through the one address parser; a link-local address without its zone is refused
    here: ssh and every rank's connect to it fail with EINVAL (pure)."""
    from ddpnet.address import parse_address

    addr = parse_address(text, where)
    if addr.needs_zone:
        raise ConfigError(
            f"{where} {text!r} is an IPv6 link-local address without its zone: ssh and "
            "every connection to it fail (EINVAL), as it exists on every link",
            f"add the interface it is reached by on every node ({text}%eth0; `ip -6 route "
            f"get {text}` names it), or use that host's global address or name instead")
    return addr.dial


def parse_hosts(text: str, source: str = "--hosts") -> tuple[Host, ...]:
    """``h1:4,h2:4`` (``h1`` alone means one slot) -> hosts with slot counts."""
    hosts: list[Host] = []
    seen: set[str] = set()
    for part in text.split(","):
        part = part.strip()
        host, count = split_slots(part)
        try:
            if count is not None and not re.fullmatch(r"\d{1,9}", count):
                raise ConfigError(f"{count!r} is not a slot count")
            name, slots = host_name(host, "its host"), int(count or 1)
        except ConfigError as exc:
            raise ConfigError(
                f"{source} {text!r}: {part!r} is not HOST or HOST:SLOTS ({exc})",
                f"write {source} as a comma list of host:slots, e.g. {source} node1:4,node2:4 "
                "([fd00::1]:4 for IPv6)") from None
        if not 1 <= slots <= MAX_PROCS_PER_NODE:
            raise ConfigError(f"{source}: host {name} has {slots} slots",
                              f"every host needs 1 to {MAX_PROCS_PER_NODE} slots, e.g. node1:1")
        if name in seen:
            raise ConfigError(f"{source}: host {name} is listed twice",
                              "list each host once with its slot count, e.g. node1:8")
        seen.add(name)
        hosts.append(Host(name, slots))
    return tuple(hosts)


@dataclass(frozen=True)
class MpirunConfig:
    """An Open MPI launch: ``np`` ranks over ``hosts`` (None: this host only)."""

    target: Target
    np: int
    master_addr: str
    master_port: int
    hosts: tuple[Host, ...] = ()
    interface: str | None = None
    python: str = "python3"
    iface_env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    extra_forward: tuple[str, ...] = ()
    allow_run_as_root: bool = False
    oversubscribe: bool = False
    #: what turns the watch on (or off) in every rank, forwarded with ``-x``
    watch_env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        most = MAX_PROCS_PER_NODE * max(1, len(self.hosts))
        if not 1 <= self.np <= most:
            raise ConfigError(f"-np {self.np} is outside 1..{most}",
                              f"run 1 to {MAX_PROCS_PER_NODE} ranks per host")
        if self.hosts and self.np > sum(h.slots for h in self.hosts) and not self.oversubscribe:
            raise ConfigError(
                f"{self.np} ranks do not fit the {sum(h.slots for h in self.hosts)} slots of "
                f"--hosts",
                "raise the slot counts in --hosts (host:slots) or lower --nproc")


def build_mpirun(cfg: MpirunConfig, environ: Mapping[str, str] | None = None
                 ) -> tuple[list[str], dict[str, str]]:
    """Open MPI's argv and the added environment.

    Ranks are mapped by slot (rank 0 on the first host, which is MASTER_ADDR), not bound to
    cores (the training script's threads need them all); every rank runs the ``ddpnet exec``
    wrapper, which turns OMPI_COMM_WORLD_* into RANK/WORLD_SIZE/LOCAL_RANK and exports them.
    """
    env = {**cfg.iface_env, **cfg.watch_env}
    env["MASTER_ADDR"] = cfg.master_addr
    env["MASTER_PORT"] = str(cfg.master_port)
    env["DDPNET_LAUNCH_ENGINE"] = "mpirun"
    argv = ["mpirun", "-np", str(cfg.np)]
    if cfg.allow_run_as_root:
        argv.append("--allow-run-as-root")
    if cfg.oversubscribe:
        argv.append("--oversubscribe")
    if cfg.hosts:
        argv += ["--host", ",".join(f"{h.name}:{h.slots}" for h in cfg.hosts)]
    argv += ["--map-by", "slot", "--bind-to", "none"]
    if cfg.interface:
        argv += ["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", cfg.interface,
                 "--mca", "oob_tcp_if_include", cfg.interface]
    present = set(env) | set(environ or ())
    forward = [v for v in (*FORWARDED_VARS, *cfg.extra_forward, *cfg.watch_env,
                           "DDPNET_LAUNCH_ENGINE")
               if v in present]
    for var in dict.fromkeys(forward):
        argv += ["-x", var]
    argv += [cfg.python, "-m", "ddpnet", "exec", "--", *cfg.target.raw()]
    return argv, env


# ---- checks and rendering -------------------------------------------------------------------


def rank0_warnings(cfg: LaunchConfig, local_names: frozenset[str],
                   master_addresses: frozenset[str] = frozenset()) -> list[str]:
    """Where global rank 0 will run versus MASTER_ADDR.

    ``local_names`` are this host's names and addresses; ``master_addresses`` what
    MASTER_ADDR resolves to (both read at the edge).
    """
    warnings: list[str] = []
    if cfg.rdzv == "c10d":
        if cfg.nnodes.max > 1:
            warnings.append(
                "c10d rendezvous assigns node ranks in arrival order: global rank 0 may run "
                f"on any node, not necessarily on MASTER_ADDR {cfg.master_addr} (torchrun's "
                "store is safe: it lives at the rendezvous endpoint; code that assumes rank 0 "
                "is on MASTER_ADDR is not). Use --rdzv static with --node-rank to pin it.")
        return warnings
    if cfg.nnodes.max == 1:
        return warnings
    master_here = bool(({cfg.master_addr} | master_addresses) & local_names)
    if cfg.node_rank == 0 and not master_here and cfg.master_addr not in ("127.0.0.1",
                                                                          "localhost"):
        warnings.append(
            f"this node has node rank 0 (global rank 0) but MASTER_ADDR {cfg.master_addr} is "
            "not one of its names or addresses: the other nodes will wait for a store that "
            "never starts. Run node rank 0 on the MASTER_ADDR host, or set --master-addr to "
            "this host.")
    if cfg.node_rank != 0 and master_here:
        warnings.append(
            f"MASTER_ADDR {cfg.master_addr} is this host but its node rank is "
            f"{cfg.node_rank}: rank 0 will run on another node. Give this node --node-rank 0.")
    return warnings


def shell_line(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """``VAR=v ... argv`` quoted for a shell, as ``--dry-run`` prints it."""
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted((env or {}).items()))
    line = " ".join(shlex.quote(a) for a in argv)
    return f"{prefix} {line}" if prefix else line

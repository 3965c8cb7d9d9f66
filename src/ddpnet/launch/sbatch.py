"""Render a SLURM batch script for a ddpnet job (pure).

Two layouts, chosen by ``engine``:

- ``torchrun``: one ``srun`` task per node runs ``ddpnet launch --nproc-per-node T``; torchrun
  starts the T ranks (elastic restarts, static rendezvous: rank 0 on the first node).
- ``srun``: one ``srun`` task per rank runs ``ddpnet exec``, which turns SLURM_PROCID etc.
  into RANK/WORLD_SIZE/LOCAL_RANK before exec'ing the script.

MASTER_ADDR is the first host of the allocation and MASTER_PORT is derived from the job id
outside the ephemeral port range, both computed once in the batch step and exported (srun
passes the environment on), so every node agrees and two jobs on one node do not collide.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from ddpnet.errors import ConfigError
from ddpnet.launch.command import MAX_NODES, MAX_PROCS_PER_NODE, Target
from ddpnet.launch.recovery import DEFAULT_MAX_RECOVERIES, MAX_RECOVERIES
from ddpnet.launch.requeue import (
    DEFAULT_SIGNAL,
    PreemptSignal,
    Spare,
    directives,
    parse_signal,
    recover_command,
    step_lines,
    torchrun_lines,
)

ENGINES = ("torchrun", "srun")
_TIME = re.compile(r"(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}"
                   r"|\d+-\d+:\d{1,2}:\d{1,2}|UNLIMITED|INFINITE)")


@dataclass(frozen=True)
class SbatchConfig:
    target: Target
    nodes: int
    ntasks_per_node: int | None = None
    ntasks: int | None = None
    gpus_per_node: int | None = None
    cpus_per_task: int | None = None
    partition: str | None = None
    time: str | None = None
    output: str = "ddpnet-%j.out"
    job_name: str = "ddpnet"
    engine: str = "torchrun"
    preflight: bool = False
    requeue: bool = False
    #: ``[B:]SIG@SECONDS`` before the time limit (sbatch --signal); None: USR1@90 with
    #: ``requeue``, else no signal
    preempt_signal: str | None = None
    ifname: str | None = None
    max_restarts: int = 0
    #: with ``requeue``: how many times the job may take a node the watch blamed out and
    #: requeue itself (``ddpnet.launch.recover``); 0: never
    max_recoveries: int = DEFAULT_MAX_RECOVERIES
    #: nodes allocated beyond ``nodes`` (``#SBATCH --no-kill``): a blamed node is drained and
    #: the step starts again inside the allocation on the others, no requeue
    spare_nodes: int = 0
    #: the Python that has ddpnet, on every node (the submitting host's, by default)
    python: str = "python3"

    def __post_init__(self) -> None:
        validate(self)

    @property
    def tasks_per_node(self) -> int:
        if self.ntasks_per_node is not None:
            return self.ntasks_per_node
        if self.ntasks is not None:
            return self.ntasks // self.nodes
        return 1

    @property
    def warning(self) -> PreemptSignal | None:
        """The signal that asks the ranks to checkpoint (``ddpnet.launch.requeue``)."""
        if self.preempt_signal is not None:
            return parse_signal(self.preempt_signal)
        return parse_signal(DEFAULT_SIGNAL) if self.requeue else None


def validate(cfg: SbatchConfig) -> None:
    """Every flag alone and against the others; a ConfigError names the first problem."""
    if not 1 <= cfg.nodes <= MAX_NODES:
        raise ConfigError(f"--nodes {cfg.nodes} is outside 1..{MAX_NODES}",
                          "a job needs --nodes 1 or more")
    if cfg.engine not in ENGINES:
        raise ConfigError(f"--engine {cfg.engine!r} is not one of {', '.join(ENGINES)}",
                          "torchrun: one task per node; srun: one task per rank")
    if cfg.ntasks_per_node is not None and not 1 <= cfg.ntasks_per_node <= MAX_PROCS_PER_NODE:
        raise ConfigError(f"--ntasks-per-node {cfg.ntasks_per_node} is outside "
                          f"1..{MAX_PROCS_PER_NODE}",
                          "give the ranks per node (GPUs per node), e.g. --ntasks-per-node 4")
    _check_ntasks(cfg)
    _check_gpus(cfg)
    if not 0 <= cfg.max_recoveries <= MAX_RECOVERIES:
        raise ConfigError(f"--max-recoveries {cfg.max_recoveries} is outside 0..{MAX_RECOVERIES}",
                          "give how many times the job may drain a blamed node and requeue "
                          "itself, e.g. --max-recoveries 2 (0: never)")
    _check_spares(cfg)
    if cfg.time is not None and not _TIME.fullmatch(cfg.time):
        raise ConfigError(f"--time {cfg.time!r} is not a SLURM time",
                          "use minutes, HH:MM:SS or D-HH:MM:SS, e.g. --time 02:00:00")
    for flag, value in (("--partition", cfg.partition), ("--output", cfg.output),
                        ("--job-name", cfg.job_name)):
        if value is not None and (not value or "\n" in value):
            raise ConfigError(f"{flag} {value!r} is empty or spans lines",
                              f"give {flag} a single-line value")


def _check_spares(cfg: SbatchConfig) -> None:
    """Spares serve the recovery: they need --requeue (its watcher and checkpoint signal)
    and a restart budget, and fit in the node limit with the job's own nodes."""
    if cfg.spare_nodes == 0:
        return
    if not 0 < cfg.spare_nodes <= MAX_NODES - cfg.nodes:
        raise ConfigError(f"--spare-nodes {cfg.spare_nodes} is outside 0..{MAX_NODES - cfg.nodes}"
                          f" (--nodes {cfg.nodes} + spares at most {MAX_NODES})",
                          "give how many nodes to hold in reserve, e.g. --spare-nodes 1")
    missing = "--requeue" if not cfg.requeue else "--max-recoveries 1 or more" \
        if not cfg.max_recoveries else ""
    if missing:
        raise ConfigError(f"--spare-nodes {cfg.spare_nodes} without {missing}: nothing would "
                          "restart the step on a spare",
                          f"add {missing} (the recovery comes with it), or drop --spare-nodes")


def _check_ntasks(cfg: SbatchConfig) -> None:
    if cfg.ntasks is None:
        return
    if not 1 <= cfg.ntasks <= cfg.nodes * MAX_PROCS_PER_NODE:
        raise ConfigError(f"--ntasks {cfg.ntasks} is outside 1..{cfg.nodes * MAX_PROCS_PER_NODE}",
                          f"drop --ntasks (at most {MAX_PROCS_PER_NODE} tasks per node)")
    if cfg.ntasks_per_node is None and cfg.nodes > 1:
        raise ConfigError(
            f"--ntasks {cfg.ntasks} across --nodes {cfg.nodes} without --ntasks-per-node: "
            "SLURM may place the tasks unevenly (e.g. 3+1), which breaks LOCAL_RANK and "
            "one-rank-per-GPU",
            f"use --ntasks-per-node {max(1, cfg.ntasks // cfg.nodes)} instead of --ntasks")
    if cfg.ntasks_per_node is not None and cfg.ntasks != cfg.nodes * cfg.ntasks_per_node:
        raise ConfigError(
            f"--ntasks {cfg.ntasks} contradicts --nodes {cfg.nodes} x --ntasks-per-node "
            f"{cfg.ntasks_per_node} = {cfg.nodes * cfg.ntasks_per_node}",
            "drop --ntasks: --nodes and --ntasks-per-node define the job")


def _check_gpus(cfg: SbatchConfig) -> None:
    if cfg.gpus_per_node is None:
        return
    if cfg.gpus_per_node < 0:
        raise ConfigError(f"--gpus-per-node {cfg.gpus_per_node} is negative", "use 0 or more")
    if cfg.gpus_per_node and cfg.tasks_per_node > cfg.gpus_per_node:
        raise ConfigError(
            f"--ntasks-per-node {cfg.tasks_per_node} exceeds --gpus-per-node "
            f"{cfg.gpus_per_node}: NCCL needs one GPU per rank",
            f"use --ntasks-per-node {cfg.gpus_per_node} (one rank per GPU)")


def render(cfg: SbatchConfig) -> str:
    """The batch script text."""
    lines = [*_directives(cfg), *_environment(cfg)]
    if cfg.preflight:
        lines += [
            "# Preflight: every node checks its network, versions and the rendezvous first;",
            "# a failing check ends the job before the training starts.",
            'srun --ntasks-per-node=1 --kill-on-bad-exit=1 "$PY" -m ddpnet check',
            "",
        ]
    lines += _step(cfg)
    return "\n".join(lines) + "\n"


def _directives(cfg: SbatchConfig) -> list[str]:
    """The shebang, a summary and the #SBATCH lines."""
    tpn = cfg.tasks_per_node
    lines = [
        "#!/bin/bash",
        f"# Rendered by `ddpnet sbatch`: {cfg.nodes} node(s) x {tpn} rank(s), engine "
        f"{cfg.engine}{_spares_said(cfg)}.",
        f"#SBATCH --job-name={cfg.job_name}",
        f"#SBATCH --nodes={cfg.nodes + cfg.spare_nodes}",
        f"#SBATCH --ntasks-per-node={1 if cfg.engine == 'torchrun' else tpn}",
    ]
    for key, value in (("cpus-per-task", cfg.cpus_per_task),
                       ("gpus-per-node", cfg.gpus_per_node), ("partition", cfg.partition),
                       ("time", cfg.time)):
        if value:
            lines.append(f"#SBATCH --{key}={value}")
    lines.append(f"#SBATCH --output={cfg.output}")
    if cfg.spare_nodes:
        # a node set DOWN ends the step's part there, not the allocation (sbatch(1) --no-kill)
        lines.append("#SBATCH --no-kill")
    return [*lines, *directives(cfg.warning, cfg.requeue)]


def _spares_said(cfg: SbatchConfig) -> str:
    return f", {cfg.spare_nodes} spare node(s) more in the allocation" if cfg.spare_nodes \
        else ""


def _environment(cfg: SbatchConfig) -> list[str]:
    """PY, MASTER_ADDR and MASTER_PORT (computed once, exported to every step), the pinned
    interface, and a line in the log that says what was chosen."""
    q = shlex.quote
    lines = [
        "",
        "set -euo pipefail",
        "# The Python environment ddpnet is installed in (the same path on every node).",
        f"PY={q(cfg.python)}",
        "",
        "# Rank 0 runs on the first node of the allocation: that host is MASTER_ADDR.",
        'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "# A port derived from the job id, outside the ephemeral range (no collision with",
        "# outgoing connections or with another job's port on a shared node).",
        'MASTER_PORT=$("$PY" -m ddpnet.launch.port "$SLURM_JOB_ID")',
        "export MASTER_ADDR MASTER_PORT",
    ]
    if cfg.ifname:
        lines.append(f"export GLOO_SOCKET_IFNAME={q(cfg.ifname)} "
                     f"NCCL_SOCKET_IFNAME={q(cfg.ifname)} TP_SOCKET_IFNAME={q(cfg.ifname)}")
    lines.append('echo "ddpnet: job $SLURM_JOB_ID on $SLURM_JOB_NODELIST, '
                 'MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT"')
    return [*lines, ""]


def _step(cfg: SbatchConfig) -> list[str]:
    """The srun step that starts the ranks; with a warning signal, the requeue after it."""
    q = shlex.quote
    tpn = cfg.tasks_per_node
    target = " ".join(q(a) for a in cfg.target.raw())
    # srun >= 22.05 does not inherit --cpus-per-task from the allocation: pass it on
    cpus = f" --cpus-per-task={cfg.cpus_per_task}" if cfg.cpus_per_task else ""
    lines = []
    where = _step_nodes(cfg)
    step_tpn = 1 if cfg.engine == "torchrun" else tpn
    # with spares the step is smaller than the allocation, whose SLURM_NTASKS srun would
    # inherit ("More processors requested than permitted"): the step's own task count
    tasks = f" --ntasks={cfg.nodes * step_tpn}" if where else ""
    if cfg.engine == "torchrun":
        if not cfg.cpus_per_task:
            lines += [f"# One srun task per node starts {tpn} rank(s): with CPU binding "
                      "(task/affinity, cgroups)",
                      "# give it the node's cores with --cpus-per-task, or they share one."]
        step = (f'srun{where}{tasks} --ntasks-per-node=1{cpus} --kill-on-bad-exit=1 "$PY" -m '
                f"ddpnet launch --nproc-per-node {tpn} --max-restarts {cfg.max_restarts} -- "
                f"{target}")
    else:
        tasks += f" --ntasks-per-node={tpn}" if where else ""
        step = f'srun{where}{tasks}{cpus} --kill-on-bad-exit=1 "$PY" -m ddpnet exec -- {target}'
    if cfg.warning is None:
        lines += ["# To checkpoint and requeue near the time limit, render with --requeue",
                  f"# (#SBATCH --signal={DEFAULT_SIGNAL} to every rank, requeue when the "
                  "step exits 75)."]
    elif cfg.engine == "torchrun":
        lines += torchrun_lines(cfg.warning)
    recover = recover_command('"$PY"', cfg.max_recoveries, bool(where)) \
        if cfg.requeue and cfg.max_recoveries else ""
    spare = Spare(cfg.nodes) if where else None
    return [*lines, *step_lines(step, cfg.warning, cfg.requeue, recover, spare)]


def _step_nodes(cfg: SbatchConfig) -> str:
    """With spares: the step's own node count and nodes (chosen before each start), since
    the allocation holds more; else "" (the step takes the whole allocation)."""
    return f' --nodes={cfg.nodes} --nodelist="$STEP_NODES"' if cfg.spare_nodes else ""

"""``ddpnet launch --hostfile FILE``: torchrun on every host of a hostfile, started over SSH.

Host ``i`` of the file (in order) is node rank ``i``; the first host is MASTER_ADDR (global
rank 0 runs there, static rendezvous); each host runs its slots as ``--nproc-per-node``
(or the flag's count). Every host's torchrun runs under :mod:`ddpnet.launch.remote` (so it
dies with the launcher), in the launcher's working directory, with the launcher's
NCCL/GLOO/PYTHON/TORCH/DDPNET variables. :func:`plan` is pure; :func:`execute` is the edge:
the SSH preflight, then the job.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ddpnet.launch.command import Host, LaunchConfig, NNodes, Target, build_torchrun
from ddpnet.launch.ssh import HostfileOptions, SshError, forwarded_env, remote_command, ssh_argv
from ddpnet.launch.sshrun import HostJob


@dataclass(frozen=True)
class SshLaunch:
    """Everything an SSH launch runs: the hosts, how to reach them, what each one runs."""

    hosts: tuple[Host, ...]
    hostfile: HostfileOptions
    python: str
    #: the variables every host gets (the preflight runs under them too)
    env: Mapping[str, str]
    cwd: str
    jobs: tuple[HostJob, ...]
    nodes: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class HostSettings:
    """What the flags fix for every host."""

    target: Target
    nproc: int | None
    master_addr: str | None
    master_port: int
    rdzv: str
    max_restarts: int
    iface_env: Mapping[str, str]
    #: what turns the watch on (or off) in every rank
    watch_env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


def node_config(hosts: tuple[Host, ...], index: int, s: HostSettings,
                python: str) -> LaunchConfig:
    """Host ``index``'s torchrun settings (pure)."""
    n = len(hosts)
    return LaunchConfig(
        target=s.target, nproc_per_node=s.nproc or hosts[index].slots, nnodes=NNodes(n, n),
        node_rank=index, master_addr=s.master_addr or hosts[0].name,
        master_port=s.master_port, rdzv=s.rdzv, max_restarts=s.max_restarts, python=python,
        run_id=f"ddpnet-{s.master_port}", iface_env=MappingProxyType(dict(s.iface_env)),
        watch_env=MappingProxyType(dict(s.watch_env)),
        sources=MappingProxyType({"node_rank": "--hostfile line order",
                                  "master_addr": "--master-addr" if s.master_addr
                                  else "--hostfile first host"}))


def plan(hf: HostfileOptions, hosts: tuple[Host, ...], s: HostSettings,
         environ: Mapping[str, str], cwd: str, python: str) -> SshLaunch:
    """Every host's ssh command line and, for ``--dry-run``, its node entry (pure)."""
    common = forwarded_env(environ)
    jobs, nodes = [], []
    first_rank = 0
    for i, host in enumerate(hosts):
        cfg = node_config(hosts, i, s, python)
        argv, env = build_torchrun(cfg)
        env = {**common, **env}
        remote = remote_command([python, "-m", "ddpnet.launch.remote", "--", *argv], env, cwd)
        jobs.append(HostJob(host.name, remote))
        ssh = ssh_argv(hf.ssh, host.name, remote)
        ranks = list(range(first_rank, first_rank + cfg.nproc_per_node))
        first_rank += cfg.nproc_per_node
        nodes.append({"host": host.name, "node_rank": i, "argv": ssh, "env": env,
                      "command": shlex.join(ssh), "ranks": ranks})
    return SshLaunch(hosts, hf, python, MappingProxyType(common), cwd, tuple(jobs),
                     tuple(nodes))


def _relay(host: str, stream: str, line: str) -> None:
    from ddpnet.output import relay_line

    relay_line(line, prefix=host, stderr=stream == "stderr")


def preflight(hf: HostfileOptions, hosts: tuple[Host, ...], python: str,
              env: Mapping[str, str], cwd: str) -> None:
    """Raise :class:`SshError` naming every host an SSH launch cannot use, each on its own
    line on stderr first when there are several (edge)."""
    from ddpnet.launch import sshrun
    from ddpnet.output import relay_line

    problems = sshrun.preflight([h.name for h in hosts], hf.ssh, python, env, cwd)
    if not problems:
        return
    if len(problems) > 1:
        for p in problems:
            relay_line(f"ddpnet: {p.line}", stderr=True)
    raise SshError.of(problems, len(hosts))


def execute(launch: SshLaunch) -> int:
    """The preflight, then every host's torchrun; the job's status (edge)."""
    from ddpnet.launch import sshrun

    preflight(launch.hostfile, launch.hosts, launch.python, launch.env, launch.cwd)
    result = sshrun.run_jobs(launch.jobs, launch.hostfile.ssh, _relay)
    report_exits(result)
    return result.code


def report_exits(result: Any) -> None:
    """One stderr line per host that failed: its ssh cause, or its status."""
    from ddpnet.output import relay_line

    for e in result.exits:
        if e.problem is not None:
            relay_line(f"ddpnet: {e.problem.line}\nhint: {e.problem.fix}", stderr=True)
        elif e.code and not e.stopped:
            relay_line(f"ddpnet: {e.host}: exit {e.code}", stderr=True)

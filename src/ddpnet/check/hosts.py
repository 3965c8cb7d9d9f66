"""``ddpnet check --hostfile FILE``: one rank per host of a hostfile, started over SSH.

Host ``i`` (in file order) runs rank ``i`` of the check (``python -m ddpnet.check``) with
RANK, WORLD_SIZE, LOCAL_RANK, NODE_RANK, MASTER_ADDR (the first host) and MASTER_PORT
exported, under launch's SSH machinery (:mod:`ddpnet.launch.sshrun`: preflight first, one
ssh per host, signals forwarded, the remote ranks stopped with the launcher). Slots do not
matter here: the check is about hosts and the network between them. Rank 0's verdict is what
this prints: streamed as rank 0 prints it, or its JSON object under ``--json``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ddpnet.check.options import CheckOptions
from ddpnet.exitcodes import ExitCode
from ddpnet.launch.command import Host
from ddpnet.launch.ssh import HostfileOptions, HostProblem, forwarded_env, remote_command
from ddpnet.launch.sshrun import HostJob, JobResult

#: MASTER_PORT without one in the environment (torch's default)
DEFAULT_PORT = 29500


def rank_env(hosts: tuple[Host, ...], index: int, port: int) -> dict[str, str]:
    """Rank ``index``'s variables: one rank per host (pure)."""
    return {"RANK": str(index), "WORLD_SIZE": str(len(hosts)), "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1", "NODE_RANK": str(index), "NNODES": str(len(hosts)),
            "MASTER_ADDR": hosts[0].name, "MASTER_PORT": str(port)}


def host_jobs(hosts: tuple[Host, ...], options: CheckOptions, *, port: int, python: str,
              common: Mapping[str, str], cwd: str, as_json: bool) -> tuple[HostJob, ...]:
    """Every host's command line (pure): rank 0 prints the verdict (``--human`` unless
    ``as_json``), the others their JSON line."""
    rank_opts = replace(options, local=None, matrix=options.matrix_on(len(hosts)))
    jobs = []
    for i, host in enumerate(hosts):
        human = ["--human"] if i == 0 and not as_json else []
        argv = [python, "-m", "ddpnet.launch.remote", "--", python, "-m", "ddpnet.check",
                (rank_opts if i == 0 else replace(rank_opts, report_path=None)).to_json(),
                *human]
        jobs.append(HostJob(host.name, remote_command(
            argv, {**common, **rank_env(hosts, i, port)}, cwd)))
    return tuple(jobs)


@dataclass(frozen=True)
class HostsCheck:
    """Rank 0's verdict (its JSON object when it printed one) and how every host ended."""

    first_host: str
    job: JobResult
    verdict: Mapping[str, Any] | None = None

    @property
    def rank0_problem(self) -> HostProblem | None:
        return self.job.exits[0].problem if self.job.exits else None

    @property
    def exit_code(self) -> int:
        if self.job.signals:
            return self.job.code
        code = self.job.exits[0].code if self.job.exits else int(ExitCode.CHECK_FAILED)
        return int(ExitCode.CHECK_FAILED) if code == 255 else code

    def to_dict(self) -> dict[str, Any]:
        if self.verdict is not None:
            return dict(self.verdict)
        problem = self.rank0_problem
        detail = problem.line if problem else f"rank 0 on {self.first_host} printed no verdict"
        cause = {"id": problem.cause if problem else "ssh-failed", "hosts": [self.first_host],
                 "ranks": [0], "detail": detail, "fix": problem.fix if problem else
                 "read rank 0's output above"}
        return {"verdict": "fail", "causes": [cause], "line": detail}


def _verdict(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.strip().splitlines()):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    return None


def _relay(first: str, as_json: bool) -> Any:
    from ddpnet.output import relay_line

    def on_line(host: str, stream: str, line: str) -> None:
        if stream == "stdout" and host == first and not as_json:
            relay_line(line)  # rank 0's verdict, as it printed it
        else:
            relay_line(line, prefix=host, stderr=True)

    return on_line


def run_hosts(options: CheckOptions, hf: HostfileOptions, as_json: bool,
              environ: Mapping[str, str] | None = None) -> HostsCheck:
    """The SSH preflight, then every host's rank; rank 0's verdict (edge)."""
    from ddpnet.env.base import parse_int
    from ddpnet.errors import ConfigError
    from ddpnet.launch import hostlaunch, sshrun
    from ddpnet.launch.hostfile import check_master, read_hostfile

    if options.local is not None:
        raise ConfigError("--local runs on this machine only; it excludes --hostfile",
                          "drop --local, or drop --hostfile")
    env = dict(os.environ if environ is None else environ)
    hosts = read_hostfile(hf.path)
    check_master(hosts)
    python = hf.python or sys.executable
    common, cwd = forwarded_env(env), os.getcwd()
    hostlaunch.preflight(hf, hosts, python, common, cwd)
    port = parse_int(env.get("MASTER_PORT") or str(DEFAULT_PORT), "MASTER_PORT", minimum=1)
    jobs = host_jobs(hosts, options, port=port, python=python, common=common, cwd=cwd,
                     as_json=as_json)
    first = hosts[0].name
    kept = frozenset(h.name for h in hosts[1:]) | (frozenset({first}) if as_json
                                                  else frozenset())
    result = sshrun.run_jobs(jobs, hf.ssh, _relay(first, as_json), keep_stdout=kept)
    hostlaunch.report_exits(result)
    return HostsCheck(first, result, _verdict(result.exits[0].stdout) if as_json else None)


def render(result: Any, console: Any) -> None:
    """Nothing: rank 0 printed its verdict as it ran (streamed), and a host that failed was
    named on stderr (:func:`ddpnet.launch.hostlaunch.report_exits`)."""

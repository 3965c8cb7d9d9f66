"""IBM LSF with ``jsrun`` (JSM_NAMESPACE_*), as on Summit-class machines.

Hosts come from LSB_MCPU_HOSTS (``launch 1 node1 42 node2 42``); the first entry is the batch
launch node, which runs no ranks, so the master is the first compute host.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ddpnet.env.base import Launcher, ReadContext, Sourced, env_int, put, put_master
from ddpnet.env.hostlist import valid_host
from ddpnet.errors import ConfigError


def parse_mcpu_hosts(text: str) -> tuple[str, ...]:
    """Compute hosts of ``LSB_MCPU_HOSTS`` (pairs of host and slot count, launch node first)."""
    words = text.split()
    if len(words) % 2:
        raise ConfigError(
            f"LSB_MCPU_HOSTS={text!r} is not a list of 'host slots' pairs",
            "LSF sets it as 'launchnode 1 node1 42 node2 42'; do not overwrite it",
        )
    hosts = [words[i] for i in range(0, len(words), 2)]
    bad = next((h for h in hosts if not valid_host(h)), None)
    if bad is not None:
        raise ConfigError(
            f"LSB_MCPU_HOSTS={text[:60]!r}: {bad[:40]!r} is not a host name",
            "LSF sets it as 'launchnode 1 node1 42 node2 42'; do not overwrite it",
        )
    compute = hosts[1:] if len(hosts) > 1 else hosts
    return tuple(dict.fromkeys(compute))


class LsfLauncher(Launcher):
    name: ClassVar[str] = "lsf"
    markers: ClassVar[tuple[str, ...]] = ("LSB_JOBID", "JSM_NAMESPACE_RANK")

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        return "LSB_JOBID" in environ and "JSM_NAMESPACE_RANK" in environ

    @classmethod
    def job_hosts(cls, environ: Mapping[str, str], ctx: ReadContext) -> Sourced | None:
        if not environ.get("LSB_MCPU_HOSTS"):
            return None
        return parse_mcpu_hosts(environ["LSB_MCPU_HOSTS"]), "LSB_MCPU_HOSTS"

    def read(self, environ: Mapping[str, str], ctx: ReadContext) -> dict[str, Sourced]:
        out: dict[str, Sourced] = {}
        put(out, "rank", env_int(environ, "JSM_NAMESPACE_RANK"))
        put(out, "world_size", env_int(environ, "JSM_NAMESPACE_SIZE", minimum=1))
        put(out, "local_rank", env_int(environ, "JSM_NAMESPACE_LOCAL_RANK"))
        put(out, "local_world_size", env_int(environ, "JSM_NAMESPACE_LOCAL_SIZE", minimum=1))
        if environ.get("LSB_MCPU_HOSTS"):
            out["hosts"] = (parse_mcpu_hosts(environ["LSB_MCPU_HOSTS"]), "LSB_MCPU_HOSTS")
        put_master(out, environ)
        out["job_id"] = (environ["LSB_JOBID"], "LSB_JOBID")
        return out

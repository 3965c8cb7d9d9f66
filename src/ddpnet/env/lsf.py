"""IBM LSF: a task started by ``jsrun`` (JSM_NAMESPACE_*), as on Summit-class machines, or
the job script itself.

For ``jsrun`` tasks hosts come from LSB_MCPU_HOSTS (``launch 1 node1 42 node2 42``); the
first entry is the batch launch node, which runs no ranks, so the master is the first compute
host.

The job script (LSB_JOBID with LSB_MCPU_HOSTS or LSB_DJOB_HOSTFILE, no JSM_NAMESPACE_RANK) is
one process on the first execution host (lsf.conf's ``LSB_DJOB_HOSTFILE``: one host per slot
per line, like PBS's node file; ``LSB_MCPU_HOSTS``: ``host slots`` pairs): the launching
script, not a rank. Its job is every listed host with its slots, in order; the ranks start on
them with ``blaunch HOST torchrun ...``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ddpnet.env.base import (
    Launcher,
    ReadContext,
    Sourced,
    count_slots,
    env_int,
    file_text,
    job_script,
    put,
    put_master,
)
from ddpnet.env.hostlist import compress, valid_host
from ddpnet.errors import ConfigError

_HOSTFILE = "LSB_DJOB_HOSTFILE"


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


def mcpu_slots(text: str) -> tuple[tuple[str, int], ...]:
    """Every ``(host, slots)`` pair of ``LSB_MCPU_HOSTS``, in order (the job script's view:
    the first host runs it and has slots too)."""
    parse_mcpu_hosts(text)  # the same checks and errors
    words = text.split()
    if not words:
        raise ConfigError("LSB_MCPU_HOSTS is empty", "LSF sets it as 'node1 4 node2 4'")
    pairs: dict[str, int] = {}
    for host, count in zip(words[::2], words[1::2], strict=True):
        try:
            slots = int(count, 10)
        except ValueError:
            slots = 0
        if slots < 1:
            raise ConfigError(f"LSB_MCPU_HOSTS={text[:60]!r}: {count[:20]!r} is not a slot "
                              "count", "LSF sets it as 'node1 4 node2 4'; do not overwrite it")
        pairs[host] = pairs.get(host, 0) + slots
    return tuple(pairs.items())


def _script_slots(environ: Mapping[str, str], ctx: ReadContext) -> Sourced | None:
    """``((host, slots), ...)`` of the job: LSB_DJOB_HOSTFILE, else LSB_MCPU_HOSTS; None when
    neither reads (a ``blaunch`` task elsewhere looks like a job script too: it must still
    resolve, as one process, as it did before the job view)."""
    if environ.get(_HOSTFILE):
        from ddpnet.env.pbs import parse_nodefile

        try:
            text = file_text(environ, _HOSTFILE, ctx, "host file")
            return count_slots(parse_nodefile(text, _HOSTFILE)), _HOSTFILE
        except ConfigError:
            pass
    try:
        return mcpu_slots(environ.get("LSB_MCPU_HOSTS", "")), "LSB_MCPU_HOSTS"
    except ConfigError:
        return None


def _read_script(environ: Mapping[str, str], ctx: ReadContext) -> dict[str, Sourced]:
    source = "LSF job script"
    out: dict[str, Sourced] = {
        "rank": (0, source), "world_size": (1, source), "local_rank": (0, source),
        "local_world_size": (1, source), "node_rank": (0, source), "num_nodes": (1, source)}
    found = _script_slots(environ, ctx)
    if found is None:
        out["note"] = ("LSF job script (one process): neither LSB_DJOB_HOSTFILE nor "
                       "LSB_MCPU_HOSTS lists the job's hosts", "LSB_JOBID")
        return out
    entries, where = found
    hosts = [h for h, _ in entries]
    out["job_script"] = job_script("lsf", environ["LSB_JOBID"], entries, where, ctx)
    out["note"] = (f"LSF job script: the launching script of a job of "
                   f"{sum(n for _, n in entries)} slots on {len(hosts)} hosts "
                   f"{compress(hosts)} ({where}), not a rank; start the ranks with "
                   "blaunch HOST torchrun ... on each host, or mpirun", where)
    return out


class LsfLauncher(Launcher):
    name: ClassVar[str] = "lsf"
    markers: ClassVar[tuple[str, ...]] = ("LSB_JOBID", "JSM_NAMESPACE_RANK", "LSB_MCPU_HOSTS",
                                          _HOSTFILE)

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        """A jsrun task, or the job script (its host list set, no jsrun)."""
        return "LSB_JOBID" in environ and any(
            v in environ for v in ("JSM_NAMESPACE_RANK", "LSB_MCPU_HOSTS", _HOSTFILE))

    @classmethod
    def files(cls, environ: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        return ((_HOSTFILE, environ[_HOSTFILE]),) if environ.get(_HOSTFILE) else ()

    @classmethod
    def job_hosts(cls, environ: Mapping[str, str], ctx: ReadContext) -> Sourced | None:
        if not environ.get("LSB_MCPU_HOSTS"):
            return None
        return parse_mcpu_hosts(environ["LSB_MCPU_HOSTS"]), "LSB_MCPU_HOSTS"

    def read(self, environ: Mapping[str, str], ctx: ReadContext) -> dict[str, Sourced]:
        if "JSM_NAMESPACE_RANK" not in environ:
            out = _read_script(environ, ctx)
            put_master(out, environ)
            out["job_id"] = (environ["LSB_JOBID"], "LSB_JOBID")
            return out
        out = {}
        put(out, "rank", env_int(environ, "JSM_NAMESPACE_RANK"))
        put(out, "world_size", env_int(environ, "JSM_NAMESPACE_SIZE", minimum=1))
        put(out, "local_rank", env_int(environ, "JSM_NAMESPACE_LOCAL_RANK"))
        put(out, "local_world_size", env_int(environ, "JSM_NAMESPACE_LOCAL_SIZE", minimum=1))
        if environ.get("LSB_MCPU_HOSTS"):
            out["hosts"] = (parse_mcpu_hosts(environ["LSB_MCPU_HOSTS"]), "LSB_MCPU_HOSTS")
        put_master(out, environ)
        out["job_id"] = (environ["LSB_JOBID"], "LSB_JOBID")
        return out

"""Grid Engine (Sun/Oracle/Univa/Altair Grid Engine, Son of Grid Engine).

Every job gets ``JOB_ID``, ``SGE_TASK_ID`` (``undefined`` outside array jobs), ``NSLOTS``,
``NHOSTS``, ``QUEUE``; a job in a parallel environment also gets ``PE`` and ``PE_HOSTFILE``
(sge_pe(5), qsub(1) "ENVIRONMENTAL VARIABLES"). ``PE_HOSTFILE`` has one line per host:
``host slots queue processor-range``, e.g. ``node01 4 all.q@node01 UNDEFINED``, the master
host first.

The job script runs once, on the master host: it resolves as a one-process job (like SLURM's
batch step), with the allocation in a note. Ranks come from ``mpirun`` inside the job (tight
integration: MPI is detected and wins) or from ``ddpnet launch`` / torchrun on each host.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ddpnet.env.base import (
    Launcher,
    ReadContext,
    Sourced,
    env_int,
    file_text,
    job_script,
    put_master,
)
from ddpnet.env.hostlist import compress, valid_host
from ddpnet.errors import ConfigError

_FILE_VAR = "PE_HOSTFILE"
_HINT = ("Grid Engine writes 'host slots queue processor-range' per line, e.g. "
         "'node01 4 all.q@node01 UNDEFINED'; do not point PE_HOSTFILE at another format")


def _line(number: int, line: str, source: str) -> tuple[str, int]:
    fields = line.split()
    if len(fields) < 2:
        raise ConfigError(f"{source} line {number} {line[:60]!r} has no slot count", _HINT)
    if not valid_host(fields[0]):
        raise ConfigError(f"{source} line {number}: {fields[0][:60]!r} is not a host name",
                          _HINT)
    try:
        slots = int(fields[1], 10)
    except ValueError:
        slots = 0
    if not 1 <= slots <= 1_000_000:
        raise ConfigError(
            f"{source} line {number}: {fields[1][:20]!r} is not a slot count (1 or more)",
            _HINT)
    return fields[0], slots


def parse_pe_hostfile(text: str, source: str = _FILE_VAR) -> tuple[tuple[str, int], ...]:
    """``(host, slots)`` per line, in order (the master host first)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ConfigError(f"{source} is empty: the job has no hosts", _HINT)
    entries = tuple(_line(n, line, source) for n, line in enumerate(lines, 1))
    hosts = [host for host, _ in entries]
    if len(set(hosts)) != len(hosts):
        raise ConfigError(f"{source} lists a host twice", _HINT)
    return entries


class SgeLauncher(Launcher):
    name: ClassVar[str] = "sge"
    markers: ClassVar[tuple[str, ...]] = ("JOB_ID", "SGE_TASK_ID", _FILE_VAR)

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        return "JOB_ID" in environ and ("SGE_TASK_ID" in environ or _FILE_VAR in environ)

    @classmethod
    def files(cls, environ: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        return ((_FILE_VAR, environ[_FILE_VAR]),) if _FILE_VAR in environ else ()

    @classmethod
    def job_hosts(cls, environ: Mapping[str, str], ctx: ReadContext) -> Sourced | None:
        if _FILE_VAR not in environ:
            return None
        entries = parse_pe_hostfile(file_text(environ, _FILE_VAR, ctx, "host file"))
        return tuple(host for host, _ in entries), _FILE_VAR

    def read(self, environ: Mapping[str, str], ctx: ReadContext) -> dict[str, Sourced]:
        source = "Grid Engine job script"
        out: dict[str, Sourced] = {
            "rank": (0, source), "world_size": (1, source), "local_rank": (0, source),
            "local_world_size": (1, source), "node_rank": (0, source), "num_nodes": (1, source),
        }
        if _FILE_VAR in environ:
            entries = parse_pe_hostfile(file_text(environ, _FILE_VAR, ctx, "host file"))
            hosts = [host for host, _ in entries]
            slots = sum(n for _, n in entries)
            nslots = env_int(environ, "NSLOTS", minimum=1)
            if nslots is not None and nslots[0] != slots:
                raise ConfigError(
                    f"NSLOTS={nslots[0]} but {_FILE_VAR} lists {slots} slots",
                    "both come from Grid Engine for the same job; is PE_HOSTFILE another "
                    "job's, or NSLOTS overwritten?")
            out["note"] = (f"Grid Engine job script: the launching script of a job of {slots} "
                           f"slots on {len(hosts)} hosts {compress(hosts)} ({_FILE_VAR}), not "
                           "a rank; start the ranks with mpirun, or torchrun / ddpnet launch "
                           "on each host (qrsh -inherit)", _FILE_VAR)
        task = environ.get("SGE_TASK_ID", "undefined")
        job = environ["JOB_ID"] + ("" if task == "undefined" else f".{task}")
        if _FILE_VAR in environ:
            out["job_script"] = job_script("sge", job, entries, _FILE_VAR, ctx)
        put_master(out, environ)
        out["job_id"] = (job, "JOB_ID")
        return out

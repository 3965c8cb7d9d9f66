"""The launcher interface and the parsing helpers every launcher shares."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ddpnet.config import JobScript
from ddpnet.errors import ConfigError

#: a value together with where it came from (a variable name, a flag, ``derived``, ``default``)
Sourced = tuple[Any, str]


@dataclass(frozen=True)
class ReadContext:
    """Facts a launcher may need beyond the environment, read at the edge by ``resolve``."""

    port_range: tuple[int, int] = (32768, 60999)
    #: contents of the files a launcher names in its environment (PBS_NODEFILE, PE_HOSTFILE),
    #: by path, read at the edge by ``resolve`` (see :meth:`Launcher.files`)
    files: Mapping[str, str] | None = None
    #: why a named file could not be read, by path
    file_errors: Mapping[str, str] | None = None


class Launcher(ABC):
    """One way a process can be started. ``read`` returns only what this launcher knows;
    ``resolve`` fills the rest from defaults and derivations."""

    name: ClassVar[str]
    #: variables that mark this launcher, shown in ``ddpnet env``'s reason
    markers: ClassVar[tuple[str, ...]]
    #: environments whose variables this one finds around it by design (mpirun inside a PBS
    #: job, torchrun inside anything: ``*``); two detected environments that are not nested
    #: either way are reported as ambiguous (see :func:`ddpnet.env.detect.ambiguities`)
    runs_within: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def files(cls, environ: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        """``(variable, path)`` of the files ``read`` needs; ``resolve`` reads them first."""
        return ()

    @classmethod
    def job_hosts(cls, environ: Mapping[str, str], ctx: ReadContext) -> Sourced | None:
        """A batch system's hosts in allocation order, first the one where an ``mpirun``
        started inside the job places rank 0; None for launchers that are no batch job."""
        return None

    @staticmethod
    @abstractmethod
    def detect(environ: Mapping[str, str]) -> bool:
        """True when this launcher started the process."""

    @abstractmethod
    def read(self, environ: Mapping[str, str], ctx: ReadContext) -> dict[str, Sourced]:
        """The values this launcher sets, keyed like :class:`ddpnet.config.DistConfig`."""


def parse_int(value: str, source: str, *, minimum: int = 0) -> int:
    """An integer from a variable or flag, or a one-line ConfigError naming the source."""
    text = value.strip()
    try:
        number = int(text, 10)
    except ValueError:
        example = 29500 if "port" in source.lower() else minimum
        if source.startswith("argument "):  # ddpnet.init(rank=...) / ddpnet.resolve(...)
            name = source.removeprefix("argument ")
            hint = f"pass {name} as a whole number (e.g. {name}={example}) or leave it out"
        else:
            hint = f"set {source} to a whole number (e.g. {source}={example}) or unset it"
        raise ConfigError(f"{source}={value!r} is not an integer", hint) from None
    if number < minimum:
        raise ConfigError(
            f"{source}={number} is below {minimum}",
            f"set {source} to a value >= {minimum}",
        )
    return number


def env_int(
    environ: Mapping[str, str], name: str, *, minimum: int = 0
) -> Sourced | None:
    """``(int, name)`` when ``name`` is set, else None."""
    if name not in environ:
        return None
    return parse_int(environ[name], name, minimum=minimum), name


def first_int(
    environ: Mapping[str, str], *names: str, minimum: int = 0
) -> Sourced | None:
    """The first of ``names`` that is set, parsed as an integer."""
    for name in names:
        found = env_int(environ, name, minimum=minimum)
        if found is not None:
            return found
    return None


def put(out: dict[str, Sourced], key: str, found: Sourced | None) -> None:
    """Store ``found`` under ``key`` when the launcher knows it."""
    if found is not None:
        out[key] = found


def put_master(out: dict[str, Sourced], environ: Mapping[str, str]) -> None:
    """An exported MASTER_ADDR / MASTER_PORT, which every launcher honours (an empty
    MASTER_ADDR counts as unset)."""
    if environ.get("MASTER_ADDR"):
        out["master_addr"] = (environ["MASTER_ADDR"], "MASTER_ADDR")
    put(out, "master_port", env_int(environ, "MASTER_PORT"))


def file_text(environ: Mapping[str, str], var: str, ctx: ReadContext, what: str) -> str:
    """The contents of the file ``environ[var]`` names, read at the edge into ``ctx``, or a
    one-line ConfigError saying why it cannot be read (``what`` is the launcher's name for
    the file, used in the hint)."""
    path = environ.get(var, "")
    if not path.strip():
        raise ConfigError(f"{var} is empty", f"{var} names the job's {what}; do not unset or "
                          "overwrite it in the job script")
    files = ctx.files or {}
    if path in files:
        return files[path]
    why = (ctx.file_errors or {}).get(path, "it was not read")
    raise ConfigError(
        f"{var}={path}: cannot read it ({why})",
        f"{var} names the job's {what}, written by the batch system on the job's nodes; "
        "run this inside the job (not on a login node) and do not overwrite it",
    )


def job_script(scheduler: str, job_id: str, entries: Sequence[tuple[str, int]], source: str,
               ctx: ReadContext) -> tuple[JobScript, str]:
    """The job a job script launches (``entries``: ``(host, slots)`` in allocation order;
    the port derived from the job id as every node derives it), sourced by ``source``."""
    from ddpnet.env.jobport import derive_port

    hosts = tuple(host for host, _ in entries)
    slots = tuple(n for _, n in entries)
    return JobScript(scheduler, job_id, hosts, slots, derive_port(job_id, ctx.port_range),
                     source), source


def count_slots(slots: Sequence[str]) -> tuple[tuple[str, int], ...]:
    """``n1 n1 n2 n2`` (one host per slot, a node file) -> ``((n1, 2), (n2, 2))``, in order."""
    counts: dict[str, int] = {}
    for host in slots:
        counts[host] = counts.get(host, 0) + 1
    return tuple(counts.items())

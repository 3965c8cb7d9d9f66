"""The launcher interface and the parsing helpers every launcher shares."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from ddpnet.errors import ConfigError

#: a value together with where it came from (a variable name, a flag, ``derived``, ``default``)
Sourced = tuple[Any, str]


@dataclass(frozen=True)
class ReadContext:
    """Facts a launcher may need beyond the environment, read at the edge by ``resolve``."""

    port_range: tuple[int, int] = (32768, 60999)
    #: contents of files a launcher names in its environment (LSF's rank file), by path
    files: Mapping[str, str] | None = None


class Launcher(ABC):
    """One way a process can be started. ``read`` returns only what this launcher knows;
    ``resolve`` fills the rest from defaults and derivations."""

    name: ClassVar[str]
    #: variables that mark this launcher, shown in ``ddpnet env``'s reason
    markers: ClassVar[tuple[str, ...]]

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

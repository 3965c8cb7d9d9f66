"""Hostfiles (pure parser, plus the one read at the edge): which hosts a job spans and how many
ranks (slots) each runs.

Accepted lines, one host each (the formats people already have):

- ``node1 slots=4``: DeepSpeed's hostfile and Open MPI's (``mpirun --hostfile``; Open MPI's
  ``max_slots=N`` is accepted and ignored, since ddpnet never oversubscribes);
- ``node1:4``: MPICH Hydra's host file (``mpiexec -f``);
- ``node1``: one host per line, one slot (``--nproc-per-node`` sets the count instead).

``#`` starts a comment; blank lines are skipped. A bad line, a duplicate host or a file
without hosts is a one-line ConfigError naming ``file:line`` with the fix.
"""

from __future__ import annotations

import re
from pathlib import Path

from ddpnet.errors import ConfigError, from_os_error
from ddpnet.launch.command import MAX_PROCS_PER_NODE, Host, host_name, split_slots

#: hosts one SSH launch may span: the launcher holds one ssh client (a process and three
#: pipes) per host for the whole job (docs/launch.md, "Hostfile")
MAX_HOSTS = 1024

_FORMATS = "write 'host slots=N' (DeepSpeed, Open MPI), 'host:N' (MPICH) or just 'host'"


def _slots(text: str, where: str) -> int:
    if not re.fullmatch(r"\d{1,9}", text):
        raise ConfigError(f"{where}: slots {text!r} is not a number", _FORMATS)
    n = int(text)
    if not 1 <= n <= MAX_PROCS_PER_NODE:
        raise ConfigError(f"{where}: {n} slots is outside 1..{MAX_PROCS_PER_NODE}",
                          "give each host 1 or more slots (its GPUs), e.g. node1 slots=8")
    return n


def _keywords(rest: str, where: str) -> int | None:
    """``slots=N`` (and an ignored ``max_slots=N``) after the host name."""
    slots = None
    for word in rest.split():
        key, eq, value = word.partition("=")
        if not eq or key not in ("slots", "max_slots"):
            raise ConfigError(f"{where}: {word!r} is not slots=N", _FORMATS)
        if key == "slots":
            if slots is not None:
                raise ConfigError(f"{where}: slots given twice", _FORMATS)
            slots = _slots(value, where)
    return slots


def parse_line(line: str, where: str) -> Host | None:
    """One line's host, or None for a blank or comment line (pure)."""
    text = line.split("#", 1)[0].strip()
    if not text:
        return None
    first, *others = text.split(None, 1)
    rest = others[0] if others else ""
    if "@" in first:
        raise ConfigError(f"{where}: {text!r} is not a host line (ssh users go in "
                          "--ssh-user)", _FORMATS)
    spec, colon = split_slots(first)
    try:
        name = host_name(spec, "its host")
    except ConfigError as exc:
        raise ConfigError(f"{where}: {text!r} is not a host line: {exc}",
                          f"{exc.hint}; {_FORMATS}") from None
    if colon is not None and rest:
        raise ConfigError(f"{where}: {text!r} mixes host:N and slots=N", _FORMATS)
    if colon is not None:
        return Host(name, _slots(colon, where))
    slots = _keywords(rest, where)
    return Host(name, 1 if slots is None else slots)


def parse_hostfile(text: str, path: str) -> tuple[Host, ...]:
    """Every host of a hostfile in order, each once (pure); ``path`` names it in errors."""
    hosts: list[Host] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        where = f"{path}:{number}"
        host = parse_line(line, where)
        if host is None:
            continue
        if host.name in seen:
            raise ConfigError(f"{where}: host {host.name} is listed again (first on line "
                              f"{seen[host.name]})",
                              "list each host once with all its slots, e.g. node1 slots=8")
        seen[host.name] = number
        hosts.append(host)
    if not hosts:
        raise ConfigError(f"{path}: no hosts in the hostfile",
                          f"{_FORMATS}, one host per line")
    if len(hosts) > MAX_HOSTS:
        raise ConfigError(f"{path}: {len(hosts)} hosts, more than {MAX_HOSTS}",
                          f"split the job, or launch with SLURM/mpirun beyond {MAX_HOSTS} hosts")
    return tuple(hosts)


def read_hostfile(path: str) -> tuple[Host, ...]:
    """The hosts of the file at ``path`` (edge: reads it)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise from_os_error(exc, "--hostfile") from None
    return parse_hostfile(text, path)


def check_master(hosts: tuple[Host, ...], master_addr: str | None = None) -> str:
    """MASTER_ADDR of a hostfile job (``master_addr``, else the first host), refused when
    the other hosts would reach themselves through it (pure)."""
    from ddpnet.net.names import is_loopback

    master = host_name(master_addr, "--master-addr") if master_addr else hosts[0].name
    if len(hosts) > 1 and (master == "localhost" or is_loopback(master)):
        where = "--master-addr" if master_addr else "the first host of the hostfile"
        raise ConfigError(
            f"MASTER_ADDR {master} ({where}) is loopback: every other host would connect "
            "to itself",
            "list the first host by a name or address the other hosts reach (or pass "
            "--master-addr ADDRESS)")
    return master

"""SLURM hostlist expansion through python-hostlist (never a regex).

python-hostlist keeps the order and the zero padding that ``scontrol show hostnames`` gives:
``n[098-101],m1`` -> n098 n099 n100 n101 m1.
"""

from __future__ import annotations

import hostlist as _hostlist

from ddpnet.errors import ConfigError


def expand(text: str, source: str = "hostlist") -> tuple[str, ...]:
    """Expand a SLURM hostlist, or raise a ConfigError that names where it came from."""
    stripped = text.strip()
    if not stripped:
        raise ConfigError(f"{source} is empty", f"set {source} to a hostlist such as node[01-04]")
    try:
        hosts = _hostlist.expand_hostlist(stripped)
    except _hostlist.BadHostlist as exc:
        raise ConfigError(
            f"{source}={text!r} is not a valid hostlist ({exc})",
            "use SLURM's syntax, e.g. gpu[01-03,07] or a,b,c; check with: "
            f"scontrol show hostnames '{text}'",
        ) from None
    if not hosts or any(not h or any(c.isspace() for c in h) for h in hosts):
        raise ConfigError(
            f"{source}={text!r} is not a valid hostlist",
            f"check it with: scontrol show hostnames '{text}'",
        )
    return tuple(str(h) for h in hosts)


def valid_host(name: str) -> bool:
    """A host name a node file or list may hold: not empty, no whitespace or NUL, and none
    of the hostlist syntax characters ``[],`` (which :func:`compress` refuses)."""
    return bool(name) and not any(c.isspace() or c in "[],\x00" for c in name)


def compress(hosts: list[str] | tuple[str, ...]) -> str:
    """The short form of a host list (for display and for ``sbatch --nodelist``)."""
    return str(_hostlist.collect_hostlist(list(hosts)))

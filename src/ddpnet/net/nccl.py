"""NCCL_SOCKET_IFNAME syntax: a comma list of name prefixes; a leading ``^`` excludes them,
a leading ``=`` (after any ``^``) makes them exact names. ``^docker,lo`` / ``=eth0`` /
``^=docker0`` / ``eth,ib``. Parsing is pure; :func:`match` applies a spec to names.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

_NAME = re.compile(r"^[A-Za-z0-9_.:@-]+$")  # what Linux accepts in an interface name


class IfnameSyntaxError(ValueError):
    """The value is not valid NCCL_SOCKET_IFNAME syntax."""


@dataclass(frozen=True)
class NcclIfname:
    exclude: bool
    exact: bool
    names: tuple[str, ...]

    def matches(self, name: str) -> bool:
        hit = any(name == n if self.exact else name.startswith(n) for n in self.names)
        return hit != self.exclude

    def __str__(self) -> str:
        return ("^" if self.exclude else "") + ("=" if self.exact else "") + ",".join(self.names)


def parse_nccl_ifname(text: str) -> NcclIfname:
    """Parse NCCL's syntax; IfnameSyntaxError names what is wrong."""
    rest = text.strip()
    exclude = rest.startswith("^")
    if exclude:
        rest = rest[1:]
    exact = rest.startswith("=")
    if exact:
        rest = rest[1:]
    if not rest:
        raise IfnameSyntaxError(f"{text!r} names no interface")
    names = tuple(part.strip() for part in rest.split(","))
    for name in names:
        if not name:
            raise IfnameSyntaxError(f"{text!r} has an empty entry")
        if name[0] in "^=":
            raise IfnameSyntaxError(
                f"{text!r}: '^' and '=' apply to the whole list and come first (^=a,b)")
        if _is_ip(name):
            raise IfnameSyntaxError(f"{text!r}: {name} is an address, not an interface name")
        if not _NAME.match(name):
            raise IfnameSyntaxError(f"{text!r}: {name!r} is not an interface name")
    return NcclIfname(exclude, exact, names)


def match(spec: NcclIfname, names: Iterable[str]) -> tuple[str, ...]:
    """The interfaces NCCL would consider, in the order given."""
    return tuple(n for n in names if spec.matches(n))


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.split("/")[0])
    except ValueError:
        return False
    return True

"""NCCL_SOCKET_IFNAME syntax: a comma list of name prefixes; a leading ``^`` excludes them,
a leading ``=`` (after any ``^``) makes them exact names. ``^docker,lo`` / ``=eth0`` /
``^=docker0`` / ``eth,ib``. Parsing is pure; :func:`match` applies a spec to names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ddpnet.address import ip_in

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
    """An address in any form a user writes one (a CIDR's too), through the one parser."""
    return ip_in(text.split("/")[0]) is not None


# --------------------------------------------------------------------------- NCCL's settings

#: the variables that decide which network NCCL uses, compared across nodes by ``check``
NET_PREFIXES = ("NCCL_SOCKET_IFNAME", "NCCL_IB_", "NCCL_NET")


def parse_nccl_conf(text: str) -> dict[str, str]:
    """``KEY=VALUE`` lines of an nccl.conf (``#`` comments, blank lines skipped; pure)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        key, sep, value = line.partition("=")
        if sep and key.strip():
            out.setdefault(key.strip(), value.strip())
    return out


def nccl_settings(environ: Mapping[str, str], conf_files: Sequence[str]) -> dict[str, str]:
    """The network variables as NCCL will read them (pure): NCCL sets each line of its
    config files without overwriting, so the environment wins, then the first file
    (``NCCL_CONF_FILE`` or ``~/.nccl.conf``), then ``/etc/nccl.conf``. ``conf_files`` are the
    files' texts in that order."""
    merged: dict[str, str] = {}
    for text in conf_files:
        for key, value in parse_nccl_conf(text).items():
            merged.setdefault(key, value)
    merged.update({k: v for k, v in environ.items() if k.startswith("NCCL_")})
    return {k: v for k, v in sorted(merged.items()) if k.startswith(NET_PREFIXES)}


def nccl_conf_paths(environ: Mapping[str, str], home: str) -> tuple[str, ...]:
    """The config files NCCL reads, first wins (pure)."""
    first = environ.get("NCCL_CONF_FILE") or f"{home}/.nccl.conf"
    return (first, "/etc/nccl.conf")


# --------------------------------------------------------------------------- NCCL's errors

@dataclass(frozen=True)
class NcclFailure:
    """A cause recognised in NCCL's own failure text."""

    cause: str
    fix: str


#: cause id -> (substrings (lowercase) of NCCL's init/collective failure text, fix); the first
#: cause with a matching substring wins. From NCCL 2.18-2.28's messages as torch reports them.
NCCL_ERROR_CAUSES: dict[str, tuple[tuple[str, ...], str]] = {
    "ranks-share-gpu": (
        ("duplicate gpu detected",),
        "run one rank per GPU on each node (--nproc-per-node = GPUs per node), or give each "
        "local rank its own GPU (CUDA_VISIBLE_DEVICES)"),
    "interface-mismatch": (
        ("no socket interface found", "bootstrap : no socket interface"),
        "NCCL_SOCKET_IFNAME names no interface with an address here: export "
        "NCCL_SOCKET_IFNAME=<the cluster interface> (ddpnet env shows it)"),
    "nccl-net-unavailable": (
        ("failed to initialize any net plugin", "could not find net with name"),
        "NCCL_NET names a transport this node lacks: unset NCCL_NET (or NCCL_NET_PLUGIN), "
        "or install the plugin it names; NCCL_NET=Socket works everywhere"),
    "cuda-driver-too-old": (
        ("cuda driver version is insufficient",),
        "upgrade the NVIDIA driver, or install a torch built for an older CUDA"),
    "version-mismatch": (
        ("nccl version mismatch",),
        "install the same torch (and so NCCL) build on every node"),
    "peer-port-blocked": (
        ("connection refused", "connection timed out"),
        "allow TCP between the nodes on ephemeral ports (ddpnet check names the pair)"),
}


def nccl_failure(text: str) -> NcclFailure | None:
    """The cause NCCL's failure ``text`` names, where it is one we know (pure)."""
    low = text.lower()
    for cause, (needles, fix) in NCCL_ERROR_CAUSES.items():
        if any(n in low for n in needles):
            return NcclFailure(cause, fix)
    return None

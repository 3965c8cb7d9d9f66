"""The interface variables to export to every rank (edge: reads this host through the net
selection when it is available)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass

from ddpnet.config import DistConfig
from ddpnet.launch.command import IFACE_VARS


@dataclass(frozen=True)
class IfaceChoice:
    """The variables to export, the interface name for mpirun's MCA options, and why."""

    env: Mapping[str, str]
    interface: str | None
    reason: str


def from_flag(ifname: str) -> IfaceChoice:
    return IfaceChoice({v: ifname for v in IFACE_VARS}, ifname, "--ifname")


def from_environ(environ: Mapping[str, str]) -> IfaceChoice | None:
    """Variables the user already exported win (and are forwarded as they are)."""
    have = {v: environ[v] for v in IFACE_VARS if environ.get(v)}
    if not have:
        return None
    first = next(iter(have.values()))
    return IfaceChoice(have, first.split(",")[0].lstrip("^=") or None,
                       f"{', '.join(have)} already set")


def choose(cfg: DistConfig | None, environ: Mapping[str, str],
           ifname: str | None = None) -> IfaceChoice:
    """--ifname, else the user's variables, else the net selection toward MASTER_ADDR."""
    if ifname:
        return from_flag(ifname)
    user = from_environ(environ)
    if user is not None:
        return user
    try:
        from ddpnet.net.select import select_for_host  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return IfaceChoice({}, None, "interface selection unavailable: torch picks")
    with contextlib.suppress(Exception):  # a selection problem must not block a dry run
        sel = select_for_host(cfg, environ)
        env = {k: v for k, v in sel.env().items() if k in IFACE_VARS}
        return IfaceChoice(env, sel.interface, f"selected {sel.interface} toward MASTER_ADDR")
    return IfaceChoice({}, None, "interface selection failed: torch picks (see ddpnet doctor)")

"""The interface variables a launcher exports to every rank: :mod:`ddpnet.net.select`'s
answer with launch's policy (names are passed on unchecked where ranks run on other hosts;
no guess past the route to MASTER_ADDR: without one, torch picks)."""

from __future__ import annotations

from collections.abc import Mapping

from ddpnet.config import DistConfig
from ddpnet.net.select import Ask, InterfaceChoice, choose_for_host


def choose(cfg: DistConfig | None, environ: Mapping[str, str],
           ifname: str | None = None, *, here: bool = False) -> InterfaceChoice:
    """--iface, else the user's variables, else the route toward MASTER_ADDR. ``here``: this
    node's ranks run on this host (torchrun, a hostless mpirun), so --iface must exist and be
    up here, in a dry run too."""
    return choose_for_host(Ask(flag=ifname, flag_name="--iface", here=here, fallback=False),
                           environ=environ, cfg=cfg)

"""Which interfaces the monitor shows (a view choice): ``auto`` (the job's interface as
:mod:`ddpnet.net.select` chooses it, or outside a job the node's cluster interface, with its
reason), ``all``, or names."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ddpnet.errors import ConfigError


@dataclass(frozen=True)
class IfaceChoice:
    names: tuple[str, ...]
    source: str  # auto | all | --iface
    reason: str


def _init_selection(environ: Mapping[str, str] | None = None,
                    loopback_ok: bool = True) -> tuple[str, str]:
    """The interface :mod:`ddpnet.net.select` chooses for this host, with its reason (edge:
    reads routes and environment): in a job (MASTER_ADDR set) the one ``ddpnet.init()``
    would select; outside one the node's cluster interface as ``doctor`` and ``tune`` find
    it (the default route's, else the first usable NIC), never loopback for want of a
    MASTER_ADDR. ``loopback_ok=False`` (the exporter) skips loopback in a job too. LookupError
    with the reason when there is none."""
    import os

    from ddpnet.net.select import Ask, choose_for_host

    env = os.environ if environ is None else environ
    choice = choose_for_host(Ask(loopback_ok=loopback_ok), environ=env,
                             route_master=bool(env.get("MASTER_ADDR")))
    if choice.name is None:
        raise LookupError(choice.reason)
    return choice.name, choice.reason


def all_but_loopback(names: Iterable[str]) -> tuple[str, ...]:
    """The fallback when no single interface is known: every interface but lo (lo alone if
    that is all there is)."""
    ordered = sorted(names)
    return tuple(n for n in ordered if n != "lo") or tuple(ordered)


def choose(
    spec: str,
    available: Iterable[str],
    auto: Callable[[], tuple[str, str]] = _init_selection,
) -> IfaceChoice:
    names = sorted(available)
    if spec == "all":
        return IfaceChoice(tuple(names), "all", "every interface in /proc/net/dev")
    if spec == "auto":
        try:
            name, why = auto()
        except Exception as exc:  # no launcher config, no route: show the busy candidates
            return IfaceChoice(all_but_loopback(names), "auto",
                               f"no interface selection ({exc}); showing all but lo")
        if name in names:
            return IfaceChoice((name,), "auto", f"selected {name}: {why}")
        return IfaceChoice(all_but_loopback(names), "auto",
                           f"selected {name} is not visible here")
    wanted = [s.strip() for s in spec.split(",") if s.strip()]
    missing = [w for w in wanted if w not in names]
    if missing or not wanted:
        raise ConfigError(
            f"interface {', '.join(missing) or spec!r} does not exist on this host",
            f"use one of: {', '.join(names)} (or --iface auto / all)",
        )
    return IfaceChoice(tuple(wanted), "--iface", "given")

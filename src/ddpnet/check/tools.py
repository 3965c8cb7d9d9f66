"""The pieces ``check`` borrows from the rest of ddpnet, bundled so a test can replace one:
interface selection (``ddpnet.net.select``), the rendezvous preflight (``ddpnet.net.probe``),
this node's facts (``ddpnet.doctor``) and the collective sweep (``ddpnet.bench``). The
defaults are the real functions."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ddpnet.check.context import BenchFn
from ddpnet.check.stages.facts import node_facts
from ddpnet.check.stages.rendezvous import PreflightFn
from ddpnet.check.stages.sweep import sweep
from ddpnet.config import DistConfig
from ddpnet.net.probe import check_store
from ddpnet.net.probe import preflight as probe_preflight
from ddpnet.net.select import Selection, select_for_host

SelectFn = Callable[[DistConfig, Mapping[str, str]], Selection]
StoreProbeFn = Callable[[DistConfig, Mapping[str, str], float], None]
FactsFn = Callable[[DistConfig, Selection, Mapping[str, str]], dict[str, Any]]


def preflight(cfg: DistConfig, environ: Mapping[str, str], connect_timeout: float) -> None:
    """MASTER_ADDR:MASTER_PORT reachable (or free, on rank 0) within ``connect_timeout``.
    Interface problems are not fatal here: they travel in the facts, so rank 0 names them
    with the host instead of seeing a missing rank."""
    probe_preflight(cfg, None, connect_timeout, environ=environ)


def store_probe(cfg: DistConfig, environ: Mapping[str, str], patience: float) -> None:
    """Ranks > 0, once the preflight connected: what listens on MASTER_PORT is a TCPStore
    (``master-port-foreign`` otherwise). Run while torch imports: rank 0 holds its socket
    while it imports torch too, and its store answers only once it took the socket over."""
    check_store(cfg, environ=environ, patience=patience)


@dataclass(frozen=True)
class Tools:
    select: SelectFn = select_for_host
    preflight: PreflightFn = preflight
    facts: FactsFn = node_facts
    bench: BenchFn = sweep
    store: StoreProbeFn = store_probe

"""Bringing up and tearing down the process group ``ddpnet bench`` runs in (edge): through
``ddpnet.init()``, so the bench gets the same interface selection, preflight and one-line
rendezvous errors as training does."""

from __future__ import annotations


def init_group(requested: str, timeout_s: float) -> str:
    """Initialise the default process group; returns the backend in use."""
    from ddpnet.process_group import init

    return init(backend=requested, timeout=timeout_s).backend


def shutdown_group() -> None:
    from ddpnet.process_group import shutdown

    shutdown()

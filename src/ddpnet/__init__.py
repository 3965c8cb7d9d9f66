"""ddpnet: from fresh Linux nodes to verified, tuned, fast multi-node PyTorch training.

Heavy pieces (torch) are imported lazily so that ``import ddpnet`` and ``ddpnet --help``
stay fast; ``ddpnet.resolve`` needs no torch at all.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# name -> "module:attribute", imported on first access (PEP 562).
_LAZY = {
    "resolve": "ddpnet.env.resolve:resolve",
    "DistConfig": "ddpnet.config:DistConfig",
    "errors": "ddpnet.errors:",
    "init": "ddpnet.process_group:init",
    "shutdown": "ddpnet.process_group:shutdown",
    "phase": "ddpnet.watch.session:phase",
    "step": "ddpnet.watch.session:step",
}

__all__ = ["DistConfig", "__version__", "errors", "init", "phase", "resolve", "shutdown",
           "step"]


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'ddpnet' has no attribute {name!r}")
    import importlib

    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    value = getattr(module, attr) if attr else module
    globals()[name] = value
    return value

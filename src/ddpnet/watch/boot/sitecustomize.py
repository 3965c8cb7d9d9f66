"""Run at interpreter start-up when this directory is on PYTHONPATH: with ``DDPNET_WATCH_ATTACH=1``,
attach the watch (``ddpnet.watch.attach``), then chain to the ``sitecustomize`` this one shadows. A
failure is one warning line, never a failed start."""

from __future__ import annotations

import os
import sys


def _attach() -> None:
    if "DDPNET_WATCH_ATTACH" not in os.environ:  # not asked: not even ddpnet is imported
        return
    from ddpnet.watch import attach

    if attach.enabled(os.environ):
        attach.install()


def later_paths(sys_path: list[str], boot: str) -> list[str]:
    """``sys.path`` but this directory (pure; needs no ddpnet)."""
    real = os.path.realpath(boot)
    return [p for p in sys_path if os.path.realpath(p or os.curdir) != real]


def _chain() -> None:
    """Load the next ``sitecustomize`` on sys.path; its errors are the interpreter's."""
    from importlib.machinery import PathFinder
    from importlib.util import module_from_spec

    spec = PathFinder.find_spec("sitecustomize",
                                later_paths(sys.path, os.path.dirname(os.path.abspath(__file__))))
    if spec is None or spec.loader is None:
        return
    module = module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


if __name__ == "sitecustomize":  # the interpreter's start-up, not a test reading the above
    try:
        _attach()
    except ModuleNotFoundError as exc:  # no ddpnet in this interpreter: not ours to watch
        if (exc.name or "").partition(".")[0] != "ddpnet":
            sys.stderr.write(f"ddpnet: warning: the watch is off: {type(exc).__name__}: "
                             f"{exc}\n")
    except Exception as exc:  # a broken ddpnet: start anyway
        sys.stderr.write(f"ddpnet: warning: the watch is off: {type(exc).__name__}: {exc}\n")
    _chain()

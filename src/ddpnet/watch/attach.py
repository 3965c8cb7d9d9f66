"""Attaching the watch to a script that calls ``torch.distributed.init_process_group`` itself
(no ddpnet import): :func:`install` wraps that function, so that the watch starts around the
script's own group exactly as in ``ddpnet.init()`` (``session.around_group``), with the
script's arguments untouched.

Installing imports no torch: when ``torch.distributed`` is not loaded yet, a ``sys.meta_path``
finder patches it the moment it is first imported. The ranks' environment that turns it on
(:func:`ranks_env`: the ``boot`` directory with its ``sitecustomize`` on ``PYTHONPATH`` and
``DDPNET_WATCH_ATTACH=1``) is what ``ddpnet launch`` and ``ddpnet exec`` add;
``python -m ddpnet.attach`` installs it directly. ``DDPNET_WATCH=0`` turns the watch off.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ddpnet.config import DistConfig
    from ddpnet.watch.settings import WatchConfig

#: the variable that makes the boot directory's ``sitecustomize`` install the hook
ATTACH_VAR = "DDPNET_WATCH_ATTACH"
#: the directory whose ``sitecustomize.py`` installs the hook (on the ranks' PYTHONPATH)
BOOT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "boot")
_ON = ("1", "true", "yes", "on")


# -- pure parts ----------------------------------------------------------------------------

def enabled(environ: Mapping[str, str]) -> bool:
    """Whether the boot ``sitecustomize`` is asked to install the hook."""
    return environ.get(ATTACH_VAR, "").strip().lower() in _ON


def python_path(environ: Mapping[str, str], boot: str = BOOT_DIR) -> str:
    """``PYTHONPATH`` with the boot directory first and the user's entries kept after it (once:
    ``ddpnet exec`` under ``ddpnet launch --via mpirun`` composes it twice)."""
    entries = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != boot]
    return os.pathsep.join([boot, *entries])


def ranks_env(environ: Mapping[str, str], watch: bool, metrics_port: int | None = None,
              boot: str = BOOT_DIR) -> dict[str, str]:
    """What a launcher adds to its ranks' environment: with ``watch`` the hook on every
    Python rank (and ``metrics_port``: where rank 0's hub serves the job's metrics);
    without, ``DDPNET_WATCH=0`` (no watch, ``ddpnet.init()`` scripts' too)."""
    if not watch:
        return {"DDPNET_WATCH": "0"}
    metrics = {"DDPNET_METRICS_PORT": str(metrics_port)} if metrics_port else {}
    return {ATTACH_VAR: "1", "PYTHONPATH": python_path(environ, boot), **metrics}


def call_overrides(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The ``ddpnet.resolve`` overrides an ``init_process_group`` call's bound arguments give:
    an explicit rank and world size, and its init method (``tcp://HOST:PORT`` names the
    master; ``env://`` and none leave it to the environment). torch's defaults (-1) are
    "not given"."""
    out: dict[str, Any] = {}
    for key in ("rank", "world_size"):
        value = arguments.get(key)
        if isinstance(value, int) and value >= 0:
            out[key] = value
    method = arguments.get("init_method")
    if isinstance(method, str) and method.strip() and arguments.get("store") is None:
        out["init_method"] = method
    return out


# -- the wrapper ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Attachment:
    """What the watch starts around one ``init_process_group`` call with."""

    cfg: DistConfig
    watch: WatchConfig
    #: the address and interface this rank's peers probe it on
    address: str
    interface: str | None


def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    """``init_process_group`` with the watch around it (``watch.patches``: the user's arguments
    pass through as written); ``original`` itself when it is already wrapped."""
    from ddpnet.watch import patches

    if patches.is_patched(original):
        return original
    return patches.around(original, attached_init)  # type: ignore[no-any-return]


def attached_init(original: Callable[..., Any], args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> Any:
    """The user's call, with the watch started around it when it should be."""
    from ddpnet.watch import session

    if session.bringing_up() or session.active():  # ddpnet.init()'s own call, or a 2nd group
        return original(*args, **kwargs)
    plan = _plan(original, args, kwargs)
    if plan is None:
        return original(*args, **kwargs)
    from ddpnet.errors import ConfigError
    from ddpnet.output import format_error

    result: list[Any] = []
    called: list[bool] = []

    def init() -> None:
        called.append(True)
        result.append(original(*args, **kwargs))

    try:
        session.around_group(plan.cfg, plan.watch, init, address=plan.address,
                             interface=plan.interface, set_env=os.environ.update)
    except ConfigError as exc:
        if called:
            raise
        # the user's own setting (a metrics port in use): said as the CLI says it, exit 2
        sys.stderr.write(format_error(exc.message, exc.hint) + "\n")
        sys.stderr.flush()
        raise SystemExit(int(exc.exit_code)) from None
    except Exception as exc:
        if called:  # the user's own call raised: theirs, untouched
            raise
        _warn(f"{type(exc).__name__}: {exc}")  # ours: the call runs as if unwatched
        return original(*args, **kwargs)
    return result[0] if result else None


def _plan(original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
          ) -> Attachment | None:
    """This rank's job and watch settings, its address and interface; None (after one
    warning when something failed) when there is no watch to start."""
    import inspect

    from ddpnet.errors import ConfigError
    from ddpnet.watch import settings

    try:
        bound = inspect.signature(original).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return None  # the call itself is wrong: torch says how
    try:
        wc = settings.watch_config(os.environ)
        if not wc.enabled:
            return None
        from ddpnet.env.resolve import resolve

        cfg = resolve(os.environ, **call_overrides(bound.arguments))
        if cfg.world_size < 2:
            return None
        address, interface = _where(cfg)
    except ConfigError as exc:
        _warn(f"{exc.message} (hint: {exc.hint})")
        return None
    except Exception as exc:  # the watch must never be why init_process_group fails
        _warn(f"{type(exc).__name__}: {exc}")
        return None
    return Attachment(cfg, wc, address, interface)


def _where(cfg: DistConfig) -> tuple[str, str | None]:
    """The address and interface this rank's peers probe it on (the selection
    ``ddpnet.init()`` makes; only read here, nothing is exported)."""
    from ddpnet.net.select import select_for_host

    selection = select_for_host(cfg, os.environ)
    return selection.address or "", selection.interface


def _warn(why: str) -> None:
    sys.stderr.write(f"ddpnet: warning: the watch is off: {why}\n")
    sys.stderr.flush()


# -- installing ----------------------------------------------------------------------------

def patch(modules: Mapping[str, ModuleType] | None = None) -> bool:
    """Wrap ``init_process_group`` wherever a loaded ``torch.distributed`` module holds it
    (``torch.distributed``, ``distributed_c10d``, ``device_mesh``); False when torch has no
    distributed support."""
    mods = sys.modules if modules is None else modules
    c10d = mods.get("torch.distributed.distributed_c10d")
    original = getattr(c10d, "init_process_group", None)
    if original is None:
        return False
    from ddpnet.watch import patches

    if patches.is_patched(original):
        original = original.__wrapped__
    wrapped = wrap(original)
    for name, module in list(mods.items()):
        if (name == "torch.distributed" or name.startswith("torch.distributed.")) and \
                getattr(module, "init_process_group", None) is original:
            module.init_process_group = wrapped  # type: ignore[attr-defined]
    return True


class _PatchingLoader(Loader):
    """``torch.distributed``'s own loader, then :func:`patch` once the module ran."""

    def __init__(self, inner: Loader) -> None:
        self.inner = inner

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        try:
            self.inner.exec_module(module)
        finally:  # leave no trace of ourselves on the module
            module.__loader__ = self.inner
            if module.__spec__ is not None:
                module.__spec__.loader = self.inner
        try:
            patch()
        except Exception as exc:
            _warn(f"could not wrap init_process_group: {exc}")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _Finder(MetaPathFinder):
    """Finds nothing itself: hands ``torch.distributed``'s spec from the other finders over
    with :class:`_PatchingLoader`, then steps aside."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname != "torch.distributed":
            return None
        for finder in [f for f in sys.meta_path if f is not self]:
            find = getattr(finder, "find_spec", None)
            spec: ModuleSpec | None = find(fullname, path, target) if find else None
            if spec is not None:
                _remove_finder()
                if spec.loader is not None:
                    spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None


def _remove_finder() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Finder)]


def install() -> None:
    """Wrap ``init_process_group`` now if ``torch.distributed`` is loaded, else when it is
    first imported (torch is not imported here); say what a framework's own process model
    hides from the watch when the script imports it (``watch.frameworks``)."""
    from ddpnet.watch import dying, frameworks

    dying.register_settle()  # before the script's own handlers: it runs after them at exit
    frameworks.install()
    if "torch.distributed.distributed_c10d" in sys.modules:
        patch()
        return
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())

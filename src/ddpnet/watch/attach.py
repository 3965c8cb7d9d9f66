"""Attaching the watch to a script that calls ``init_process_group`` itself: :func:`install` wraps
it so the watch starts around the script's own group (``session.around_group``). A ``sys.meta_path``
finder patches ``torch.distributed`` on first import; ``ddpnet launch`` and ``exec`` turn it on
(:func:`ranks_env`). :data:`NOTES` warns of frameworks that start the ranks themselves
(docs/watch.md, "Attach to an unchanged script")."""

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
    """``PYTHONPATH`` with the boot directory first, once, the user's entries after it."""
    entries = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != boot]
    return os.pathsep.join([boot, *entries])


def ranks_env(environ: Mapping[str, str], watch: bool, metrics_port: int | None = None,
              boot: str = BOOT_DIR) -> dict[str, str]:
    """What a launcher adds to its ranks' environment: the hook (and the metrics port), or
    ``DDPNET_WATCH=0``."""
    if not watch:
        return {"DDPNET_WATCH": "0"}
    metrics = {"DDPNET_METRICS_PORT": str(metrics_port)} if metrics_port else {}
    return {ATTACH_VAR: "1", "PYTHONPATH": python_path(environ, boot), **metrics}


def call_overrides(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The ``ddpnet.resolve`` overrides of an ``init_process_group`` call: rank, world size,
    method."""
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
    """``init_process_group`` with the watch around it; ``original`` if already wrapped."""
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
    """This rank's job and watch settings, address and interface; None when no watch starts."""
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
    """The address and interface this rank's peers probe it on (``ddpnet.init()``'s)."""
    from ddpnet.net.select import select_for_host

    selection = select_for_host(cfg, os.environ)
    return selection.address or "", selection.interface


def _warn(why: str) -> None:
    sys.stderr.write(f"ddpnet: warning: the watch is off: {why}\n")
    sys.stderr.flush()


# -- installing ----------------------------------------------------------------------------

def patch(modules: Mapping[str, ModuleType] | None = None) -> bool:
    """Wrap ``init_process_group`` wherever a loaded ``torch.distributed`` holds it; False without
    it."""
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
    """Hands ``torch.distributed``'s spec from the other finders over with
    :class:`_PatchingLoader`, then steps aside."""

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
    """Wrap ``init_process_group`` now or on first import; say frameworks' notes on their import."""
    from ddpnet.watch import dying

    dying.register_settle()  # before the script's own handlers: it runs after them at exit
    if not any(isinstance(f, _NoteFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _NoteFinder())
    if "torch.distributed.distributed_c10d" in sys.modules:
        patch()
        return
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


# -- what attaching cannot reach -----------------------------------------------------------

@dataclass(frozen=True)
class Note:
    """One framework's process model, as the watch sees it."""

    #: the import that says the framework is used
    module: str
    says: str
    #: whether the note is for this process (``sys.argv``): not the framework's workers
    applies: Callable[[Sequence[str]], bool]


def _not_a_ray_worker(argv: Sequence[str]) -> bool:
    """Ray starts its workers (the ranks, the controller) as ``default_worker.py``."""
    return not argv or os.path.basename(argv[0]) != "default_worker.py"


NOTES: tuple[Note, ...] = (
    Note("ray.train",
         "Ray Train starts its workers from each node's raylet, with the raylet's "
         "environment, not this process's: the watch runs in them only where `ray start` "
         "ran with the variables of `python -m ddpnet.attach --env` (or the job's "
         "runtime_env env_vars carry them)",
         _not_a_ray_worker),
)
#: the imports a note is for (the finder's one look at every other import)
_NOTED = frozenset(note.module for note in NOTES)


def due(fullname: str, argv: Sequence[str], said: frozenset[str] = frozenset()
        ) -> Note | None:
    """The note an import of ``fullname`` calls for in a process run as ``argv`` (pure)."""
    for note in NOTES:
        if fullname == note.module and note.module not in said and note.applies(argv):
            return note
    return None


class _NoteFinder(MetaPathFinder):
    """Finds nothing: says a framework's note the first time it is imported."""

    def __init__(self) -> None:
        self.said: set[str] = set()

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname not in _NOTED:  # every import of the process passes here
            return None
        note = due(fullname, sys.argv, frozenset(self.said))
        if note is not None:
            self.said.add(note.module)
            sys.stderr.write(f"ddpnet: watch: note: {note.says}\n")
            sys.stderr.flush()
        return None

"""Every callable the watch wraps, in one place (:data:`TARGETS`), each with its undo. Wrappers are
``wrapt.FunctionWrapper``s that pass the caller's arguments through untouched, and what the watch
does around a call is guarded (:class:`Warns`); docs/watch.md, "What the watch patches in torch"."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import wrapt

Undo = Callable[[], None]
#: what runs before the call: ``(instance, args, kwargs)``; its return goes to ``after``
Before = Callable[[Any, tuple[Any, ...], dict[str, Any]], Any]
#: what runs after it returned: ``(instance, args, kwargs, result, before's return)``
After = Callable[[Any, tuple[Any, ...], dict[str, Any], Any, Any], None]


@dataclass(frozen=True)
class Target:
    """One torch callable the watch wraps."""

    module: str
    #: the attribute path inside ``module``: ``"name"`` or ``"Class.name"``
    path: str
    #: what the watch learns from it
    why: str
    #: what the watch goes without where this torch has no such callable
    if_absent: str

    @property
    def name(self) -> str:
        return f"{self.module}.{self.path}"


FSDP_MODULE = "torch.distributed.fsdp.fully_sharded_data_parallel"
FSDP2_STATE = "torch.distributed.fsdp._fully_shard._fsdp_state"
#: the default group's Python collectives the recorder announces (``watch.recorder``)
COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor",
               "reduce_scatter_tensor", "reduce", "barrier", "all_to_all_single")

TARGETS: tuple[Target, ...] = (
    Target("torch.distributed.distributed_c10d", "init_process_group",
           "attach: the watch starts around the script's own group (also where "
           "torch.distributed and device_mesh hold the same function)",
           "no watch for a script that does not call ddpnet.init()"),
    *(Target("torch.distributed", name,
             "recorder: announces each default-group collective before it runs",
             "that collective is seen only in the Flight Recorder's ring")
      for name in COLLECTIVES),
    Target("torch.nn.parallel", "DistributedDataParallel.__init__",
           "infer: forward hooks on each DDP module as it is built (forward/backward phases)",
           "no forward/backward phases; steps from the optimizer"),
    Target(FSDP_MODULE, "FullyShardedDataParallel.__init__",
           "infer: forward hooks on each FSDP module (only where the script imported FSDP)",
           "no forward/backward phases under FSDP"),
    Target(FSDP2_STATE, "FSDPState._pre_forward",
           "infer: the forward phase of a fully_shard-ed module (private to FSDP2)",
           "FSDP2 gets steps from its optimizer and no forward/backward phases"),
    Target(FSDP2_STATE, "FSDPState._post_forward",
           "infer: the end of a fully_shard-ed module's forward (private to FSDP2)",
           "as _pre_forward"),
    Target("torch.utils.data.dataloader", "_BaseDataLoaderIter.__next__",
           "infer: the data phase while the next batch is awaited; steps led by fetches",
           "no data phase; steps begin at the forward"),
    Target("sys", "exit",
           "dying: a rank's sys.exit(code) is a rank that gave up, not one that finished",
           "(always present)"),
)


def resolve(target: Target, modules: Mapping[str, ModuleType] | None = None
            ) -> tuple[Any, str] | None:
    """The object holding ``target`` and the attribute's name; None where it is absent."""
    owner: Any = (sys.modules if modules is None else modules).get(target.module)
    *parents, attribute = target.path.split(".")
    for parent in parents:
        owner = getattr(owner, parent, None)
    if owner is None or not callable(getattr(owner, attribute, None)):
        return None
    return owner, attribute


class Warns:
    """A wrapper's guard: its hooks run while ``on``, which the first failure turns off,
    said once (``unwatched``: adding that the job runs on as if unwatched there)."""

    def __init__(self, lost: str, hint: str, unwatched: bool = True) -> None:
        self.on = True
        self.lost, self.hint = lost, hint
        self.then = "the job runs on as if unwatched there; " if unwatched else ""

    def fail(self, exc: BaseException) -> None:
        from ddpnet.errors import short_error

        if not self.on:
            return
        self.on = False
        sys.stderr.write(f"ddpnet: warning: watch: {self.lost} "
                         f"({short_error(type(exc).__name__, str(exc))}); {self.then}"
                         f"hint: {self.hint}\n")


class Patched(wrapt.FunctionWrapper[Any, Any]):
    """A wrapper of the watch's (told from another library's by its type)."""


def _guarded(guard: Warns, before: Before | None, after: After | None, live: list[bool]
             ) -> Callable[[Any, Any, tuple[Any, ...], dict[str, Any]], Any]:
    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> Any:
        if not live[0]:  # undone, but wrapped since by another library: a plain call
            return wrapped(*args, **kwargs)
        token = None
        if before is not None and guard.on:
            try:
                token = before(instance, args, kwargs)
            except Exception as exc:
                guard.fail(exc)
        result = wrapped(*args, **kwargs)
        if after is not None and guard.on:
            try:
                after(instance, args, kwargs, result, token)
            except Exception as exc:
                guard.fail(exc)
        return result

    return wrapper


def wrap(owner: Any, attribute: str, guard: Warns, *, before: Before | None = None,
         after: After | None = None) -> Undo:
    """Run ``before``/``after`` around every call of ``owner.attribute``; returns the undo."""
    live = [True]
    put_back = install(owner, attribute, Patched(_raw(owner, attribute),
                                                 _guarded(guard, before, after, live)))

    def undo() -> None:
        live[0] = False
        put_back()

    return undo


def around(original: Callable[..., Any],
           call: Callable[[Callable[..., Any], tuple[Any, ...], dict[str, Any]], Any]) -> Any:
    """A wrapper of ``original`` that hands each call to ``call(original, args, kwargs)``,
    which calls the original itself; not installed anywhere (:func:`install`)."""
    def wrapper(wrapped: Any, _instance: Any, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> Any:
        return call(wrapped, args, kwargs)

    return Patched(original, wrapper)


def install(owner: Any, attribute: str, patched: Any) -> Undo:
    """Put ``patched`` in place of ``owner.attribute``; the undo puts back what was there (or leaves
    another library's wrapper of ours: ours then passes through)."""
    had = not isinstance(owner, type) or attribute in vars(owner)
    previous = _raw(owner, attribute)
    setattr(owner, attribute, patched)

    def undo() -> None:
        if _raw(owner, attribute) is not patched:
            return
        if had:
            setattr(owner, attribute, previous)
        else:  # inherited: the base class's own comes back into view
            delattr(owner, attribute)

    return undo


def is_patched(function: Any) -> bool:
    return isinstance(function, Patched)


def _raw(owner: Any, attribute: str) -> Any:
    """The attribute as stored (a class's own function, not the bound view of it)."""
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if attribute in vars(klass):
                return vars(klass)[attribute]
    return getattr(owner, attribute)

"""Steps and phases for a script that marks none, inferred from torch's own hooks (docs/watch.md,
"Steps and phases without marks"). Only the training thread counts; marks win; a failing hook turns
inference off, said once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ddpnet.watch import patches
from ddpnet.watch.recorder import Recorder


class Inferrer:
    """The step count and phase a training thread's hooks imply, written to a recorder."""

    def __init__(self, recorder: Recorder) -> None:
        import torch
        from torch.compiler import is_compiling

        self.rec = recorder
        #: bound once: an import in a hook costs more than the hook
        self.compiling: Callable[[], bool] = is_compiling
        self.grad_enabled: Callable[[], bool] = torch.is_grad_enabled
        #: a failure of a hook turns them all off, said once (``watch.patches``)
        self.guard = patches.Warns("steps and phases are no longer inferred",
                                   "mark them with ddpnet.step(n) and ddpnet.phase(name)",
                                   unwatched=False)
        self.step = -1
        #: an optimizer stepped since the step began; which ones (by id)
        self.pending = False
        self.stepped: set[int] = set()
        #: fetches lead the steps: the next fetch, not a forward, begins the next one
        self.data_led = False
        #: wrapped forwards running (FSDP nests them)
        self.depth = 0
        #: the training thread once known; the threads that fetched data before that
        self.thread: int | None = None
        self.fetchers: set[int] = set()
        #: the dataset fetched last, and the one that fed this step's first forward with grad:
        #: only a fetch of the training data begins a step, not an evaluation's
        self.fetched: int | None = None
        self.fed: int | None = None
        self.handles: list[Any] = []

    # -- the events -----------------------------------------------------------------------

    def fetching(self, dataset: int, grad: bool) -> None:
        ident = threading.get_ident()
        if self.thread is None:
            self.fetchers.add(ident)
        elif ident != self.thread:
            return
        if grad:
            # pending implies the training thread is known (and is this one)
            if self.pending and dataset == self.fed:
                self.begin(data_led=True)
            self.fetched = dataset
        self.depth = 0
        self.rec.set_phase("data", inferred=True)

    def forward_pre(self, grad: bool) -> None:
        if not self.training_thread():
            return
        # a forward without grad (an evaluation, maybe on one rank only) begins no step
        if self.depth == 0:
            if grad:
                if self.step < 0 or (self.pending and not self.data_led):
                    self.begin(data_led=self.data_led and self.step < 0)
                if self.fed is None:
                    self.fed = self.fetched
                self.fetched = None
            self.rec.set_phase("forward", inferred=True)
        self.depth += 1

    def forward_post(self, grad: bool) -> None:
        if not self.training_thread():
            return
        self.depth = max(0, self.depth - 1)
        if self.depth == 0 and grad:
            self.rec.set_phase("backward", inferred=True)

    def optimizer_pre(self, optimizer: object) -> None:
        if self.rec.marked_steps and self.rec.marked_phases:
            self.guard.on = False  # the user marks both (``ddpnet train`` does): nothing to infer
            return
        if not self.training_thread():
            return
        if self.step < 0 or id(optimizer) in self.stepped:
            self.begin(data_led=self.data_led and self.step < 0)
        self.rec.set_phase("step", inferred=True)

    def optimizer_post(self, optimizer: object) -> None:
        if not self.training_thread():
            return
        self.stepped.add(id(optimizer))
        self.pending = True

    def training_thread(self) -> bool:
        """Whether this is the training thread (first to run a forward or optimizer step)."""
        ident = threading.get_ident()
        if self.thread is None:
            self.thread, self.data_led = ident, ident in self.fetchers
            self.fetchers.clear()
        return ident == self.thread

    def begin(self, data_led: bool) -> None:
        self.step += 1
        self.pending, self.data_led, self.fed = False, data_led, None
        self.stepped.clear()
        self.rec.set_step(self.step, inferred=True)

    # -- torch's hooks (never raise) ------------------------------------------------------

    @property
    def on(self) -> bool:
        """Whether the hooks work (off after a failure, or once the user marks steps and phases)."""
        return self.guard.on

    def guarded(self, work: Callable[..., None], *args: Any) -> None:
        """Run a hook's ``work`` while the hooks are on; a failure turns them off."""
        if self.on:
            try:
                work(*args)
            except Exception as exc:
                self.guard.fail(exc)

    def on_optimizer_pre(self, optimizer: object, _args: object, _kwargs: object) -> None:
        self.guarded(self.optimizer_pre, optimizer)

    def on_optimizer_post(self, optimizer: object, _args: object, _kwargs: object) -> None:
        self.guarded(self.optimizer_post, optimizer)

    def on_forward_pre(self, _module: object, _args: object) -> None:
        if self.on and not self.compiling():  # traced by torch.compile: nothing to trace
            self.guarded(lambda: self.forward_pre(self.grad_enabled()))

    def on_forward(self, _module: object, _args: object, _out: object) -> None:
        if self.on and not self.compiling():
            self.guarded(lambda: self.forward_post(self.grad_enabled()))

    def on_fetch(self, iterator: object) -> None:
        self.guarded(lambda: self.fetching(id(getattr(iterator, "_dataset", iterator)),
                                           self.grad_enabled()))

    def watch(self, module: Any) -> None:
        """A DDP/FSDP module just built: its forwards are phases."""
        self.guarded(self._watch, module)

    def _watch(self, module: Any) -> None:
        self.handles.append(module.register_forward_pre_hook(self.on_forward_pre))
        self.handles.append(module.register_forward_hook(self.on_forward, always_call=True))

    def unwatch(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()


def install(recorder: Recorder) -> Callable[[], None]:
    """Infer ``recorder``'s steps and phases from now on (``watch.patches.TARGETS``); the undo."""
    import torch.optim.optimizer as optim

    inferrer = Inferrer(recorder)
    undos: list[Callable[[], None]] = [
        optim.register_optimizer_step_pre_hook(inferrer.on_optimizer_pre).remove,
        optim.register_optimizer_step_post_hook(inferrer.on_optimizer_post).remove]
    for target, hooks in _hooks(inferrer).items():
        where = patches.resolve(target)
        if where is not None:
            undos.append(patches.wrap(*where, inferrer.guard, **hooks))

    def undo() -> None:
        inferrer.guard.on = False
        for step in reversed(undos):
            step()
        inferrer.unwatch()

    return undo


def _hooks(inferrer: Inferrer) -> dict[patches.Target, dict[str, Any]]:
    """What runs around each of ``watch.patches``' inference targets: DDP/FSDP constructors, FSDP2's
    forward hooks (ours first) and the DataLoader iterator's ``__next__``."""
    def built(module: Any, _args: object, _kwargs: object, _result: object,
              _token: object) -> None:
        inferrer.watch(module)

    def pre(_state: object, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        inferrer.on_forward_pre(args[0] if args else kwargs.get("module"), None)

    def post(_state: object, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any,
             _token: object) -> None:
        inferrer.on_forward(args[0] if args else kwargs.get("module"), None, output)

    def fetch(iterator: object, _args: object, _kwargs: object) -> None:
        inferrer.on_fetch(iterator)

    by_path: dict[str, dict[str, Any]] = {
        "DistributedDataParallel.__init__": {"after": built},
        "FullyShardedDataParallel.__init__": {"after": built},
        "FSDPState._pre_forward": {"before": pre},
        "FSDPState._post_forward": {"after": post},
        "_BaseDataLoaderIter.__next__": {"before": fetch}}
    return {t: by_path[t.path] for t in patches.TARGETS if t.path in by_path}

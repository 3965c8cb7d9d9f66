"""Every process-level hook the watch installs in a rank, in one place: what it touches, who
installs it, and what is lost when Python or torch changes under it (docs/watch.md, "Every hook, in
one place"). ``tests/watch/test_hooks.py`` fails when a hook is installed anywhere not listed."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Hook:
    """One hook: its ``name``, installing module, ``kind`` (what the source scan matches), what it
    touches, and what is lost when that changes."""

    name: str
    module: str
    kind: str
    touches: str
    if_changed: str


HOOKS: tuple[Hook, ...] = (
    Hook("start-up file", "ddpnet.watch.boot.sitecustomize", "sitecustomize",
         "Python's site module: the boot directory first on PYTHONPATH runs before the "
         "script, then chains to the sitecustomize it shadows",
         "none: site.py's sitecustomize import has been stable since Python 2"),
    Hook("torch.distributed import finder", "ddpnet.watch.attach", "sys.meta_path",
         "the import system: wraps init_process_group once torch.distributed is imported, "
         "then removes itself",
         "a torch whose init_process_group moved: no watch unless the script calls "
         "ddpnet.init()"),
    Hook("framework import finder", "ddpnet.watch.attach", "sys.meta_path",
         "the import system: a one-line note when the script imports ray.train",
         "the note is not printed"),
    Hook("wrapped torch callables", "ddpnet.watch.patches", "wrapt.FunctionWrapper",
         "the callables in patches.TARGETS (init_process_group, 8 collectives, DDP/FSDP "
         "construction, FSDP2 forward, the DataLoader iterator, sys.exit)",
         "per target, its if_absent: the watch skips that patch"),
    Hook("optimizer step hooks", "ddpnet.watch.infer", "register_optimizer_step",
         "torch.optim's global pre/post step hooks: one step per optimizer.step()",
         "steps from collectives only"),
    Hook("excepthook", "ddpnet.watch.dying", "sys.excepthook",
         "an uncaught exception on the main thread waits briefly for the verdict naming a "
         "peer's failure, then the previous hook prints it",
         "none (Python API)"),
    Hook("SIGTERM guard", "ddpnet.watch.dying", "signal.signal",
         "SIGTERM's handler, a wakeup fd and a thread: a launcher's SIGTERM after a peer "
         "died waits for the verdict; a user's stop ends the rank at once; a handler "
         "installed over it (Lightning's) is chained to",
         "none (Python API); a framework that replaces the handler owns SIGTERM"),
    Hook("goodbye at exit", "ddpnet.watch.session", "atexit.register",
         "the rank says goodbye (with a failing sys.exit's code) and undoes its patches",
         "none (Python API)"),
    Hook("exit settle", "ddpnet.watch.dying", "atexit.register",
         "registered first, so it runs last: 20 ms with the GIL released so gloo's worker "
         "threads free the last collective's tensors before finalization (torch 2.13)",
         "a torch that frees them without the GIL needs no settle; it costs 20 ms at exit"),
    Hook("fork handler of the session", "ddpnet.watch.session", "os.register_at_fork",
         "a forked child (DataLoader worker, raw os.fork) forgets the session: it never "
         "speaks for its parent",
         "none (Python API)"),
    Hook("fork handler of the guard", "ddpnet.watch.dying", "os.register_at_fork",
         "a forked child drops the SIGTERM guard's thread and wakeup fd, which it did not "
         "inherit whole",
         "none (Python API)"),
)

"""What the watch cannot follow in a framework's own process model, said in one line when a
watched script imports that framework, not discovered by a user after a silent hang.

The watch reaches a rank through its environment (``watch.attach``: the boot directory on
``PYTHONPATH`` and ``DDPNET_WATCH_ATTACH=1``). A framework whose own launcher starts the ranks
with another environment leaves them unwatched, whatever the script's own process was given.
:data:`NOTES` lists each such framework, the import that tells it is used, and where the note
does not apply (in the framework's own worker processes, which are the ranks)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType


@dataclass(frozen=True)
class Note:
    """One framework's process model, as the watch sees it."""

    #: the import that says the framework is used
    module: str
    says: str
    #: whether the note is for this process (by its ``sys.argv``)
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


def due(fullname: str, argv: Sequence[str], said: frozenset[str] = frozenset()
        ) -> Note | None:
    """The note an import of ``fullname`` calls for in a process run as ``argv`` (pure)."""
    for note in NOTES:
        if fullname == note.module and note.module not in said and note.applies(argv):
            return note
    return None


#: the imports a note is for (the finder's one look at every other import)
_MODULES = frozenset(note.module for note in NOTES)


class _NoteFinder(MetaPathFinder):
    """Finds nothing: says a framework's note the first time it is imported."""

    def __init__(self) -> None:
        self.said: set[str] = set()

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname not in _MODULES:  # every import of the process passes here
            return None
        note = due(fullname, sys.argv, frozenset(self.said))
        if note is not None:
            self.said.add(note.module)
            sys.stderr.write(f"ddpnet: watch: note: {note.says}\n")
            sys.stderr.flush()
        return None


def install() -> None:
    """Say each framework's note when it is first imported (once; imports nothing now)."""
    if not any(isinstance(f, _NoteFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _NoteFinder())

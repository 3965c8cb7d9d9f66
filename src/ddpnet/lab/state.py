"""A lab's state on disk, so any later process (the CLI is stateless) finds it by name:
``/run/ddpnet/lab/<name>.json`` (shape, faults, extra addresses), removed by ``down``.

/run is a tmpfs, so state and namespaces disappear together on reboot. Changes happen under
an exclusive ``flock`` on ``<name>.lock`` so a CLI ``fault`` and a Python ``Lab`` do not race.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddpnet.lab.topology import LabSpec

STATE_DIR = Path(os.environ.get("DDPNET_LAB_STATE_DIR", "/run/ddpnet/lab"))
VERSION = 1


@dataclass
class LabState:
    """What ``up`` built and what has been changed since (mutable, saved after each change)."""

    spec: LabSpec
    complete: bool = False
    created: float = field(default_factory=time.time)
    #: node index -> active faults, each ``{"kind": ..., **options}``
    faults: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    #: node index -> extra CIDRs added on the lab interface
    addresses: dict[int, list[str]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "name": self.spec.name,
            "spec": self.spec.to_dict(),
            "complete": self.complete,
            "created": self.created,
            "faults": {str(k): v for k, v in sorted(self.faults.items()) if v},
            "addresses": {str(k): v for k, v in sorted(self.addresses.items()) if v},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LabState:
        return cls(
            spec=LabSpec.from_dict(data["spec"]),
            complete=bool(data.get("complete")),
            created=float(data.get("created", 0.0)),
            faults={int(k): list(v) for k, v in data.get("faults", {}).items()},
            addresses={int(k): list(v) for k, v in data.get("addresses", {}).items()},
        )


def state_path(name: str, root: Path | None = None) -> Path:
    return (root or STATE_DIR) / f"{name}.json"


def load(name: str, root: Path | None = None) -> LabState | None:
    """The saved state, or None when there is none (or it is unreadable: ``down`` still works
    from the name alone)."""
    try:
        data = json.loads(state_path(name, root).read_text(encoding="utf-8"))
        return LabState.from_dict(data)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save(state: LabState, root: Path | None = None) -> None:
    path = state_path(state.spec.name, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(state.to_dict(), indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)


def remove(name: str, root: Path | None = None) -> None:
    for path in (state_path(name, root), state_path(name, root).with_suffix(".lock")):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def names(root: Path | None = None) -> list[str]:
    """Labs with a state file, sorted."""
    try:
        return sorted(p.stem for p in (root or STATE_DIR).glob("*.json"))
    except OSError:
        return []


@contextlib.contextmanager
def locked(name: str, root: Path | None = None, timeout: float = 60.0) -> Iterator[None]:
    """Hold the lab's lock (bounded wait: a stuck holder gives a clear error, not a hang)."""
    from ddpnet.lab.system import LabError

    lock = state_path(name, root).with_suffix(".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LabError(f"lab {name} is busy: another ddpnet holds {lock}",
                                   "wait for it to finish, or stop it") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)

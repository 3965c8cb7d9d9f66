"""The pieces every check family shares: a result, a check, and the host it reads through.

A check is a small object with an ``id`` and a ``family`` whose :meth:`Check.run` reads the
node only through a :class:`Host` (root paths for ``/proc``, ``/sys``, ``/etc``, a command
runner, a resolver, the environment), so tests feed fixture trees and canned command output.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Literal, Protocol, TypeVar

# the real runner (edge), shared with net, tune and monitor; re-exported for the checks
from ddpnet.subproc import CommandOutput, run_command

Status = Literal["pass", "warn", "fail", "skip"]
#: worst first: the verdict is the worst status among the checks (skip counts as pass)
SEVERITY: Mapping[str, int] = MappingProxyType({"fail": 3, "warn": 2, "pass": 1, "skip": 0})

FAMILIES = (
    "rendezvous", "names", "interfaces", "firewall", "selinux", "sysctl", "software", "rdma",
    "environment",
)


@dataclass(frozen=True)
class CheckResult:
    """What one check found. ``fix`` is the exact command or edit that resolves a warn/fail;
    ``facts`` are raw values merged into the report's ``facts`` (compared across nodes by
    ``ddpnet check``), not part of the per-check JSON."""

    id: str
    family: str
    status: Status
    summary: str
    detail: str = ""
    fix: str = ""
    facts: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "family": self.family,
            "status": self.status,
            "summary": self.summary,
            "detail": self.detail,
            "fix": self.fix,
        }


#: runs argv with a timeout in seconds; None when the program is absent or timed out
Runner = Callable[[Sequence[str], float], "CommandOutput | None"]


class AddressLike(Protocol):
    @property
    def ip(self) -> str: ...
    @property
    def prefix(self) -> int: ...
    @property
    def family(self) -> int: ...


class InterfaceLike(Protocol):
    """``ddpnet.net.interfaces.Interface`` (owned by net), as doctor reads it."""

    @property
    def name(self) -> str: ...
    @property
    def up(self) -> bool: ...
    @property
    def addresses(self) -> Sequence[AddressLike]: ...
    @property
    def mtu(self) -> int: ...
    @property
    def speed_mbps(self) -> int | None: ...
    @property
    def kind(self) -> str: ...


@dataclass(frozen=True)
class SelectedInterface:
    """The training interface chosen by ``ddpnet.net.select`` (name, source address toward
    the master, and why), or the reason nothing could be chosen."""

    name: str | None
    address: str | None = None
    reason: str = ""


T = TypeVar("T")


class Memo:
    """Thread-safe compute-once values shared by checks running concurrently (one torch
    probe, one ``nft`` dump per doctor run)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._values: dict[str, Any] = {}

    def get(self, key: str, compute: Callable[[], T]) -> T:
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._values:
                self._values[key] = compute()
            value: T = self._values[key]
            return value


@dataclass(frozen=True)
class Host:
    """Everything a check may read about this node. Defaults read the real host; tests pass
    fixture roots, a canned runner and resolver."""

    proc: Path = Path("/proc")
    sys: Path = Path("/sys")
    etc: Path = Path("/etc")
    dev: Path = Path("/dev")
    var: Path = Path("/var")
    environ: Mapping[str, str] = field(default_factory=dict)
    hostname: str = "localhost"
    run: Runner = run_command
    #: name -> addresses (strings); raises OSError when the name does not resolve
    resolve: Callable[[str], Sequence[str]] = lambda name: ()
    #: time forward (names) and reverse (addresses) lookups through this node's resolver
    #: (``net.resolver.time_lookups``); tests pass canned ones, the default makes none
    lookups: Callable[[Sequence[str], Sequence[str]], Sequence[Any]] = lambda f, r: ()
    #: is there a program of that name on PATH
    which: Callable[[str], str | None] = lambda name: None
    #: where per-install facts are cached (the torch probe); None = never cache
    cache: Path | None = None
    #: loader/NVML facts (libnccl version, driver, GPUs); tests inject canned ones
    native: Callable[[], Mapping[str, Any]] = lambda: {}
    #: torch's facts from a process that imports torch anyway (``ddpnet check``); None = a
    #: child interpreter imports it (the doctor itself never does)
    torch_probe: Callable[[], Mapping[str, Any]] | None = None
    memo: Memo = field(default_factory=Memo, compare=False)

    def read(self, path: Path) -> str | None:
        """A file's text, or None when it is absent or unreadable."""
        try:
            return path.read_text(errors="replace")
        except OSError:
            return None

    def sysctl(self, name: str) -> str | None:
        """``net.core.rmem_max`` -> its value from ``<proc>/sys/net/core/rmem_max``."""
        text = self.read(self.proc / "sys" / name.replace(".", "/"))
        return None if text is None else " ".join(text.split())


@dataclass(frozen=True)
class Inputs:
    """What the run is about, resolved at the edge: the distributed config (or the error
    resolving it), the cluster subnet, the interfaces and the selected one."""

    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    world_size: int = 1
    num_nodes: int = 1
    node_rank: int = 0
    launcher: str = "local"
    config_error: tuple[str, str] | None = None  # (message, hint)
    config_summary: str = ""
    cluster_subnet: str | None = None
    interfaces: Sequence[InterfaceLike] = ()
    selected: SelectedInterface = SelectedInterface(None)
    #: torchrun's c10d rendezvous (port 29400) is in use
    c10d: bool = False
    #: the node's cluster NIC when ``selected`` is none or loopback (outside a job, MASTER_ADDR
    #: 127.0.0.1): the selector's answer with loopback refused (the user's *_SOCKET_IFNAME,
    #: --cluster-subnet, the default route, the first usable); its subnet is the firewall's
    cluster: SelectedInterface = SelectedInterface(None)


class Check(ABC):
    """One item of the doctor. Subclasses set ``id``/``family``/``title`` and implement
    :meth:`run`; helpers build results so ids and families never drift."""

    id: ClassVar[str]
    family: ClassVar[str]
    title: ClassVar[str]

    @abstractmethod
    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        """Inspect the node; never raise for anything the node can be wrong about."""

    def result(self, status: Status, summary: str, detail: str = "", fix: str = "",
               facts: Mapping[str, Any] | None = None) -> CheckResult:
        return CheckResult(self.id, self.family, status, summary, detail, fix,
                           MappingProxyType(dict(facts or {})))

    def ok(self, summary: str, detail: str = "", /, **facts: Any) -> CheckResult:
        return self.result("pass", summary, detail, facts=facts)

    def warn(self, summary: str, detail: str = "", fix: str = "", /, **facts: Any) -> CheckResult:
        return self.result("warn", summary, detail, fix, facts)

    def fail(self, summary: str, detail: str = "", fix: str = "", /, **facts: Any) -> CheckResult:
        return self.result("fail", summary, detail, fix, facts)

    def skip(self, summary: str, detail: str = "", /, **facts: Any) -> CheckResult:
        return self.result("skip", summary, detail, facts=facts)


def worst(statuses: Sequence[str]) -> str:
    """The verdict of several statuses: fail > warn > pass (skip alone is pass)."""
    top = max((SEVERITY[s] for s in statuses), default=1)
    return {3: "fail", 2: "warn"}.get(top, "pass")

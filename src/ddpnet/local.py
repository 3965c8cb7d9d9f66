"""The one ``--local N`` spawner: N ranks of one command on this machine, over loopback.

Used by ``check``, ``bench``, ``train`` and ``launch`` (whose child is torchrun). Each rank
runs in a session of its own, so a terminal's Ctrl-C reaches only this process, which
forwards SIGINT/SIGTERM/SIGHUP to every rank's whole process group; output of ranks other
than 0 is prefixed ``[rank K]`` on stderr (or captured, for a parent that parses it); exit
codes are gathered and the first failure stops the rest after a grace period.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

from ddpnet.errors import ConfigError
from ddpnet.net.ports import free_port
from ddpnet.net.select import SET_BY
from ddpnet.output import relay_line

#: more ranks than this on one machine is a typo, not a job (each rank is a Python process
#: importing torch: ~300 MB); the bound stops ``--local 100000`` before anything starts
MAX_LOCAL_RANKS = 64

#: signals a user or a scheduler sends that every rank must see (SLURM sends SIGUSR1/SIGTERM
#: before a time limit; torchrun turns SIGTERM into a clean worker shutdown)
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)

#: launcher variables that must not reach a local rank (they would win launcher detection)
_LAUNCHER_PREFIXES = ("SLURM_", "OMPI_", "PMI_", "PMIX_", "MPI_", "MV2_", "LSB_", "JSM_",
                      "TORCHELASTIC_")
_TORCH_VARS = frozenset({"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                         "MASTER_PORT", "GROUP_RANK", "NODE_RANK", "NNODES",
                         "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME"})


def check_world(n: int, flag: str = "--local") -> int:
    """``n`` when it is a number of local ranks this machine can start, else a ConfigError."""
    if n < 1:
        raise ConfigError(f"{flag} {n}: need at least 1 rank", f"e.g. {flag} 2")
    if n > MAX_LOCAL_RANKS:
        raise ConfigError(f"{flag} {n}: more than {MAX_LOCAL_RANKS} ranks on one machine",
                          f"use at most {flag} {MAX_LOCAL_RANKS}; spread larger jobs over "
                          "nodes with a launcher (ddpnet launch, srun, mpirun)")
    return n


def local_environ(base: Mapping[str, str], rank: int, world: int, port: int, *,
                  cpus: int | None = None, pin_loopback: bool = True) -> dict[str, str]:
    """``base`` without any launcher's variables, plus a one-node manual launch on loopback
    (pure). ``pin_loopback`` sets GLOO_SOCKET_IFNAME=lo; OMP_NUM_THREADS splits the cores
    (N ranks each using every core would thrash; torchrun makes the same choice)."""
    env = {k: v for k, v in base.items()
           if k not in _TORCH_VARS and not k.startswith(_LAUNCHER_PREFIXES)}
    env.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port), "NODE_RANK": "0", "NNODES": "1"})
    env.pop(SET_BY, None)
    if pin_loopback:
        env.update({"GLOO_SOCKET_IFNAME": "lo", SET_BY: "GLOO_SOCKET_IFNAME=--local"})
    env.setdefault("OMP_NUM_THREADS", str(max(1, (cpus or _cpus()) // world)))
    return env


#: the spawner's pid, for :func:`die_with_parent` in the rank
PARENT_VAR = "DDPNET_PARENT_PID"
_PR_SET_PDEATHSIG = 1


def die_with_parent(environ: Mapping[str, str] | None = None) -> None:
    """In a rank started by :class:`LocalRanks`: get SIGTERM when the spawner dies, even by
    ``kill -9`` (which no handler of its own can forward). Ranks run in their own sessions,
    so nothing else would stop them. Linux only; a no-op elsewhere or outside LocalRanks."""
    parent = (os.environ if environ is None else environ).get(PARENT_VAR, "")
    if not parent.isdigit() or not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != int(parent):  # it died before the line above: nobody will tell us
        os.kill(os.getpid(), signal.SIGTERM)


def _cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def exit_status(code: int) -> int:
    """A Popen return code as a shell reports it: killed by signal N -> 128+N."""
    return 128 - code if code < 0 else code


def signal_group(proc: subprocess.Popen[Any], signum: int) -> None:
    """Send ``signum`` to ``proc``'s whole process group (its session leader is ``proc``)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signum)


@contextlib.contextmanager
def forwarding(targets: Callable[[], Sequence[subprocess.Popen[Any]]],
               send: Callable[[subprocess.Popen[Any], int], None] = signal_group,
               ) -> Iterator[list[int]]:
    """Forward FORWARDED signals to ``targets()`` while inside, instead of dying of them;
    yields the signals received. Off the main thread, nothing is installed."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def forward(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        for proc in targets():
            send(proc, signum)

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        yield received
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)


@dataclass(frozen=True)
class RankExit:
    """How one local rank ended: its shell-style code, whether we stopped it, its output
    (captured whole with ``capture``; else the last lines of what it printed)."""

    rank: int
    code: int
    stopped: bool
    stdout: str = ""
    stderr: str = ""

    def last_line(self) -> str:
        lines = (self.stderr or self.stdout).strip().splitlines()
        return lines[-1] if lines else ""


@dataclass(frozen=True)
class LocalResult:
    """Every rank's exit, the first failure in time, and what ended the run."""

    exits: tuple[RankExit, ...]
    first_failure: RankExit | None
    timed_out: bool
    signals: tuple[int, ...]

    @property
    def code(self) -> int:
        """0, a forwarded signal as 128+N, or the first failing rank's code."""
        if self.signals:
            return 128 + self.signals[-1]
        return self.first_failure.code if self.first_failure is not None else 0


_TAIL = 40


class LocalRanks:
    """Ranks ``first``..``world-1`` of ``argv`` on 127.0.0.1 (rank 0 in this process when
    ``first`` is 1). Use as a context manager: leaving it stops whatever still runs."""

    def __init__(self, argv: Sequence[str] | Callable[[int], Sequence[str]], world: int, *,
                 first: int = 0, port: int | None = None, capture: bool = False,
                 pin_loopback: bool = True, environ: Mapping[str, str] | None = None) -> None:
        self.world = check_world(world)
        self.first = first
        self.port = free_port() if port is None else port
        self.capture = capture
        self._argv = argv
        self._base = dict(os.environ if environ is None else environ)
        self._pin = pin_loopback
        self.procs: list[subprocess.Popen[str]] = []
        self._out: dict[int, list[str]] = {}
        self._err: dict[int, list[str]] = {}
        self._readers: list[threading.Thread] = []
        self._stopped: set[int] = set()
        self._failed_at: dict[int, float] = {}

    def environ(self, rank: int) -> dict[str, str]:
        env = local_environ(self._base, rank, self.world, self.port, pin_loopback=self._pin)
        env[PARENT_VAR] = str(os.getpid())
        return env

    def argv(self, rank: int) -> list[str]:
        return list(self._argv(rank) if callable(self._argv) else self._argv)

    def __enter__(self) -> LocalRanks:
        try:
            self.start()
        except BaseException:  # Ctrl-C / SIGTERM half-way: the ranks started so far go too
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        for rank in range(self.first, self.world):
            quiet = rank != 0 or self.capture
            proc = subprocess.Popen(
                self.argv(rank), env=self.environ(rank), text=True, errors="replace",
                stdin=subprocess.DEVNULL, start_new_session=True,
                stdout=subprocess.PIPE if quiet else None,
                stderr=subprocess.PIPE if quiet else None)
            self.procs.append(proc)
            if quiet:
                self._read(rank, proc)

    def _read(self, rank: int, proc: subprocess.Popen[str]) -> None:
        """Collect (``capture``) or echo ``[rank K] line`` on stderr, keeping the tail."""
        for stream, store in ((proc.stdout, self._out), (proc.stderr, self._err)):
            lines: list[str] = []
            store[rank] = lines

            def pump(stream: object = stream, lines: list[str] = lines) -> None:
                for line in stream:  # type: ignore[attr-defined]
                    lines.append(line)
                    if not self.capture:
                        del lines[:-_TAIL]
                        relay_line(line.rstrip("\n"), prefix=f"rank {rank}", stderr=True)

            reader = threading.Thread(target=pump, daemon=True)
            reader.start()
            self._readers.append(reader)

    def rank_of(self, proc: subprocess.Popen[str]) -> int:
        return self.first + self.procs.index(proc)

    def wait(self, timeout: float | None = None, grace: float = 5.0) -> LocalResult:
        """Until every rank exits, ``timeout`` passes, or ``grace`` seconds after the first
        failure (the others are usually blocked on the failed rank); then stop the rest."""
        deadline = None if timeout is None else time.monotonic() + timeout
        timed_out = False
        with forwarding(lambda: self.procs) as received:
            while None in [p.poll() for p in self.procs]:  # poll every rank, each round
                now = time.monotonic()
                for p in self.procs:
                    if p.returncode not in (None, 0):
                        self._failed_at.setdefault(self.rank_of(p), now)
                first_fail = min(self._failed_at.values(), default=None)
                if deadline is not None and now > deadline:
                    timed_out = not received and first_fail is None
                    break
                if first_fail is not None and now - first_fail >= grace:
                    break
                time.sleep(0.05)
            self.stop()
        return self._result(timed_out, tuple(received))

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM each running rank's process group, SIGKILL what is left after ``grace``."""
        running = [p for p in self.procs if p.poll() is None]
        for p in running:
            self._stopped.add(self.rank_of(p))
            signal_group(p, signal.SIGTERM)
        end = time.monotonic() + grace
        for p in running:
            try:
                p.wait(max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                signal_group(p, signal.SIGKILL)
                p.wait()
        for reader in self._readers:
            reader.join(5)

    def _result(self, timed_out: bool, signals: tuple[int, ...]) -> LocalResult:
        now = time.monotonic()
        exits = []
        for p in self.procs:
            rank = self.rank_of(p)
            code = exit_status(p.returncode if p.returncode is not None else 0)
            if code and rank not in self._stopped:
                self._failed_at.setdefault(rank, now)
            exits.append(RankExit(rank, code, rank in self._stopped,
                                  "".join(self._out.get(rank, [])),
                                  "".join(self._err.get(rank, []))))
        failed = sorted((t, r) for r, t in self._failed_at.items())
        first = next((e for _, r in failed for e in exits if e.rank == r), None)
        return LocalResult(tuple(exits), first, timed_out, signals)

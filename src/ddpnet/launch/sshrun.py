"""SSH launches, the edge: the preflight over every host (bounded fan-out, per-host timeout)
and the job itself (one ssh client per host, output streamed, signals forwarded, exit codes
collected).

What grows with the number of hosts N: the preflight runs :data:`FANOUT` ssh clients at a
time (N/FANOUT rounds of at most ``connect_timeout + PROBE_SECONDS`` each); the job holds N
ssh clients (one process and three pipes each, plus two reader threads) on the launching host
for its whole run, since every host's ranks run until the job ends.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ddpnet.errors import RequirementError
from ddpnet.launch.ssh import (
    HostProblem,
    SshOptions,
    classify,
    compare_software,
    remote_command,
    ssh_argv,
)
from ddpnet.local import exit_status, forwarding
from ddpnet.subproc import run_tool

#: ssh clients the preflight runs at once
FANOUT = 64
#: seconds a host may take, once connected, to answer the preflight probe
PROBE_SECONDS = 20.0
#: seconds the other hosts get to finish after one host's ranks failed (they usually wait
#: on the failed one), and after a forwarded signal, before their ssh is closed
GRACE = 10.0

#: prints the host's Python, torch and ddpnet versions as one JSON line
_PROBE = (
    "import json, sys\n"
    "from importlib import metadata\n"
    "def version(name):\n"
    "    try:\n"
    "        return metadata.version(name)\n"
    "    except Exception:\n"
    "        return None\n"
    "try:\n"
    "    import ddpnet\n"
    "    own = ddpnet.__version__\n"
    "except Exception:\n"
    "    own = None\n"
    "print(json.dumps({'python': '%d.%d' % sys.version_info[:2], 'torch': version('torch'),"
    " 'ddpnet': own, 'executable': sys.executable}))\n"
)

LineSink = Callable[[str, str, str], None]  # (host, "stdout"|"stderr", line)


def require_ssh() -> None:
    if shutil.which("ssh") is None:
        raise RequirementError("ssh not found on PATH: --hostfile starts ranks over SSH",
                               "install the OpenSSH client (apt-get install openssh-client)")


def local_software() -> dict[str, Any]:
    """What the probe reports, for this host: the reference every host must match."""
    from importlib import metadata

    import ddpnet

    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = None
    return {"python": "{}.{}".format(*sys.version_info[:2]), "torch": torch,
            "ddpnet": ddpnet.__version__}


def _probe_one(host: str, opts: SshOptions, python: str, env: Mapping[str, str], cwd: str,
               local: Mapping[str, Any]) -> HostProblem | None:
    line = remote_command([python, "-c", _PROBE], env, cwd)
    out = run_tool(ssh_argv(opts, host, line), opts.connect_timeout + PROBE_SECONDS)
    problem = classify(host, out.returncode, out.stderr, timed_out=out.failure == "timeout")
    if problem is not None:
        return problem
    try:
        remote = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return HostProblem(host, "ssh-failed", f"the probe printed {out.stdout[-200:]!r}")
    return compare_software(host, python, remote, local)


def preflight(hosts: Sequence[str], opts: SshOptions, python: str, env: Mapping[str, str],
              cwd: str) -> list[HostProblem]:
    """Every host's problem, in hostfile order: ssh itself (keys, host keys, reachability),
    then the remote Python, torch and ddpnet against this host's, and the working directory."""
    require_ssh()
    local = local_software()
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(FANOUT, len(hosts))) as pool:
        found = pool.map(lambda h: _probe_one(h, opts, python, env, cwd, local), hosts)
        return [p for p in found if p is not None]


# ---- the job ------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostJob:
    """One host's part of a job: the command line its login shell runs."""

    host: str
    remote: str


@dataclass(frozen=True)
class HostExit:
    """How one host's part ended: the remote status (255: ssh failed), ssh's stderr tail."""

    host: str
    code: int
    stopped: bool
    problem: HostProblem | None = None
    stdout: str = ""


@dataclass(frozen=True)
class JobResult:
    exits: tuple[HostExit, ...]
    signals: tuple[int, ...]

    @property
    def code(self) -> int:
        """A forwarded signal as 128+N, else the first failing host's status, else 0."""
        if self.signals:
            return 128 + self.signals[-1]
        return next((e.code for e in self.exits if e.code and not e.stopped), 0)


class _Client:
    """One host's ssh client, its readers and what it printed."""

    def __init__(self, job: HostJob, opts: SshOptions, on_line: LineSink | None,
                 keep_stdout: bool) -> None:
        self.job = job
        self.proc = subprocess.Popen(
            ssh_argv(opts, job.host, job.remote), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
            errors="replace", start_new_session=True)
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.stopped = False
        self.readers = [self._pump("stdout", self.stdout, None if keep_stdout else on_line,
                                   keep_stdout),
                        self._pump("stderr", self.stderr, on_line, False)]

    def _pump(self, stream: str, keep: list[str], on_line: LineSink | None,
              whole: bool) -> threading.Thread:
        """Read one stream line by line: kept whole, or streamed with its last lines kept."""
        pipe = self.proc.stdout if stream == "stdout" else self.proc.stderr

        def run() -> None:
            for line in pipe:  # type: ignore[union-attr]
                keep.append(line)
                if not whole:
                    del keep[:-40]
                if on_line is not None:
                    on_line(self.job.host, stream, line.rstrip("\n"))

        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t

    def send(self, text: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.write(text)
            self.proc.stdin.flush()

    def close(self) -> None:
        """End the control line: the remote wrapper stops its command (SIGTERM, SIGKILL)."""
        if self.proc.poll() is None:
            self.stopped = True
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()

    def result(self) -> HostExit:
        for t in self.readers:
            t.join(5)
        code = exit_status(self.proc.returncode if self.proc.returncode is not None else 0)
        problem = classify(self.job.host, code, "".join(self.stderr)) if code == 255 else None
        return HostExit(self.job.host, code, self.stopped, problem, "".join(self.stdout))


def _forward(clients: Sequence[_Client], signum: int) -> None:
    for c in clients:
        c.send(signal.Signals(signum).name + "\n")


def run_jobs(jobs: Sequence[HostJob], opts: SshOptions, on_line: LineSink | None = None, *,
             keep_stdout: frozenset[str] = frozenset(), grace: float = GRACE) -> JobResult:
    """Start every host's part and wait for all; after a failure or a forwarded signal the
    rest get ``grace`` seconds, then their control line closes (the remote wrapper stops the
    command) and ``grace`` later their ssh is killed. ``keep_stdout`` names hosts whose
    whole stdout is kept for the caller instead of streamed."""
    require_ssh()
    clients: list[_Client] = []
    received: list[int] = []
    try:
        # signals are only recorded here: _wait forwards them over the control lines
        with forwarding(lambda: [], send=lambda proc, signum: None) as received:
            for job in jobs:
                clients.append(_Client(job, opts, on_line, job.host in keep_stdout))
            _wait(clients, received, grace)
            _stop(clients, grace)
    finally:
        _stop(clients, grace)
    return JobResult(tuple(c.result() for c in clients), tuple(received))


def _wait(clients: Sequence[_Client], received: list[int], grace: float) -> None:
    """Until every client exits; forwards each new signal; closes the rest ``grace`` s after
    the first failure or signal, at once on a second signal (a second Ctrl-C)."""
    forwarded = 0
    since: float | None = None
    while None in [c.proc.poll() for c in clients]:  # poll (and reap) every client each round
        if len(received) > forwarded:
            for signum in received[forwarded:]:
                _forward(clients, signum)
            forwarded = len(received)
            since = since or time.monotonic()
        if since is None and any(c.proc.returncode not in (None, 0) for c in clients):
            since = time.monotonic()
        if since is not None and (time.monotonic() - since >= grace or forwarded > 1):
            for c in clients:
                c.close()
            return
        time.sleep(0.05)


def _stop(clients: Sequence[_Client], grace: float) -> None:
    """Close every control line, then kill the ssh clients still running after ``grace``."""
    for c in clients:
        c.close()
    end = time.monotonic() + grace
    for c in clients:
        try:
            c.proc.wait(max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(c.proc.pid, signal.SIGKILL)
            c.proc.wait()

"""A zygote for test ranks: torch imported once per pytest worker, a fork per rank.

A rank that only needs a process group (a worker script of ours, run as ``python SCRIPT``)
spends ~1.8 s of CPU importing torch before its first line runs, most of what a short test
costs on two cores (issue #39). The zygote is one process per pytest worker that imported
torch and torch.distributed once and then only forks: each ``popen`` gets a child that
becomes the script's process (its own pid, environment, working directory, standard
streams, session), runs the script as ``__main__`` and exits as an interpreter would
(atexit, non-daemon threads joined, exit code or signal kept). The test holds a
``Popen``-shaped handle: ``pid``, ``poll``, ``wait``, ``communicate``, ``kill``,
``send_signal``, ``returncode`` (negative for a signal, as ``subprocess`` has it).

A child can also be a lab node's process (``node_popen``): it enters the node's network,
mount and UTS namespaces as ``ip netns exec NS unshare --uts`` does
(``ddpnet.lab.topology.node_argv``: the node's /sys, its /etc/netns files over /etc, its
hostname), so ``ddpnet check`` on six lab nodes stops importing torch six times. ``-m
MODULE`` runs a module as ``python -m`` does. ``tests.lab_util.ForkingLab`` (``fresh_lab(...,
fork=True)``) does it for a module's whole lab; what only an exec applies (``forkable``:
``LD_PRELOAD``, ``PYTHONHASHSEED`` ...) still gets a real interpreter.

Not for what a user's interpreter start-up is part of: a launcher (torchrun, mpirun,
``ddpnet exec``), an interpreter hook (``ddpnet attach``), or a test that finds its ranks
(or a port's holder) by command line: a child's /proc/PID/cmdline is the zygote's.
``DDPNET_TEST_ZYGOTE=0`` starts every rank as its own interpreter again (the same tests, the
slow way).

Protocol (a Unix socket): the client sends one JSON request with the child's three standard
streams as SCM_RIGHTS; the zygote answers with the child's pid, then, when it exits, with its
wait status and CPU seconds (``os.wait4``), which the client adds to :data:`REAPED_CPU_S` so
that the suite's profile still counts what the ranks spent (tests/profiling.py).
"""

from __future__ import annotations

import array
import atexit
import contextlib
import ctypes
import fcntl
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import IO, Any

#: CPU seconds of every child the zygote reaped for this process (user + system)
REAPED_CPU_S = 0.0
_LOCK = threading.Lock()
_ZYGOTE: _Server | None = None
#: the zygote's warning filters before a child's PYTHONWARNINGS (_serve)
_BASE_FILTERS: list[Any] = []


def enabled() -> bool:
    return os.environ.get("DDPNET_TEST_ZYGOTE", "1") != "0"


# -- the zygote process ---------------------------------------------------------------------

def _recv_request(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    fds = array.array("i")
    msg, ancdata, _flags, _addr = conn.recvmsg(1 << 20, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - (len(data) % fds.itemsize)])
    return json.loads(msg.decode()), list(fds)


def _become(request: dict[str, Any], fds: list[int], zygote_fds: Sequence[int],
            sockets: Sequence[socket.socket]) -> None:
    """In the forked child: take the request's streams, session, directory and environment,
    as a fresh ``python SCRIPT`` would have them. The zygote's sockets are detached before
    their fds close: a socket object collected later (the zygote's frame unwinding at exit)
    would close its old fd number under whatever reuses it (gloo's epoll fd)."""
    for fd in [*zygote_fds, *(sock.detach() for sock in sockets)]:
        os.close(fd)
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    # each stream copied above 2 first: a received fd that is itself 0, 1 or 2 would be
    # overwritten by the dup2 before its own (stdout sent to stdin's file, its pipe closed)
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 3) for fd in fds]
    for fd in set(fds) - {0, 1, 2}:
        os.close(fd)
    for target, fd in enumerate(high):
        os.dup2(fd, target)
        os.close(fd)
    if request.get("new_session"):
        os.setsid()
    if request.get("node"):
        _enter_node(*request["node"])
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    # read at interpreter start-up, so the zygote's own were in force
    sys.warnoptions[:] = [w for w in os.environ.get("PYTHONWARNINGS", "").split(",") if w]
    warnings.filters[:] = _BASE_FILTERS  # type: ignore[index]
    warnings._filters_mutated()  # type: ignore[attr-defined]
    warnings._processoptions(sys.warnoptions)  # type: ignore[attr-defined]
    # the zygote's own stream objects now write to the child's fds (dup2 above); new
    # objects in their place would let the old ones be collected, closing fds 0-2 under
    # whatever reuses those numbers next (gloo's epoll fd: "nfds != -1")
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    for stream, line in ((sys.stdout, os.isatty(1)), (sys.stderr, True)):
        stream.reconfigure(line_buffering=line, write_through=unbuffered)  # type: ignore[union-attr]
    if os.environ.get("OMP_NUM_THREADS", "").isdigit():  # libgomp read the zygote's at load
        import torch

        torch.set_num_threads(max(1, int(os.environ["OMP_NUM_THREADS"])))
    argv = list(request["argv"])
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    # python -m puts the working directory first, python SCRIPT the script's directory
    first = os.getcwd() if argv[0] == "-m" else os.path.dirname(os.path.abspath(argv[0]))
    sys.path[:] = [first, *extra, *(p for p in sys.path[1:] if p not in extra)]
    sys.argv = argv


#: sched.h and sys/mount.h
_CLONE_NEWNS, _CLONE_NEWUTS, _CLONE_NEWNET = 0x00020000, 0x04000000, 0x40000000
_MS_BIND, _MS_REC, _MS_SLAVE, _MNT_DETACH = 0x1000, 0x4000, 1 << 19, 2


def _enter_node(namespace: str, hostname: str) -> None:
    """Become a process of lab node ``namespace``, as ``ip netns exec NS unshare --uts`` and
    the hostname write of ``ddpnet.lab.topology.node_argv`` make one: its network namespace;
    a mount namespace of its own (slave, as ip does) with a sysfs of that network namespace
    on /sys and each /etc/netns/NS file bound over its /etc one; a UTS namespace with the
    node's hostname. The forked child has one thread, as unshare(CLONE_NEWNS) needs."""
    libc = ctypes.CDLL(None, use_errno=True)

    def check(result: int, what: str) -> None:
        if result != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"entering lab node {namespace}: {what}: {os.strerror(err)}")

    fd = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
    try:
        check(libc.setns(fd, _CLONE_NEWNET), "setns")
    finally:
        os.close(fd)
    check(libc.unshare(_CLONE_NEWNS | _CLONE_NEWUTS), "unshare")
    check(libc.mount(b"", b"/", b"none", _MS_SLAVE | _MS_REC, None), "mount --make-rslave /")
    check(libc.umount2(b"/sys", _MNT_DETACH), "umount /sys")
    check(libc.mount(namespace.encode(), b"/sys", b"sysfs", 0, None), "mount sysfs")
    etc = f"/etc/netns/{namespace}"
    for name in sorted(os.listdir(etc)) if os.path.isdir(etc) else []:
        if os.path.exists(f"/etc/{name}"):
            check(libc.mount(f"{etc}/{name}".encode(), f"/etc/{name}".encode(), b"none",
                             _MS_BIND, None), f"bind {etc}/{name}")
    socket.sethostname(hostname)


def _run_child(request: dict[str, Any], fds: list[int], zygote_fds: Sequence[int],
               sockets: Sequence[socket.socket]) -> None:
    """The child's whole life: it never returns to the zygote's loop (SystemExit or an
    uncaught exception end the interpreter as they would end ``python SCRIPT``)."""
    import runpy

    _become(request, fds, zygote_fds, sockets)
    try:
        if sys.argv[0] == "-m":
            module = sys.argv[1]
            del sys.argv[0]  # runpy sets sys.argv[0] to the module's file, as python -m does
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(sys.argv[0], run_name="__main__")
    finally:
        # what the script printed reaches its pipes before anything of the zygote's inherited
        # state is torn down (the interpreter flushes again at exit; this is the same data)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
    raise SystemExit(0)


def _serve(path: str) -> None:
    """Import torch once, then fork a child per request until stdin closes (the test
    process is gone)."""
    import gc

    import torch._dynamo  # DDP's __init__ imports it (~1.5 s of CPU)
    import torch.distributed  # noqa: F401  # the import every child inherits

    # the interpreter's filters without the zygote's own -W/PYTHONWARNINGS ones (put first)
    _BASE_FILTERS[:] = warnings.filters[len(sys.warnoptions):]
    gc.collect()
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, socket.socket] = {}
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        ready, _, _ = select.select([listener, wake_r, sys.stdin], [], [], 5.0)
        if sys.stdin in ready and not sys.stdin.readline():
            os._exit(0)  # the test process is gone; its ranks are its tests' to clean
        if wake_r in ready:
            os.read(wake_r, 4096)
        _reap(children)
        if listener in ready:
            conn, _ = listener.accept()
            request, fds = _recv_request(conn)
            if len(fds) != 3:  # a short ancillary read: refuse rather than mix up streams
                for fd in fds:
                    os.close(fd)
                with contextlib.suppress(OSError):
                    conn.sendall(f"error: {len(fds)} stream fds received, not 3\n".encode())
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:
                _run_child(request, fds, [wake_r, wake_w],
                           [listener, conn, *children.values()])
            for fd in fds:
                os.close(fd)
            conn.sendall(f"{pid}\n".encode())
            children[pid] = conn


def _reap(children: dict[int, socket.socket]) -> None:
    """Every exited child's status and CPU to its client, then its connection closed."""
    while children:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sendall(f"{status} {usage.ru_utime + usage.ru_stime}\n".encode())
            conn.close()


# -- the test's side ------------------------------------------------------------------------

class _Server:
    """One zygote per test process, started on first use, gone with the process."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="ddpnet-zygote-")
        self.path = os.path.join(self.dir, "sock")
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", self.path], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"the test zygote did not start: {line!r}")
        atexit.register(self.close)

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        with contextlib.suppress(OSError):
            os.rmdir(self.dir)


def _server() -> _Server:
    global _ZYGOTE
    with _LOCK:
        if _ZYGOTE is None or _ZYGOTE.proc.poll() is not None:
            _ZYGOTE = _Server()
        return _ZYGOTE


def _stream(spec: Any, mode: str, default: int, own: list[int],
            text: bool) -> tuple[int, IO[Any] | None]:
    """(fd for the child, the test's end of a pipe or None) for a subprocess-style stream
    spec: PIPE, DEVNULL, None (the test's own ``default`` fd), an fd or a file. The test's
    end is opened once, text or binary: a text wrapper dropped for its ``.buffer`` would
    close the fd under it when collected."""
    if spec == subprocess.PIPE:
        read, write = os.pipe()
        child, mine = (read, write) if mode == "w" else (write, read)
        own.append(child)
        return child, os.fdopen(mine, mode if text else mode + "b")
    if spec == subprocess.DEVNULL:
        fd = os.open(os.devnull, os.O_RDWR)
        own.append(fd)
        return fd, None
    if spec is None:
        return default, None
    return (spec if isinstance(spec, int) else spec.fileno()), None


class Rank:
    """A ``subprocess.Popen``-shaped handle on a zygote child."""

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                 cwd: str | None = None, stdin: Any = None, stdout: Any = None,
                 stderr: Any = None, start_new_session: bool = False,
                 text: bool = False, node: tuple[str, str] | None = None,
                 bufsize: int = -1) -> None:
        # bufsize: accepted as Popen does; the test's pipe ends are read as they fill
        self.args = list(argv)
        self.returncode: int | None = None
        self.cpu_s = 0.0
        self._reading = threading.Lock()
        own: list[int] = []
        try:
            in_fd, self.stdin = _stream(stdin, "w", 0, own, text)
            out_fd, self.stdout = _stream(stdout, "r", 1, own, text)
            if stderr == subprocess.STDOUT:
                err_fd, self.stderr = out_fd, None
            else:
                err_fd, self.stderr = _stream(stderr, "r", 2, own, text)
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._sock.settimeout(30)
            self._sock.connect(_server().path)
            request = {"argv": self.args, "env": dict(env if env is not None else os.environ),
                       "cwd": cwd or os.getcwd(), "new_session": start_new_session,
                       "node": list(node) if node else None}
            self._sock.sendmsg([json.dumps(request).encode()],
                               [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                 array.array("i", [in_fd, out_fd, err_fd]))])
        finally:
            for fd in own:
                os.close(fd)
        self._file = self._sock.makefile("r")
        answer = self._file.readline()
        if not answer.strip().isdigit():
            raise RuntimeError(f"the test zygote refused {self.args}: {answer.strip()!r}")
        self.pid = int(answer)
        self._sock.settimeout(None)

    def _status(self, timeout: float | None) -> int | None:
        """The exit status once the zygote sent it. One thread reads it at a time, as
        ``Popen`` waits: a test's drain thread in ``communicate`` and its main thread's
        ``poll`` both read it, and the second found the file closed under it (the drain
        died, the rank's stdout was lost). A poll while another thread waits returns None."""
        if self.returncode is not None:
            return self.returncode
        end = None if timeout is None else time.monotonic() + timeout
        if not self._reading.acquire(timeout=-1 if timeout is None else timeout):
            return self.returncode
        try:  # what is left of the timeout after waiting for the other reader
            return self._read_status(None if end is None else max(0.0, end - time.monotonic()))
        finally:
            self._reading.release()

    def _read_status(self, timeout: float | None) -> int | None:
        global REAPED_CPU_S
        if self.returncode is not None:
            return self.returncode
        ready, _, _ = select.select([self._sock], [], [], timeout)
        if not ready:
            return None
        line = self._file.readline().split()
        status, cpu = int(line[0]), float(line[1])
        self.returncode = os.waitstatus_to_exitcode(status)
        self.cpu_s = cpu
        with _LOCK:
            REAPED_CPU_S += cpu
        self._file.close()
        self._sock.close()
        return self.returncode

    def poll(self) -> int | None:
        return self._status(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def communicate(self, input: str | bytes | None = None,
                    timeout: float | None = None) -> tuple[Any, Any]:
        if self.stdin is not None:
            if input:
                self.stdin.write(input)
            self.stdin.close()
        got: dict[str, Any] = {}
        readers = [threading.Thread(target=lambda n=name, f=f: got.__setitem__(n, f.read()),
                                    daemon=True)
                   for name, f in (("out", self.stdout), ("err", self.stderr)) if f]
        for reader in readers:
            reader.start()
        end = None if timeout is None else time.monotonic() + timeout
        for reader in readers:
            reader.join(None if end is None else max(0.0, end - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self.wait(None if end is None else max(0.0, end - time.monotonic()) + 5)
        for f in (self.stdout, self.stderr):
            if f:
                f.close()
        return got.get("out"), got.get("err")

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


#: read by the interpreter, the loader or the OpenMP runtime when a process starts, where a
#: forked child would keep the zygote's (the _APPLIED ones _become applies itself)
_AT_EXEC = ("LD_", "PYTHON", "OMP_", "GOMP_", "KMP_", "MKL_")
_APPLIED = frozenset({"PYTHONPATH", "PYTHONWARNINGS", "PYTHONUNBUFFERED",
                      "PYTHONDONTWRITEBYTECODE", "OMP_NUM_THREADS"})


def forkable(env: Mapping[str, str] | None) -> bool:
    """Whether a child with ``env`` can come from the zygote: the zygote is on, and no
    variable that only takes effect at exec differs from what the zygote started with
    (``LD_PRELOAD`` of a clock-skew library needs a real exec)."""
    if not enabled():
        return False
    if env is None:
        return True
    keys = {k for k in (*env, *os.environ) if k.startswith(_AT_EXEC) and k not in _APPLIED}
    return all(env.get(k) == os.environ.get(k) for k in keys)


def popen(argv: Sequence[str], **kwargs: Any) -> Any:
    """``subprocess.Popen([sys.executable, *argv], **kwargs)``, from the zygote when
    ``forkable`` (``argv[0]`` a script path; no interpreter options)."""
    if not forkable(kwargs.get("env")):
        return subprocess.Popen([sys.executable, *argv], **kwargs)
    return Rank(argv, **kwargs)


def node_popen(lab: Any, index: int, argv: Sequence[str], env: Mapping[str, str] | None = None,
               **kwargs: Any) -> Any:
    """``lab.popen(index, [sys.executable, *argv], env)``: the environment is the test's with
    ``env`` over it, in a session of its own; from the zygote when enabled (``argv`` a script
    path or ``-m MODULE``, then its arguments). ``lab.down`` kills it with the node's other
    processes (it is in the node's network namespace)."""
    full = {**os.environ, **(env or {})}
    if not forkable(full):
        return lab.popen(index, [sys.executable, *argv], env, **kwargs)
    return in_node(lab.node(index), argv, full, **kwargs)


def in_node(node: Any, argv: Sequence[str], env: Mapping[str, str], **kwargs: Any) -> Rank:
    """A child that is a process of lab node ``node`` (its ``namespace`` and ``hostname``),
    with the whole environment ``env``, in a session of its own as a lab's processes are
    (``node_popen``, ``tests.lab_util.ForkingLab``)."""
    kwargs.setdefault("start_new_session", True)
    return Rank(argv, env=env, node=(node.namespace, node.hostname), **kwargs)


def run(argv: Sequence[str], *, input: str | bytes | None = None, timeout: float | None = None,
        capture_output: bool = False, check: bool = False,
        **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run([sys.executable, *argv], ...)``, from the zygote when enabled."""
    if not forkable(kwargs.get("env")):
        return subprocess.run([sys.executable, *argv], input=input, timeout=timeout,
                              capture_output=capture_output, check=check, **kwargs)
    if capture_output:
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    proc = Rank(argv, **kwargs)
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    done = subprocess.CompletedProcess([sys.executable, *argv], proc.wait(), out, err)
    if check:
        done.check_returncode()
    return done


if __name__ == "__main__" and sys.argv[1:2] == ["--serve"]:
    _serve(sys.argv[2])

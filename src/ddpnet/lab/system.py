"""The edge: every ``ip``/``tc``/``nft`` call, process scan and file write the lab makes.

Each call has a timeout and raises a :class:`LabError` naming the command and its stderr.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ddpnet.errors import DdpnetError, RequirementError
from ddpnet.exitcodes import ExitCode
from ddpnet.subproc import CommandOutput, run_tool

NETNS_DIR = Path("/run/netns")
ETC_NETNS = Path("/etc/netns")
#: one command's limit; building or removing a namespace takes milliseconds
CMD_TIMEOUT = 30.0


class LabError(DdpnetError):
    """A system command the lab needed failed (exit 1: the environment refused it)."""

    exit_code = ExitCode.CHECK_FAILED


def require_root(tools: Iterable[str] = ("ip",)) -> None:
    """Exit 3 with a hint when not root or a tool is missing."""
    if os.geteuid() != 0:
        raise RequirementError(
            "ddpnet lab needs root: it creates network namespaces, veth pairs and tc qdiscs",
            "run it as root, e.g. sudo ddpnet lab ...",
        )
    for tool in tools:
        if shutil.which(tool) is None:
            package = {"ip": "iproute2", "tc": "iproute2", "nft": "nftables",
                       "unshare": "util-linux"}.get(tool, tool)
            raise RequirementError(f"ddpnet lab needs '{tool}', which is not installed",
                                   f"install it: apt-get install {package}")


def run(argv: Sequence[str], *, input: str | None = None, timeout: float = CMD_TIMEOUT,
        check: bool = True) -> CommandOutput:
    """Run one system command with a timeout; LabError (with its stderr) when it fails."""
    proc = run_tool(argv, timeout, input=input)
    if proc.failure == "timeout":
        raise LabError(f"'{' '.join(argv)}' did not finish in {timeout:g} s",
                       "the system is overloaded or a namespace is stuck; retry, then "
                       "ddpnet lab down")
    if proc.failure == "absent":
        raise RequirementError(f"'{argv[0]}' is not installed",
                               "install iproute2 (ip, tc) and nftables (nft)")
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        why = detail[-1] if detail else f"exit {proc.returncode}"
        raise LabError(f"'{' '.join(argv[:6])}' failed: {why}",
                       "see the message above; ddpnet lab down --name NAME removes a "
                       "half-built lab")
    return proc


def ip_batch(lines: Sequence[str], namespace: str | None = None, *, force: bool = False,
             timeout: float = CMD_TIMEOUT) -> CommandOutput:
    """``ip [-n NS] [-force] -batch -``: many changes for the cost of one process."""
    argv = ["ip"] + (["-n", namespace] if namespace else []) + (["-force"] if force else [])
    return run([*argv, "-batch", "-"], input="\n".join(lines) + "\n", timeout=timeout,
               check=not force)


def tc_batch(lines: Sequence[str], namespace: str, *,
             timeout: float = CMD_TIMEOUT) -> CommandOutput:
    """``tc -n NS -force -batch -`` (``-force`` so the leading ``qdisc del`` of a missing root
    is not fatal); fails when a later line fails."""
    proc = run(["tc", "-n", namespace, "-force", "-batch", "-"],
               input="\n".join(lines) + "\n", timeout=timeout, check=False)
    if proc.returncode != 0:
        said = proc.stderr.splitlines()
        for i, text in enumerate(said):
            m = re.match(r"Command failed -:(\d+)", text)
            if not m or lines[int(m.group(1)) - 1].startswith("qdisc del"):
                continue  # deleting a root qdisc that is not there is fine
            why = said[i - 1].strip() if i else ""
            raise LabError(f"tc in {namespace} failed: '{lines[int(m.group(1)) - 1]}': {why}",
                           "check the rate/delay/loss values; tc needs the sch_tbf and "
                           "sch_netem kernel modules")
    return proc


@functools.lru_cache(maxsize=1)
def netem_available() -> bool:
    """Whether the kernel has sch_netem (probed once in a throwaway namespace); without it the
    lab delays packets with :mod:`ddpnet.lab.delayline`."""
    proc = run_tool(["unshare", "--net", "tc", "qdisc", "add", "dev", "lo", "root", "netem",
                     "delay", "1ms"], 10)
    return proc.returncode == 0


def parallel(calls: Sequence[tuple[Any, ...]], workers: int = 16) -> None:
    """Run ``(fn, *args)`` calls in threads (each a separate ``ip`` process); re-raise the
    first error after all finished."""
    if not calls:
        return
    with ThreadPoolExecutor(max_workers=min(workers, len(calls))) as pool:
        futures: list[Future[Any]] = [pool.submit(c[0], *c[1:]) for c in calls]
        errors = [e for e in (f.exception() for f in futures) if e is not None]
    if errors:
        raise errors[0]


def existing_namespaces() -> set[str]:
    try:
        return {p.name for p in NETNS_DIR.iterdir()}
    except FileNotFoundError:
        return set()


def _netns_ids(namespaces: Iterable[str]) -> dict[tuple[int, int], str]:
    ids: dict[tuple[int, int], str] = {}
    for ns in namespaces:
        try:
            st = os.stat(NETNS_DIR / ns)
        except OSError:
            continue
        ids[(st.st_dev, st.st_ino)] = ns
    return ids


def pids_in(namespaces: Iterable[str]) -> dict[int, str]:
    """Every process whose network namespace is one of ``namespaces`` (one /proc scan)."""
    ids = _netns_ids(namespaces)
    found: dict[int, str] = {}
    if not ids:
        return found
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            st = os.stat(f"/proc/{entry.name}/ns/net")
        except OSError:
            continue
        ns = ids.get((st.st_dev, st.st_ino))
        if ns is not None:
            found[int(entry.name)] = ns
    return found


def kill_namespaces(namespaces: Sequence[str], grace: float = 1.0) -> int:
    """SIGTERM every process in the namespaces, SIGKILL what is left after ``grace`` s.
    Returns how many processes were signalled."""
    pids = pids_in(namespaces)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    left = dict(pids)
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = pids_in(namespaces)
    for pid in pids_in(namespaces) if left else ():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


def write_file(path: Path, text: str) -> None:
    """Write in place (truncate + write), so bind mounts of the file see the new content."""
    for attempt in range(3):  # another lab's down may rmdir an empty /etc/netns meanwhile
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
            return
        except FileNotFoundError:
            if attempt == 2:
                raise


def remove_empty_dir(path: Path) -> None:
    """Remove ``path`` if it is empty (so ``down`` leaves no /etc/netns it created)."""
    with contextlib.suppress(OSError):
        path.rmdir()


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)

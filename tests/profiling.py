"""Where the suite's time goes, test by test (a pytest plugin; issue 39).

With ``DDPNET_TEST_PROFILE=DIR`` each pytest process (each xdist worker) writes one JSON line
per test phase to ``DIR/<worker>.jsonl``: its wall seconds, this process's CPU seconds, the CPU
seconds of the children it reaped (the ranks, lab nodes and daemons a test starts: mostly
starting Python and torch), and the seconds it spent building and removing labs, starting
SLURM clusters and sshd sets, and in ``time.sleep`` (``sleep`` where a test sleeps, ``wait``
where ``subprocess`` polls a child it waits for). ``benchmarks/test_durations.py`` runs the
suite with it and sums the lines into ``benchmarks/results/test_durations.json``.

Without the variable nothing is wrapped: the plugin costs the suite nothing.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

#: what the wrapped calls spent since the current phase began
_spent: dict[str, float] = {}
_counts: dict[str, int] = {}


def _accounted(kind: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, its wall seconds added to ``_spent[kind]``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.monotonic()
        try:
            return fn(*args, **kwargs)
        finally:
            _spent[kind] = _spent.get(kind, 0.0) + time.monotonic() - t0
            _counts[kind] = _counts.get(kind, 0) + 1

    return wrapper


def _wrap_costly_calls() -> None:
    """Lab up/down, SLURM and sshd start-up, and sleeps, each counted where a test pays it."""
    from ddpnet.lab import sshd
    from ddpnet.lab.lab import Lab
    from ddpnet.launch.slurmcluster import SlurmCluster

    Lab.up = _accounted("lab", Lab.up)  # type: ignore[method-assign]
    Lab.down = _accounted("lab", Lab.down)  # type: ignore[method-assign]
    SlurmCluster.start = _accounted("slurm", SlurmCluster.start)  # type: ignore[method-assign]
    SlurmCluster.stop = _accounted("slurm", SlurmCluster.stop)  # type: ignore[method-assign]
    sshd.start = _accounted("sshd", sshd.start)
    time.sleep = _sleep_by_caller(time.sleep)


def _sleep_by_caller(sleep: Callable[[float], None]) -> Callable[[float], None]:
    """``time.sleep``, counted as ``sleep`` where a test (or its helper) sleeps and as
    ``wait`` where ``subprocess`` polls a child it waits for with a timeout."""
    by_kind = {kind: _accounted(kind, sleep) for kind in ("sleep", "wait")}

    def wrapper(seconds: float) -> None:
        caller = sys._getframe(1).f_globals.get("__name__", "")
        by_kind["wait" if caller == "subprocess" else "sleep"](seconds)

    return wrapper


def _children_cpu() -> float:
    """The children this process reaped, and the ranks the test zygote reaped for it
    (tests/zygote.py: its children are not ours to the kernel)."""
    from tests import zygote

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime + zygote.REAPED_CPU_S


class _Profiler:
    def __init__(self, out: Path) -> None:
        self.out = out

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Iterator[None]:
        return (yield from self._measure(item, "setup"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        return (yield from self._measure(item, "call"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Iterator[None]:
        return (yield from self._measure(item, "teardown"))

    def _measure(self, item: pytest.Item, phase: str) -> Iterator[None]:
        _spent.clear()
        _counts.clear()
        wall, cpu, kids = time.monotonic(), time.process_time(), _children_cpu()
        try:
            return (yield)
        finally:
            line = {"test": item.nodeid, "phase": phase,
                    "wall_s": round(time.monotonic() - wall, 4),
                    "cpu_s": round(time.process_time() - cpu, 4),
                    "children_cpu_s": round(_children_cpu() - kids, 4),
                    **{f"{k}_s": round(v, 4) for k, v in _spent.items()},
                    **{f"{k}_n": n for k, n in _counts.items()}}
            with self.out.open("a") as fh:
                fh.write(json.dumps(line) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    directory = os.environ.get("DDPNET_TEST_PROFILE")
    if not directory:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    Path(directory).mkdir(parents=True, exist_ok=True)
    _wrap_costly_calls()
    config.pluginmanager.register(_Profiler(Path(directory, f"{worker}.jsonl")),
                                  "ddpnet-profiler")

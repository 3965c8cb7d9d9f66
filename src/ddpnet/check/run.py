"""``run(options) -> CheckResult``: this process's part of a cluster check (edge: sockets,
the store, torch, with ``--local`` the worker processes, the HTML report file).

Every rank runs this; rank 0 hosts torch's c10d TCPStore on MASTER_PORT and judges
(``coordinator``), the others follow (``worker``). ``--local N`` runs rank 0 here and ranks
1..N-1 as ``python -m ddpnet.check OPTIONS_JSON`` through ``ddpnet.local.LocalRanks``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any

from ddpnet.check import mesh
from ddpnet.check.causes import Cause
from ddpnet.check.context import Progress, RankContext, RankOutcome, in_thread
from ddpnet.check.coordinator import coordinate
from ddpnet.check.options import CheckOptions
from ddpnet.check.result import CheckResult, WorkerLine
from ddpnet.check.stages.rendezvous import preflight_patiently
from ddpnet.check.store import host_store, join_store, listen_early
from ddpnet.check.tools import Tools
from ddpnet.check.torchimport import give_up, import_torch, own_process
from ddpnet.check.worker import follow
from ddpnet.config import DistConfig
from ddpnet.errors import ConfigError, RendezvousError, Terminated, raise_terminated
from ddpnet.net.probe import refuse_master_on_bridge
from ddpnet.net.select import VARIABLES, Selection
from ddpnet.net.zones import refuse_unusable_zone
from ddpnet.output import exit_now
from ddpnet.paths import file_writable

#: how long the --local workers may take to print their line after rank 0's verdict
WORKER_WAIT = 10.0


def run(options: CheckOptions, environ: Mapping[str, str] | None = None, *,
        tools: Tools | None = None, progress: Progress | None = None) -> CheckResult:
    """This process's rank of the check (all ranks but 0 in workers with ``--local``);
    writes the HTML report when asked and this is rank 0."""
    env = dict(os.environ if environ is None else environ)
    tools = tools or Tools()
    _report_writable(options.report_path)
    if options.local is None:
        result = run_rank(options, env, tools, progress)
    else:
        from ddpnet.process_group import check_possible_here

        check_possible_here(options.backend)  # before any worker starts
        result = _run_local(options, env, tools, progress)
    if result.report is not None and options.report_path is not None:
        from ddpnet.check.render_html import render_html

        Path(options.report_path).write_text(render_html(result.report), encoding="utf-8")
        result = replace(result, report_path=options.report_path)
    return result


def _report_writable(path: str | None) -> None:
    """Refuse an unwritable ``--report`` before the check runs, not after."""
    problem = file_writable(path) if path is not None else None
    if problem is not None:
        raise ConfigError(f"--report {path}: {problem}",
                          "give a path in an existing, writable directory, e.g. "
                          "--report ./check.html")


def worker_argv(options: CheckOptions) -> list[str]:
    return [sys.executable, "-m", "ddpnet.check", options.for_worker().to_json()]


def _run_local(options: CheckOptions, environ: Mapping[str, str], tools: Tools,
               progress: Progress | None) -> CheckResult:
    """Rank 0 here, the workers through the one local spawner (leaving the block, by a
    return or Ctrl-C, stops what still runs)."""
    from ddpnet.local import LocalRanks

    assert options.local is not None
    shell = _shell_cause(environ)
    with _terminated_raises(), LocalRanks(worker_argv(options), options.local, first=1,
                                          capture=True, environ=environ) as ranks:
        # the shell's own finding goes into rank 0's verdict, so every rank's line says it
        result = run_rank(options, ranks.environ(0), tools, progress,
                          given=() if shell is None else (shell,))
        if result.failure is not None:
            return result  # the workers wait for a rank 0 that is not coming
        done = ranks.wait(timeout=WORKER_WAIT, grace=WORKER_WAIT)
    if done.signals:  # forwarded to the workers while they finished: leave the same way
        signum = done.signals[-1]
        raise KeyboardInterrupt if signum == signal.SIGINT else Terminated(signum)
    return replace(result, workers=tuple(WorkerLine.of(e) for e in done.exits))


def _shell_cause(environ: Mapping[str, str]) -> Cause | None:
    """The doctor's ``environment.ifname`` on the shell's own interface variables, which
    ``--local`` replaces with lo for its ranks (edge: lists this host's interfaces)."""
    from ddpnet.check.ifvars import shell_cause
    from ddpnet.doctor.base import Host, Inputs, SelectedInterface
    from ddpnet.doctor.environment import IfnameVars
    from ddpnet.net.interfaces import list_interfaces

    if not any(environ.get(var) for var in VARIABLES):
        return None
    inputs = Inputs(interfaces=list_interfaces(), selected=SelectedInterface("lo"))
    return shell_cause(IfnameVars().run(Host(environ=environ), inputs), socket.gethostname())


@contextlib.contextmanager
def _terminated_raises() -> Iterator[None]:
    """While inside, SIGTERM and SIGHUP raise :class:`Terminated` (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    previous = {s: signal.signal(s, raise_terminated) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def run_rank(options: CheckOptions, environ: Mapping[str, str], tools: Tools,
             progress: Progress | None = None, given: tuple[Cause, ...] = ()) -> CheckResult:
    """One rank; a rank that cannot even join is a result with its own cause. ``given``:
    causes rank 0 knew before the run (``--local``'s shell variables), in its verdict."""
    from ddpnet.check.render_text import progress_line
    from ddpnet.env.resolve import resolve

    cfg = resolve(environ)
    say = progress or (progress_line if cfg.rank == 0 else _quiet)
    try:
        outcome = check_rank(cfg, options, tools, environ, say, given)
    except RendezvousError as exc:
        return CheckResult(cfg.rank, exc.host or socket.gethostname(), failure=exc)
    finally:
        give_up()  # the doctor's torch facts wait for this rank's import: no longer
    return CheckResult(cfg.rank, outcome.host, outcome)


def _quiet(_message: str) -> None:
    pass


def check_rank(cfg: DistConfig, opts: CheckOptions, tools: Tools, environ: Mapping[str, str],
               progress: Progress, given: tuple[Cause, ...] = ()) -> RankOutcome:
    """Run every stage on this rank. Raises RendezvousError when this rank cannot even join."""
    host = socket.gethostname()
    started = time.monotonic()
    refuse_unusable_zone(cfg, host)  # every rank, before anything binds or dials MASTER_ADDR
    sel = tools.select(cfg, environ)
    _refuse_master_loopback(sel, host, cfg.rank)
    refuse_master_on_bridge(cfg, sel, host)
    facts = in_thread(lambda: tools.facts(cfg, sel, environ))  # 1-4 s, while we join
    # plain sockets before torch's (slow) import: an unreachable master is named at once,
    # and rank 0 listens on MASTER_PORT at once (the store takes the socket over)
    if cfg.rank == 0:
        tools.preflight(cfg, environ, opts.connect_timeout)  # MASTER_ADDR ours, port free
    else:
        preflight_patiently(cfg, environ, opts, tools.preflight)
    _require_address(cfg, sel, host)
    early = listen_early(cfg, host) if cfg.rank == 0 else None
    try:
        return _join_and_run(cfg, opts, sel, facts, tools, environ, progress, host, started,
                             early.fd if early is not None else None, given)
    finally:
        if early is not None:
            early.close()


def _join_and_run(cfg: DistConfig, opts: CheckOptions, sel: Selection,
                  facts: Future[dict[str, Any]], tools: Tools, environ: Mapping[str, str],
                  progress: Progress, host: str, started: float,
                  listen_fd: int | None, given: tuple[Cause, ...] = ()) -> RankOutcome:
    """Import torch, open (or join) the store and run this rank's stages."""
    # is what answers on MASTER_PORT a TCPStore? asked while torch imports (rank 0's store
    # answers once it imported torch too); as patient as a rank waits for rank 0
    probe = None if cfg.rank == 0 else in_thread(
        lambda: _probe_store(tools, cfg, environ, opts.join_timeout + opts.stage_timeout))
    import_torch()
    if probe is not None:
        probe.result()  # raises master-port-foreign
    listener = mesh.Listener(str(sel.address))
    try:
        with exported(sel, environ, os.environ):
            store = host_store(cfg, opts, host, listen_fd) if cfg.rank == 0 else \
                join_store(cfg, opts, host)
            try:
                ctx = RankContext(cfg, opts, sel, store, listener, facts, tools.bench, host,
                                  started, progress, given=given)
                ctx.took("connect", started)
                return coordinate(ctx) if cfg.rank == 0 else follow(ctx)
            finally:
                store.close()
    finally:
        listener.close()


def _probe_store(tools: Tools, cfg: DistConfig, environ: Mapping[str, str],
                 patience: float) -> dict[str, Any]:
    tools.store(cfg, environ, patience)
    return {}


def _refuse_master_loopback(sel: Selection, host: str, rank: int) -> None:
    """A loopback MASTER_ADDR in a job that spans hosts (a single-node config copied to a
    cluster) is named by every rank that has it, at once: rank 0 would host a store no other
    node reaches and the others would retry their own loopback until the join timeout."""
    problem = sel.error(host=host, rank=rank)
    if problem is not None and problem.cause == "master-loopback":
        raise problem


def _require_address(cfg: DistConfig, sel: Selection, host: str) -> None:
    """The preflight passed but no interface here carries the job's traffic: name it."""
    if sel.address is None:
        raise RendezvousError(
            "master-no-route",
            f"no interface on {host} reaches MASTER_ADDR {cfg.master_addr}: "
            f"{sel.gloo.reason}",
            "set MASTER_ADDR to rank 0's address on a network every node shares "
            "(`ip route get MASTER_ADDR`, `ip -br addr`)", host=host, rank=cfg.rank)


def export_interface(sel: Selection, environ: Mapping[str, str],
                     target: MutableMapping[str, str]) -> None:
    """torch reads GLOO/NCCL/TP_SOCKET_IFNAME from the process environment: give it this
    rank's own value (a ``--local`` rank 0's environment is not the process's) or else the
    automatic choice."""
    auto = sel.env()
    for var in VARIABLES:
        value = environ.get(var) or auto.get(var)
        if value:
            target[var] = value


@contextlib.contextmanager
def exported(sel: Selection, environ: Mapping[str, str],
             target: MutableMapping[str, str]) -> Iterator[None]:
    """:func:`export_interface` for the duration of the run, then ``target`` as it was (a
    rank 0 run in-process, by a test or a caller, must not leave GLOO_SOCKET_IFNAME=lo in
    its process for whatever it starts next)."""
    before = {var: target.get(var) for var in VARIABLES}
    export_interface(sel, environ, target)
    try:
        yield
    finally:
        for var, value in before.items():
            if value is None:
                target.pop(var, None)
            else:
                target[var] = value


def exit_fast(code: int) -> int:
    """Everything is printed, written and reaped: skip the interpreter's teardown of torch,
    gloo and the store (1-3 s on a busy node, most of a fast check's tail)."""
    if "torch" in sys.modules and os.environ.get("DDPNET_CHECK_NO_FAST_EXIT") != "1":
        exit_now(code)
    return code


def run_and_leave(command: Callable[[], int]) -> int:
    """Run ``command`` and leave through :func:`exit_fast`, also on Ctrl-C (130) and
    SIGTERM/SIGHUP (128+N), once the ``--local`` workers are stopped."""
    own_process()
    try:
        code = command()
    except KeyboardInterrupt:
        sys.stderr.write("ddpnet: interrupted\n")
        code = 130
    except Terminated as exc:
        code = 128 + exc.signum
    return exit_fast(code)

"""``ddpnet check``: run on every rank; rank 0 prints the verdict, root cause first."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from ddpnet.exitcodes import ExitCode


def _progress(enabled: bool) -> Any:
    def say(message: str) -> None:
        if enabled:
            sys.stderr.write(f"[check] {message}\n")
            sys.stderr.flush()

    return say


@click.command("check")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Write a self-contained HTML report (rank 0).")
@click.option("--matrix/--no-matrix", default=None,
              help="Bandwidth matrix (default: on up to 64 ranks).")
@click.option("--bench/--no-bench", default=False, help="Collective bandwidth sweep.")
@click.option("--timeout", "stage_timeout", type=click.FloatRange(1, 3600), default=20.0,
              show_default=True, help="Seconds each stage may take.")
@click.option("--join-timeout", type=click.FloatRange(0.5, 3600), default=10.0,
              show_default=True, help="Seconds rank 0 waits for every rank to join.")
@click.option("--bw-seconds", type=click.FloatRange(0.05, 60), default=1.0, show_default=True,
              help="Seconds each bandwidth round streams.")
@click.option("--backend", type=click.Choice(["auto", "gloo", "nccl"]), default="auto",
              show_default=True)
@click.option("--local", "local", type=click.IntRange(1, 64), default=None,
              help="Spawn N ranks on this machine over loopback (no launcher, no root).")
def command(as_json: bool, report_path: Path | None, matrix: bool | None, bench: bool,
            stage_timeout: float, join_timeout: float, bw_seconds: float, backend: str,
            local: int | None) -> int:
    """Check the whole cluster at once: rendezvous, facts, reachability, process group,
    bandwidth. Run it on every rank (torchrun, srun, mpirun, exported RANK/WORLD_SIZE/
    MASTER_ADDR/MASTER_PORT), or with --local N on one machine."""
    from ddpnet.check.deps import default_deps
    from ddpnet.check.runner import CheckOptions, run_check
    from ddpnet.env.resolve import resolve
    from ddpnet.errors import RendezvousError

    opts = CheckOptions(matrix=matrix, bench=bench, stage_timeout=stage_timeout,
                        join_timeout=join_timeout, bw_seconds=bw_seconds, backend=backend)
    environ: dict[str, str] = dict(os.environ)
    procs: list[Any] = []
    if local is not None:
        from ddpnet.check.spawn import local_environ, spawn_workers
        from ddpnet.net.ports import free_port

        port = free_port()
        environ = local_environ(os.environ, 0, local, port)
        args = ["--json", "--timeout", str(stage_timeout), "--join-timeout", str(join_timeout),
                "--bw-seconds", str(bw_seconds), "--backend", backend,
                "--matrix" if opts.matrix_on(local) else "--no-matrix",
                "--bench" if bench else "--no-bench"]
        procs = spawn_workers(local, port, args)
    cfg = resolve(environ)
    deps = default_deps()
    try:
        try:
            outcome = run_check(cfg, opts, deps, environ, _progress(cfg.rank == 0))
        except RendezvousError as exc:
            return _own_failure(exc, cfg.rank, as_json)
    finally:
        if procs:
            from ddpnet.check.spawn import reap

            workers = reap(procs, timeout=10)
    if local is not None and not as_json:
        import json as _json

        for code, out, err in workers:
            try:
                line = str(_json.loads(out).get("line"))
            except ValueError:
                line = (err.strip().splitlines() or ["no output"])[-1]
            sys.stderr.write(f"[exit {code}] {line}\n")
    return _exit_now(_render(outcome, as_json, report_path))


def _exit_now(code: int) -> int:
    """Everything is printed, written and reaped: skip the interpreter's teardown of torch,
    gloo and the store (1-3 s on a busy node, most of a fast check's tail)."""
    if "torch" in sys.modules and os.environ.get("DDPNET_CHECK_NO_FAST_EXIT") != "1":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _render(outcome: Any, as_json: bool, report_path: Path | None) -> int:
    if outcome.report is None:
        if as_json:
            from ddpnet.output import emit_json

            emit_json({"rank": outcome.rank, "host": outcome.host, "ok": outcome.ok,
                       "line": outcome.line})
        else:
            click.echo(outcome.line)
        return int(ExitCode.OK if outcome.ok else ExitCode.CHECK_FAILED)
    report = outcome.report
    if report_path is not None:
        from ddpnet.check.render_html import render_html

        report_path.write_text(render_html(report), encoding="utf-8")
    if as_json:
        from ddpnet.output import emit_json

        emit_json(report.to_dict())
    else:
        from ddpnet.check.render_text import render
        from ddpnet.output import console

        render(report, console())
        if report_path is not None:
            click.echo(f"report: {report_path}")
    return int(ExitCode.OK if report.verdict == "pass" else ExitCode.CHECK_FAILED)


def _own_failure(exc: Any, rank: int, as_json: bool) -> int:
    """This rank could not join: its own cause, as JSON or as the one-line error."""
    import socket

    if as_json:
        from ddpnet.output import emit_json

        host = exc.host or socket.gethostname()
        emit_json({"verdict": "fail", "rank": rank, "host": host,
                   "causes": [{"id": exc.cause, "hosts": [host], "ranks": [rank],
                               "detail": exc.message, "fix": exc.hint}],
                   "line": f"rank {rank} {host}: {exc.cause}: {exc.message}"})
        return int(ExitCode.CHECK_FAILED)
    raise exc

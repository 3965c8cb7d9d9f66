"""``ddpnet diagnose``: ask a running job's watch hub for every rank's state, or read the
dump files a job left, and name the cause with the same analysis as the watchdog."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ddpnet.errors import ConfigError
from ddpnet.exitcodes import ExitCode
from ddpnet.launch.recovery import Event, Record
from ddpnet.watch.analyze import Options, analyze
from ddpnet.watch.report import render_text
from ddpnet.watch.state import Diagnosis, Snapshot


@dataclass(frozen=True)
class DiagnoseOptions:
    #: read dump files from this directory instead of asking a live hub
    dumps: Path | None = None
    #: the job's MASTER_ADDR:MASTER_PORT (default: resolved from this environment)
    master: str | None = None
    #: the hub's port (default: DDPNET_WATCH_PORT, else derived from the master)
    port: int | None = None
    timeout: float = 5.0
    #: a ``ddpnet sbatch --requeue`` job's directory: its recovery history and newest verdict
    job_dir: Path | None = None


@dataclass(frozen=True)
class DiagnoseResult:
    diagnosis: Diagnosis
    snapshot: Snapshot
    source: str
    #: the job's recovery record (``ddpnet.launch.recovery``), when read from a job dir
    recovery: Record | None = None

    @property
    def exit_code(self) -> int:
        return int(ExitCode.OK if self.diagnosis.kind == "ok" else ExitCode.CHECK_FAILED)

    def to_dict(self) -> dict[str, Any]:
        out = {"kind": self.diagnosis.kind, "source": self.source,
               "diagnosis": self.diagnosis.to_dict(), "snapshot": self.snapshot.to_dict()}
        if self.recovery is not None:
            out["recovery"] = self.recovery.to_dict()
        return out


def render(result: DiagnoseResult, console: Any) -> None:
    """The recovery history, if any, then the watchdog's one-screen report (brackets are
    text, not markup)."""
    if result.recovery is not None:
        job = result.recovery.job
        lines = ["recovery under ddpnet launch --max-restarts (each node's record):"
                 if job == "launch" else
                 f"recovery of job {job or '?'} (--max-recoveries "
                 f"{result.recovery.max_recoveries}):"]
        lines += [f"  {e.line()}" for e in result.recovery.events] or ["  nothing recorded"]
        console.print("\n".join(lines), markup=False, highlight=False, soft_wrap=True)
    console.print(render_text(result.diagnosis, result.snapshot, result.source), markup=False,
                  highlight=False, soft_wrap=True)


def run(options: DiagnoseOptions) -> DiagnoseResult:
    if options.job_dir is not None:
        return from_job_dir(options.job_dir)
    if options.dumps is not None:
        return from_dumps(options.dumps)
    return live(options)


def from_dumps(directory: Path, note: str = "") -> DiagnoseResult:
    """What the job left in ``directory``: the verdict already named there (the hub's
    report.json, a rank's own cut-off verdict), else the analysis of the ranks' dumps."""
    from ddpnet.watch.dump import read_dumps, read_verdicts

    hub, own = read_verdicts(directory)
    try:
        snapshot = read_dumps(directory)
    except FileNotFoundError as exc:
        if hub is None:
            raise ConfigError(f"no watch dumps in {directory}: {exc}",
                              "point --dumps at the job's DDPNET_WATCH_DIR (default "
                              "./ddpnet-watch in each rank's working directory)") from None
        snapshot = _report_snapshot(directory)
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(f"cannot read the watch dumps in {directory}: {exc}",
                          "each rank-N.json is written by ddpnet's watch; copy them whole") \
            from None
    source = f"{note}dumps in {directory}"
    result = _named(directory, hub, own, snapshot, source)
    launched = _launch_record(directory)
    return result if launched is None else replace(result, recovery=launched)


def _named(directory: Path, hub: Diagnosis | None, own: tuple[Diagnosis, ...],
           snapshot: Snapshot, source: str) -> DiagnoseResult:
    if hub is not None or own:
        named = hub if hub is not None else own[0]
        rest = [d for d in own if d != named]
        extra = tuple(f"rank(s) {', '.join(str(r) for r in d.ranks)} judged itself: "
                      f"{d.summary}" for d in rest)
        whose = "the hub's verdict, report.json" if hub is not None else \
            f"rank {named.ranks[0] if named.ranks else '?'}'s own verdict"
        return DiagnoseResult(replace(named, evidence=(*named.evidence, *extra)), snapshot,
                              f"{source} ({whose})")
    return DiagnoseResult(analyze(snapshot, Options(live=False)), snapshot, source)


def _launch_record(directory: Path) -> Record | None:
    """What ``ddpnet launch --max-restarts`` did about the verdicts (each node's
    ``recovery-<host>.json``, ``launch.elastic_agent``), one history in time order."""
    import json

    events: list[Event] = []
    for path in sorted(directory.glob("recovery-*.json")):
        try:
            events += Record.from_dict(json.loads(path.read_text())).events
        except (OSError, ValueError, KeyError, TypeError):
            continue
    if not events:
        return None
    return Record("launch", tuple(sorted(events, key=lambda e: e.at)))


def from_job_dir(job_dir: Path) -> DiagnoseResult:
    """A recovering job's history (``recovery.json``) and the verdict of its newest run that
    left one (``watch-runN``)."""
    from ddpnet.launch.recover import read_record, record_path

    path = record_path(job_dir)
    try:
        record = read_record(path)
    except (ValueError, OSError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}",
                          "recovery.json is written by the job's batch script; give --job-dir "
                          "the job's DDPNET_JOB_DIR") from None
    runs = sorted((d for d in job_dir.glob("watch-run*") if d.name[9:].isdigit()),
                  key=lambda d: int(d.name[9:]), reverse=True)
    for directory in runs:
        if (directory / "report.json").exists() or any(directory.glob("rank-*.json")):
            return replace(from_dumps(directory), recovery=record)
    if not path.exists():
        raise ConfigError(f"no recovery record and no watch verdict in {job_dir}",
                          "give --job-dir the directory `ddpnet sbatch --requeue` jobs keep "
                          "(DDPNET_JOB_DIR, default ./ddpnet-job-<job id>)")
    return DiagnoseResult(Diagnosis("ok", "no run of this job left a watch verdict"),
                          Snapshot(0, 0.0, {}), f"job directory {job_dir}", record)


def _report_snapshot(directory: Path) -> Snapshot:
    import json

    try:
        return Snapshot.from_dict(json.loads((directory / "report.json").read_text())
                                  ["snapshot"])
    except (OSError, ValueError, KeyError, TypeError):
        return Snapshot(0, 0.0, {})


def _master(options: DiagnoseOptions) -> tuple[str, int]:
    if options.master is not None:
        from ddpnet.address import REQUIRED_PORT, parse_address

        try:
            addr = parse_address(options.master, "--master", port=REQUIRED_PORT)
        except ConfigError as exc:
            raise ConfigError(f"{exc} (--master is HOST:PORT)",
                              "the job's MASTER_ADDR:MASTER_PORT, e.g. --master node0:29500 "
                              "(IPv6 as --master [fd00::1]:29500)") from None
        assert addr.port is not None  # REQUIRED_PORT
        return addr.dial, addr.port
    from ddpnet.env.resolve import resolve

    cfg = resolve()
    return cfg.master_addr, cfg.master_port


def live(options: DiagnoseOptions) -> DiagnoseResult:
    from ddpnet.watch.hub import ask_snapshot
    from ddpnet.watch.settings import derived_port, watch_config

    host, master_port = _master(options)
    wc = watch_config(os.environ)
    port = options.port if options.port is not None else derived_port(host, master_port, wc)
    try:
        snapshot, stale_after = ask_snapshot(host, port, options.timeout)
    except (OSError, ValueError) as exc:
        left = wc.directory
        if (left / "report.json").exists() or any(left.glob("rank-*.json")):
            # the hub left with rank 0's verdict: what the job left here still answers
            return from_dumps(left, note=f"no watch hub answers at {host}:{port} ({exc}); ")
        raise ConfigError(
            f"no watch hub answers at {host}:{port} (job {host}:{master_port}): {exc}",
            "run this where the job's MASTER_ADDR/MASTER_PORT are set, or pass --master "
            "HOST:PORT (and --port if DDPNET_WATCH_PORT was set); after the job died use "
            "--dumps DIR") from None
    return DiagnoseResult(analyze(snapshot, Options(stale_after=stale_after)), snapshot,
                          f"live hub {host}:{port}")

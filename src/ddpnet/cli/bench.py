"""``ddpnet bench``: collective bandwidth (algbw, busbw) next to what the link carries.

Run on every rank by any launcher (torchrun, srun, mpirun), or ``--local N`` to start N ranks
on this machine. Rank 0 prints; every rank returns the same exit code.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import click

from ddpnet.bench.config import (
    BASELINES,
    DTYPES,
    MODES,
    OPS,
    BenchConfig,
    parse_collectives,
    parse_size,
)
from ddpnet.errors import CheckFailed, ConfigError
from ddpnet.exitcodes import ExitCode
from ddpnet.net.ports import free_port


def build_config(*, collectives: str, min_bytes: str, max_bytes: str, factor: int, iters: int,
                 warmup: int, dtype: str, op: str, mode: str, check: bool, baseline: str,
                 baseline_time: float, min_busbw: float | None, progress: bool) -> BenchConfig:
    """Pure: flags -> BenchConfig (ConfigError on bad values)."""
    return BenchConfig(
        collectives=parse_collectives(collectives), min_bytes=parse_size(min_bytes),
        max_bytes=parse_size(max_bytes), factor=factor, iters=iters, warmup=warmup,
        dtype=dtype, op=op, mode=mode, check=check, baseline=baseline,
        baseline_seconds=baseline_time, min_busbw_gbps=min_busbw, progress=progress,
    )


def child_argv(params: dict[str, Any]) -> list[str]:
    """The ``ddpnet bench`` argv every local rank runs (the same flags, without --local)."""
    renamed = {"as_json": "--json", "csv_path": "--csv", "plot_path": "--plot"}
    argv = [sys.executable, "-m", "ddpnet", "bench"]
    for key, value in params.items():
        if key == "local" or value is None or value is False:
            continue
        flag = renamed.get(key, "--" + key.replace("_", "-"))
        if value is True:
            argv.append(flag)
        else:
            argv += [flag, str(value)]
    return argv


def run_local(n: int, params: dict[str, Any], timeout: float) -> int:
    """Start n ranks on 127.0.0.1; rank 0 keeps stdout/stderr, others report failures."""
    if n < 1:
        raise ConfigError(f"--local {n}: need at least 1 rank", "e.g. --local 4")
    port = free_port()
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("SLURM_", "OMPI_", "PMI_", "PMIX_", "MV2_", "LSB_", "JSM_",
                                 "TORCHELASTIC_"))}
    argv = child_argv(params)
    procs = []
    for rank in range(n):
        env = {**base, "RANK": str(rank), "WORLD_SIZE": str(n), "LOCAL_RANK": str(rank),
               "LOCAL_WORLD_SIZE": str(n), "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo"}
        env.pop("NCCL_SOCKET_IFNAME", None)
        procs.append(subprocess.Popen(
            argv, env=env,
            stdout=None if rank == 0 else subprocess.DEVNULL,
            stderr=None if rank == 0 else subprocess.PIPE, text=True,
        ))
    return wait_ranks(procs, n, timeout)


def wait_ranks(procs: list[subprocess.Popen[str]], n: int, timeout: float,
               grace: float = 15.0) -> int:
    """Wait for every rank; once one fails, the others get ``grace`` seconds (they are
    usually blocked on the dead rank) before they are killed. Returns the first failure's
    code, else 0."""
    import threading
    import time

    errs: dict[int, str] = {}

    def drain(rank: int, proc: subprocess.Popen[str]) -> None:
        if proc.stderr is not None:
            errs[rank] = proc.stderr.read()

    readers = [threading.Thread(target=drain, args=(r, p), daemon=True)
               for r, p in enumerate(procs) if p.stderr is not None]
    for t in readers:
        t.start()
    deadline = time.monotonic() + timeout
    failed_at: float | None = None
    while [p.poll() for p in procs].count(None):  # poll every rank, each round
        now = time.monotonic()
        if failed_at is None and any(p.returncode not in (None, 0) for p in procs):
            failed_at = now
        if now > deadline or (failed_at is not None and now - failed_at > grace):
            for p in procs:
                if p.poll() is None:
                    p.kill()
            for p in procs:
                p.wait()
            if failed_at is None:
                raise CheckFailed(f"--local {n}: ranks did not finish within {timeout:g}s",
                                  "raise --timeout, or shrink --max-bytes/--iters")
            break
        time.sleep(0.05)
    for t in readers:
        t.join(5)
    codes = [p.returncode for p in procs]
    if codes[0] == 0:  # rank 0 printed its own error otherwise
        for rank in range(1, n):
            if codes[rank] and errs.get(rank, "").strip():
                sys.stderr.write(f"rank {rank}: " + errs[rank].strip().splitlines()[0] + "\n")
    natural = [c for c in codes if c and c > 0]  # killed ranks have negative codes
    return natural[0] if natural else (int(ExitCode.CHECK_FAILED) if any(codes) else 0)


def _progress_callback() -> tuple[Any, Any]:
    from rich.progress import Progress

    from ddpnet.output import err_console

    bar = Progress(console=err_console(), transient=True)
    task = bar.add_task("bench", total=None)

    def update(done: int, total: int, label: str) -> None:
        bar.update(task, completed=done, total=total, description=label)

    return bar, update


@click.command("bench")
@click.option("--collectives", default="all", show_default=True,
              help="Comma list of all_reduce,all_gather,reduce_scatter,broadcast,reduce,"
                   "all_to_all,send_recv (or all).")
@click.option("-b", "--min-bytes", default="1K", show_default=True, help="Smallest size.")
@click.option("-e", "--max-bytes", default="256M", show_default=True, help="Largest size.")
@click.option("-f", "--factor", default=2, show_default=True, type=int,
              help="Size multiplier between steps.")
@click.option("--iters", default=20, show_default=True, type=int, help="Timed iterations.")
@click.option("--warmup", default=5, show_default=True, type=int, help="Untimed iterations.")
@click.option("--dtype", default="float32", show_default=True, type=click.Choice(list(DTYPES)))
@click.option("--backend", default="auto", show_default=True,
              type=click.Choice(["auto", "gloo", "nccl"]),
              help="auto: nccl with a GPU, else gloo.")
@click.option("--op", default="sum", show_default=True, type=click.Choice(list(OPS)),
              help="Reduction op (avg is NCCL-only).")
@click.option("--mode", default="both", show_default=True, type=click.Choice(list(MODES)),
              help="In-place, out-of-place or both where torch has both.")
@click.option("--check", is_flag=True, help="Verify results; count wrong elements.")
@click.option("--min-busbw", type=float, default=None,
              help="Exit 1 if a collective's best busbw is below this (Gb/s).")
@click.option("--baseline", default="auto", show_default=True, type=click.Choice(list(BASELINES)),
              help="Link baseline: iperf3 -J, own tcp stream, none (auto: iperf3 if present).")
@click.option("--baseline-time", default=3.0, show_default=True, type=float,
              help="Seconds each link stream runs.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (rank 0).")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), default=None,
              help="Write the rows as CSV.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Write busbw against size as a PNG.")
@click.option("--local", type=int, default=None,
              help="Start this many ranks on this machine (127.0.0.1).")
@click.option("--timeout", default=900.0, show_default=True, type=float,
              help="Seconds before a stuck collective or local run fails.")
def command(**params: Any) -> int:
    """Measure collective bandwidth and compare it with the link's real rate.

    Sizes are total buffer bytes (K/M/G binary). Tables show GB/s (10^9 bytes/s) like
    nccl-tests; JSON fields ending in _gbps are Gb/s (10^9 bits/s), like iperf3.
    """
    cfg = build_config(
        collectives=params["collectives"], min_bytes=params["min_bytes"],
        max_bytes=params["max_bytes"], factor=params["factor"], iters=params["iters"],
        warmup=params["warmup"], dtype=params["dtype"], op=params["op"], mode=params["mode"],
        check=params["check"], baseline=params["baseline"],
        baseline_time=params["baseline_time"], min_busbw=params["min_busbw"],
        progress=not params["as_json"],
    )
    for key in ("csv_path", "plot_path"):
        if params[key]:
            parent = Path(params[key]).resolve().parent
            if not parent.is_dir():
                raise ConfigError(f"--{key[:-5]} {params[key]}: directory {parent} does not "
                                  "exist", "create it or write elsewhere")
    if params["local"] is not None:
        return run_local(params["local"], params, params["timeout"])
    return run_rank(cfg, params)


def run_rank(cfg: BenchConfig, params: dict[str, Any]) -> int:
    """This process is one rank: init, measure, render on rank 0, shut down."""
    from ddpnet.bench.driver import run
    from ddpnet.bench.group import init_group, shutdown_group

    init_group(params["backend"], params["timeout"])
    try:
        import torch.distributed as dist

        rank = dist.get_rank()
        bar, update = (None, None)
        if rank == 0 and cfg.progress and sys.stderr.isatty():
            bar, update = _progress_callback()
        if bar is not None:
            with bar:
                result = run(cfg, progress=update)
        else:
            result = run(cfg)
    finally:
        shutdown_group()
    if rank == 0:
        emit(result, params)
    return verdict_code(result, cfg, rank)


def emit(result: Any, params: dict[str, Any]) -> None:
    from ddpnet.bench.render import render_table, write_csv, write_plot

    if params["csv_path"]:
        write_csv(result, Path(params["csv_path"]))
    if params["plot_path"]:
        write_plot(result, Path(params["plot_path"]))
    if params["as_json"]:
        from ddpnet.output import emit_json

        emit_json(result.to_dict())
    else:
        from ddpnet.output import console

        render_table(result, console())


def verdict_code(result: Any, cfg: BenchConfig, rank: int) -> int:
    """1 with one error line (rank 0) when --check found wrong elements or busbw is too low."""
    from ddpnet.output import format_error

    problems = []
    if cfg.check and result.wrong:
        bad = sorted({r.collective for r in result.rows if r.wrong})
        problems.append((f"--check: {result.wrong} wrong element(s) in {', '.join(bad)} "
                         f"({result.backend}, {result.world_size} ranks)",
                         "a collective returned wrong data: check the backend build and "
                         "the nodes' torch/NCCL versions (ddpnet doctor)"))
    if cfg.min_busbw_gbps is not None:
        low = result.below(cfg.min_busbw_gbps)
        if low:
            worst = min(low, key=lambda r: r.busbw_gbps)
            problems.append((f"busbw below --min-busbw {cfg.min_busbw_gbps:g} Gb/s: "
                             + ", ".join(f"{r.collective} {r.busbw_gbps:.3f}" for r in low),
                             f"{worst.collective} peaks at {worst.busbw_gbps:.3f} Gb/s; compare "
                             "with the link line above, then see ddpnet doctor / ddpnet tune"))
    if not problems:
        return int(ExitCode.OK)
    if rank == 0:
        for message, hint in problems:
            sys.stderr.write(format_error(message, hint) + "\n")
    return int(ExitCode.CHECK_FAILED)

"""``ddpnet bench`` as a command: ``run(options) -> BenchOutcome``.

This process is one rank of a job any launcher started (torchrun, srun, mpirun): bring the
group up through ``ddpnet.init()``, measure, write CSV/plot on rank 0, shut down. Or, with
``--local N``, it starts N such ranks on this machine through the one spawner
(``ddpnet.local``) and waits for them: rank 0 keeps this terminal; it is the one that prints.

(Not ``bench/run.py``: a submodule named ``run`` would replace the public function
``ddpnet.bench.run`` on the package.)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ddpnet.bench.options import BenchOptions
from ddpnet.bench.result import BenchResult
from ddpnet.bench.verdict import BenchOutcome, exit_code, local_outcome, problems
from ddpnet.errors import ConfigError
from ddpnet.exitcodes import ExitCode
from ddpnet.local import LocalRanks

if TYPE_CHECKING:
    import threading

    from ddpnet.bench.render import RowStream

#: seconds the other ranks get once one has failed (they are usually blocked on it) before
#: they are stopped
GRACE = 15.0


def run(options: BenchOptions) -> BenchOutcome:
    check_output_dirs(options)
    if options.local is not None:
        from ddpnet.process_group import check_possible_here

        check_possible_here(options.backend)  # before spawning ranks that would each fail
        return run_local(options)
    return run_rank(options)


def check_output_dirs(options: BenchOptions) -> None:
    """``--csv``/``--plot`` files that can be written: known before measuring for minutes."""
    from ddpnet.paths import file_writable

    for flag, value in (("--csv", options.csv_path), ("--plot", options.plot_path)):
        problem = file_writable(str(Path(value).resolve())) if value else None
        if problem is not None:
            raise ConfigError(f"{flag} {value}: {problem}", "create it or write elsewhere")


def worker_argv(options: BenchOptions) -> list[str]:
    """What each local rank runs: one rank of the same bench, no CLI in between."""
    return [sys.executable, "-m", "ddpnet.bench", options.for_rank().to_json()]


def run_local(options: BenchOptions) -> BenchOutcome:
    """N ranks on 127.0.0.1 (``GLOO_SOCKET_IFNAME=lo``); their exit decides ours. Rank 0
    ends a run past ``--timeout`` itself, naming the row; the parent waits a grace longer."""
    assert options.local is not None
    with LocalRanks(worker_argv(options), options.local) as ranks:
        return wait_local(ranks, options.timeout, slack=GRACE)


def wait_local(ranks: LocalRanks, timeout: float, grace: float = GRACE,
               slack: float = 0.0) -> BenchOutcome:
    """Wait for started ranks: all done, ``grace`` after the first failure, a signal
    (forwarded to them), or ``timeout`` + ``slack`` (a CheckFailed)."""
    return local_outcome(ranks.wait(timeout + slack, grace), ranks.world, timeout)


def run_rank(options: BenchOptions) -> BenchOutcome:
    """This process is one rank: init, measure, shut down; rank 0 writes and reports."""
    from ddpnet.bench.render import row_stream
    from ddpnet.process_group import init, shutdown

    shown: list[RowStream] = []  # rank 0's, once the group is up
    # rank 0 of a --local run (its RANK set by the spawner) ends it at --timeout
    stop = deadline(options.timeout, shown) if options.deadline and \
        os.environ.get("RANK") == "0" else None
    # no watch: its per-call announcement would be timed with the collectives
    handle = init(backend=options.backend, timeout=options.timeout, watch=False)
    try:
        if handle.rank != 0:
            result = measure(options, None)
        else:
            with row_stream(options.config.progress) as stream:
                shown.append(stream)
                result = measure(options, stream)
    finally:
        shutdown()
        if stop is not None:
            stop.cancel()
    found = problems(result, options.config)
    if handle.rank != 0:
        return BenchOutcome(exit_code(found))
    write_outputs(result, options)
    return BenchOutcome(exit_code(found), result, found, streamed=options.config.progress)


def deadline(seconds: float, shown: list[RowStream]) -> threading.Timer:
    """``--timeout`` for rank 0 of a ``--local`` run: one line naming what it was measuring
    (``shown``: its stream, once the group is up; the finished rows are printed), then exit
    1. A thread, since a stuck collective holds the main thread in torch until the
    process-group timeout."""
    import threading

    def expire() -> None:
        from ddpnet.output import format_error

        where, done = (f"while measuring {shown[0].current}", shown[0].done) if shown else (
            "before the ranks joined the process group", 0)
        what = f"{done} row(s) finished, printed above" if done else "no row finished"
        sys.stdout.flush()
        sys.stderr.write(format_error(
            f"--timeout {seconds:g}s passed {where} ({what})",
            "raise --timeout, or shrink the sweep (--max-bytes, --iters, --collectives)")
            + "\n")
        sys.stderr.flush()
        os._exit(int(ExitCode.CHECK_FAILED))

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    return timer


def measure(options: BenchOptions, stream: RowStream | None) -> BenchResult:
    """The benchmark on every rank; rank 0 (``stream``) prints rows as they finish."""
    from ddpnet.bench.driver import Listener
    from ddpnet.bench.driver import run as bench

    if stream is None:
        return bench(options.config)
    return bench(options.config, listener=Listener(stream.start, stream.measuring, stream.row))


def write_outputs(result: BenchResult, options: BenchOptions) -> None:
    from ddpnet.bench.render import write_csv, write_plot

    if options.csv_path:
        write_csv(result, Path(options.csv_path))
    if options.plot_path:
        write_plot(result, Path(options.plot_path))

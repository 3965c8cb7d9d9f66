"""``ddpnet bench`` as a command: ``run(options) -> BenchOutcome``.

This process is one rank of a job any launcher started (torchrun, srun, mpirun): bring the
group up through ``ddpnet.init()``, measure, write CSV/plot on rank 0, shut down. Or, with
``--local N``, it starts N such ranks on this machine through the one spawner
(``ddpnet.local``) and waits for them: rank 0 keeps this terminal; it is the one that prints.

(Not ``bench/run.py``: a submodule named ``run`` would replace the public function
``ddpnet.bench.run`` on the package.)
"""

from __future__ import annotations

import sys
from pathlib import Path

from ddpnet.bench.options import BenchOptions
from ddpnet.bench.result import BenchResult
from ddpnet.bench.verdict import BenchOutcome, exit_code, local_outcome, problems
from ddpnet.errors import ConfigError
from ddpnet.local import LocalRanks

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
    """N ranks on 127.0.0.1 (``GLOO_SOCKET_IFNAME=lo``); their exit decides ours."""
    assert options.local is not None
    with LocalRanks(worker_argv(options), options.local) as ranks:
        return wait_local(ranks, options.timeout)


def wait_local(ranks: LocalRanks, timeout: float, grace: float = GRACE) -> BenchOutcome:
    """Wait for started ranks: all done, ``grace`` after the first failure, a signal
    (forwarded to them), or ``timeout`` (a CheckFailed)."""
    return local_outcome(ranks.wait(timeout, grace), ranks.world, timeout)


def run_rank(options: BenchOptions) -> BenchOutcome:
    """This process is one rank: init, measure, shut down; rank 0 writes and reports."""
    from ddpnet.process_group import init, shutdown

    # no watch: its per-call announcement would be timed with the collectives
    handle = init(backend=options.backend, timeout=options.timeout, watch=False)
    try:
        result = measure(options, report=handle.rank == 0)
    finally:
        shutdown()
    found = problems(result, options.config)
    if handle.rank != 0:
        return BenchOutcome(exit_code(found))
    write_outputs(result, options)
    return BenchOutcome(exit_code(found), result, found)


def measure(options: BenchOptions, report: bool) -> BenchResult:
    """The benchmark on every rank; a progress bar on rank 0 when a terminal shows it."""
    from ddpnet.bench.driver import run as bench
    from ddpnet.bench.render import progress_bar

    if not (report and options.config.progress):
        return bench(options.config)
    with progress_bar() as update:
        return bench(options.config, progress=update)


def write_outputs(result: BenchResult, options: BenchOptions) -> None:
    from ddpnet.bench.render import write_csv, write_plot

    if options.csv_path:
        write_csv(result, Path(options.csv_path))
    if options.plot_path:
        write_plot(result, Path(options.plot_path))

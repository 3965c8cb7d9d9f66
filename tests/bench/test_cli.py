"""``ddpnet bench`` for real: --local ranks, JSON/CSV/plot outputs, thresholds, bad input."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import RunCli, assert_user_error, clean_environ

FAST = ["-b", "4K", "-e", "64K", "-f", "16", "--iters", "2", "--warmup", "1",
        "--baseline", "tcp", "--baseline-time", "0.5"]


def _errors(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    """``proc`` without rank 0's ``[bench] N/M`` progress lines on stderr (piped runs)."""
    err = [line for line in proc.stderr.splitlines() if not line.startswith("[bench] ")]
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout,
                                       "\n".join(err))


@pytest.mark.slow
def test_local_two_ranks_json_csv_plot(run_cli: RunCli, tmp_path: Path) -> None:
    csv_path, png = tmp_path / "rows.csv", tmp_path / "bw.png"
    proc = run_cli("bench", "--local", "2", *FAST, "--check", "--json",
                   "--collectives", "all_reduce,all_gather,send_recv",
                   "--csv", str(csv_path), "--plot", str(png), timeout=180)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # exactly one JSON object, from rank 0 only
    assert doc["backend"] == "gloo" and doc["world_size"] == 2
    assert doc["link"]["method"] == "tcp" and doc["link"]["gbps"] > 0
    assert doc["link"]["interface"] == "lo"
    assert {r["collective"] for r in doc["rows"]} == {"all_reduce", "all_gather", "send_recv"}
    assert len(doc["rows"]) == 2 * (1 + 2 + 1)  # sizes x (in-place | both | out-of-place)
    for row in doc["rows"]:
        assert row["wrong"] == 0
        assert row["busbw_gbps"] > 0 and row["link_efficiency"] > 0
    assert doc["wrong"] == 0 and len(doc["verdicts"]) == 3
    with csv_path.open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["collective"] for r in rows] == [r["collective"] for r in doc["rows"]]
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_min_busbw_fails_with_exit_1(run_cli: RunCli) -> None:
    proc = run_cli("bench", "--local", "2", *FAST, "--collectives", "broadcast",
                   "--baseline", "none", "--min-busbw", "100000", timeout=180)
    assert_user_error(_errors(proc), 1, "below --min-busbw 100000 Gb/s", "broadcast")
    assert "broadcast peaks at" in proc.stdout  # the table still printed
    ok = run_cli("bench", "--local", "2", *FAST, "--collectives", "broadcast",
                 "--baseline", "none", "--min-busbw", "0", timeout=180)
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize(("args", "needle"), [
    (["-b", "1X"], "bad size '1X'"),
    (["-b", "1M", "-e", "1K"], "bad size range"),
    (["--collectives", "allreduce"], "unknown collective(s): allreduce"),
    (["--iters", "0"], "bad --iters 0"),
    (["--csv", "/nonexistent-dir/x.csv"], "does not exist"),
    (["--local", "0"], "--local 0"),
    (["--local", "-1"], "--local -1"),
    (["--timeout", "-5"], "--timeout -5"),
    (["--dtype", "int8"], "int8"),
])
def test_bad_input_exit_2(run_cli: RunCli, args: list[str], needle: str) -> None:
    assert_user_error(run_cli("bench", *args), 2, needle)


def test_help_lists_flags(run_cli: RunCli) -> None:
    proc = run_cli("bench", "--help")
    assert proc.returncode == 0
    for flag in ("--collectives", "--min-bytes", "--max-bytes", "--factor", "--iters",
                 "--warmup", "--dtype", "--backend", "--op", "--check", "--min-busbw",
                 "--baseline", "--json", "--csv", "--plot", "--local"):
        assert flag in proc.stdout


def test_run_without_group_is_a_config_error() -> None:
    from ddpnet.bench import BenchConfig, run
    from ddpnet.errors import ConfigError

    with pytest.raises(ConfigError, match="initialised process group") as err:
        run(BenchConfig())
    assert "--local" in err.value.hint


def test_local_ranks_stop_once_one_fails() -> None:
    from ddpnet.bench.command import wait_local
    from ddpnet.local import LocalRanks

    codes = {0: "import time; time.sleep(60)",
             1: "import sys; sys.stderr.write('boom\\n'); sys.exit(2)"}
    with LocalRanks(lambda rank: [sys.executable, "-c", codes[rank]], 2) as ranks:
        started = time.monotonic()
        outcome = wait_local(ranks, timeout=60, grace=0.5)
        assert outcome.exit_code == 2
        assert time.monotonic() - started < 20
        assert all(p.poll() is not None for p in ranks.procs)
    assert outcome.notes == ("rank 1: boom",)  # rank 0 was stopped: it reported nothing


def test_local_beyond_the_bound_is_a_usage_error_before_spawning(run_cli: RunCli) -> None:
    started = time.monotonic()
    proc = run_cli("bench", "--local", "100000", "--json", timeout=30)
    assert_user_error(proc, 2, "--local 100000: more than 64 ranks", "--local 64")
    assert len(proc.stderr.strip().splitlines()) == 2  # the error and its hint, nothing else
    assert time.monotonic() - started < 15  # no rank (each imports torch) was started


@pytest.mark.slow
def test_local_run_past_timeout_keeps_the_finished_rows_and_names_the_one_running(
        run_cli: RunCli) -> None:
    """Piped: each row is printed as it finishes and each is announced on stderr, so the 4K
    row (well under a second) is kept when the 256M one (1000 iterations, minutes on CPU)
    runs past --timeout; rank 0 names that one."""
    proc = run_cli("bench", "--local", "2", "--collectives", "all_reduce", "--mode",
                   "inplace", "-b", "4K", "-e", "256M", "-f", "65536", "--iters", "1000",
                   "--warmup", "0", "--baseline", "none", "--timeout", "20", timeout=120)
    assert_user_error(_errors(proc), 1, "--timeout 20s passed while measuring all_reduce 256M",
                      "1 row(s) finished", "raise --timeout")
    rows = [cells for cells in map(str.split, proc.stdout.splitlines())
            if cells[:1] == ["all_reduce"] and len(cells) == 14]
    assert [r[1] for r in rows] == ["4K"], proc.stdout
    assert "[bench] 1/2 all_reduce 4K" in proc.stderr
    assert "[bench] 2/2 all_reduce 256M" in proc.stderr


@pytest.mark.slow
def test_default_sweep_streams_each_row_as_a_line(run_cli: RunCli) -> None:
    """Without -e, a CPU sweep stops at 16M; piped, the table is the same lines."""
    proc = run_cli("bench", "--local", "2", "--collectives", "broadcast", "--iters", "2",
                   "--warmup", "0", "--baseline", "none", timeout=120)
    assert proc.returncode == 0, proc.stderr
    sizes = [cells[1] for cells in map(str.split, proc.stdout.splitlines())
             if cells[:1] == ["broadcast"] and len(cells) == 14]
    assert sizes[0] == "1K" and sizes[-1] == "16M" and len(sizes) == 15, proc.stdout
    progress = [line for line in proc.stderr.splitlines() if line.startswith("[bench] ")]
    assert progress[0] == "[bench] 1/15 broadcast 1K" and progress[-1] == "[bench] 15/15 done"


def _ranks_of(parent: psutil.Process, n: int, within: float) -> list[psutil.Process]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        children = parent.children()
        if len(children) >= n:
            return children
        time.sleep(0.05)
    raise AssertionError(f"{n} ranks did not start: {parent.children()}")


@pytest.mark.slow
def test_sigterm_to_the_parent_stops_every_rank() -> None:
    argv = [sys.executable, "-m", "ddpnet", "bench", "--local", "2", *FAST,
            "--baseline-time", "120", "--collectives", "all_reduce"]  # rank 0 streams 2 min
    with subprocess.Popen(argv, env=clean_environ(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        ranks = _ranks_of(psutil.Process(proc.pid), 2, within=30)
        time.sleep(3)  # let them get into torch / the rendezvous
        assert all(r.is_running() for r in ranks)
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        _, err = proc.communicate(timeout=15)
        _, alive = psutil.wait_procs(ranks, timeout=3)
        took = time.monotonic() - signalled
    assert not alive, alive
    assert took < 30, took  # the forwarded SIGTERM, not rank 0's 120 s stream
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err

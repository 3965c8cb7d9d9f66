"""Property-based, in process: the commands that only parse and render (``env``, ``launch
--dry-run``, ``sbatch``) given any values for their flags end in a result or in an error the
CLI prints as one line (DdpnetError, click's usage errors), never another exception."""

from __future__ import annotations

import click
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from ddpnet.cli.main import cli
from ddpnet.errors import DdpnetError
from tests.conftest import clean_environ
from tests.fuzzing import FUZZ, int_text, text

_value = st.one_of(int_text, text, st.sampled_from(["2", "1", "0", "auto", "tcp://h:1"]))


def _flags(names: list[str]) -> st.SearchStrategy[list[str]]:
    pair = st.tuples(st.sampled_from(names), _value).map(list)
    return st.lists(pair, max_size=3).map(lambda pairs: [x for p in pairs for x in p])


def _invoke(args: list[str]) -> None:
    result = CliRunner().invoke(cli, args, env=clean_environ(), standalone_mode=False)
    exc = result.exception
    if exc is None or isinstance(exc, (DdpnetError, click.ClickException, SystemExit)):
        return
    raise AssertionError(f"ddpnet {args!r} raised {exc!r}") from exc


@FUZZ
@given(_flags(["--rank", "--world-size", "--master-addr", "--master-port", "--init-method"]))
def test_env_flags(args: list[str]) -> None:
    _invoke(["env", "--json", *args])


@FUZZ
@given(_flags(["--nodes", "--ntasks-per-node", "--ntasks", "--gpus-per-node", "--time",
               "--partition", "--job-name", "--engine", "--max-restarts", "--ifname"]))
def test_sbatch_flags(args: list[str]) -> None:
    _invoke(["sbatch", "--nodes", "1", *args, "--", "train.py"])


@FUZZ
@given(_flags(["--nproc-per-node", "--nnodes", "--node-rank", "--master-addr",
               "--master-port", "--rdzv", "--max-restarts", "--via", "--hosts", "--ifname"]))
def test_launch_dry_run_flags(args: list[str]) -> None:
    _invoke(["launch", "--dry-run", "--json", *args, "--", "train.py"])


def test_the_harness_runs_the_real_commands() -> None:
    ok = CliRunner().invoke(cli, ["sbatch", "--nodes", "2", "--", "train.py"],
                            env=clean_environ(), standalone_mode=False)
    assert ok.exception is None and "#SBATCH --nodes=2" in ok.output
    bad = CliRunner().invoke(cli, ["launch", "--dry-run", "--nnodes", "x", "--", "t.py"],
                             env=clean_environ(), standalone_mode=False)
    assert isinstance(bad.exception, DdpnetError)

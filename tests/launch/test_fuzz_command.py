"""Property-based: launch's parsers (--nnodes, --hosts, the target argv) and its validated
configs give a valid value or one clean ConfigError (exit 2), never another exception."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ddpnet.launch.command import (
    MAX_NODES,
    MAX_PROCS_PER_NODE,
    LaunchConfig,
    MpirunConfig,
    NNodes,
    Target,
    parse_hosts,
)
from tests.fuzzing import FUZZ, clean, int_text, text

_nnodes = st.one_of(int_text, text, st.from_regex(r"-?[0-9\u0661]{1,25}(:-?[0-9]{1,25})?",
                                                  fullmatch=True), st.integers(-3, 10**9))
_hosts = st.one_of(text, st.lists(st.from_regex(r"[a-z0-9\[\]:.]{0,8}(:[0-9]{1,12})?",
                                                fullmatch=True), max_size=4).map(",".join))


@FUZZ
@given(_nnodes)
def test_nnodes_parses_or_fails_cleanly(value: str | int) -> None:
    nnodes = clean(NNodes.parse, value)
    if nnodes is not None:
        assert 1 <= nnodes.min <= nnodes.max <= MAX_NODES


@FUZZ
@given(_hosts)
def test_hosts_parse_or_fail_cleanly(value: str) -> None:
    hosts = clean(parse_hosts, value)
    if hosts is not None:
        assert hosts and all(1 <= h.slots <= MAX_PROCS_PER_NODE for h in hosts)
        assert len({h.name for h in hosts}) == len(hosts)


@FUZZ
@given(st.lists(st.one_of(st.sampled_from(["--", "-m", "x.py", ""]), text), max_size=4))
def test_target_parses_or_fails_cleanly(argv: list[str]) -> None:
    target = clean(Target.parse, argv)
    if target is not None:
        assert target.raw()


@FUZZ
@given(st.integers(-2, 10**7), _nnodes, st.integers(-2, 10**7), st.integers(-2, 70000),
       st.integers(-2, 10**4), st.sampled_from(["static", "c10d", "etcd", ""]))
def test_launch_config_validates_or_fails_cleanly(nproc: int, nnodes: str, node_rank: int,
                                                  port: int, restarts: int, rdzv: str) -> None:
    parsed = clean(NNodes.parse, nnodes)
    if parsed is None:
        return
    cfg = clean(LaunchConfig, Target("x.py"), nproc, parsed, node_rank, "10.0.0.1", port,
                rdzv=rdzv, max_restarts=restarts)
    if cfg is not None:
        assert cfg.nproc_per_node >= 1 and 1 <= cfg.master_port <= 65535


@FUZZ
@given(st.integers(-2, 10**7), _hosts, st.integers(-2, 70000), st.booleans())
def test_mpirun_config_validates_or_fails_cleanly(np: int, hosts: str, port: int,
                                                  oversubscribe: bool) -> None:
    parsed = clean(parse_hosts, hosts) or ()
    clean(MpirunConfig, Target("x.py"), np, "10.0.0.1", port, hosts=parsed,
          oversubscribe=oversubscribe)


def test_absurd_node_and_process_counts_are_refused() -> None:
    # all accepted before: torchrun or mpirun would have started 10**7 processes on this host
    assert clean(NNodes.parse, "1:100001") is None
    assert clean(parse_hosts, "node1:200000") is None
    assert clean(LaunchConfig, Target("x.py"), 10**7, NNodes(1, 1), 0, "h", 29500) is None
    assert clean(MpirunConfig, Target("x.py"), 10**7, "h", 29500, oversubscribe=True) is None
    assert NNodes.parse("2:100000").max == MAX_NODES


def test_a_number_of_5000_digits_is_a_config_error() -> None:
    # int() refuses strings of more than 4300 digits with a ValueError, which escaped
    assert clean(NNodes.parse, "9" * 5000) is None
    assert clean(parse_hosts, "node1:" + "9" * 5000) is None


def test_an_option_is_never_taken_for_the_program() -> None:
    # ``ddpnet launch --dry-run --bogus -- x.py`` planned ``torchrun --no-python --bogus x.py``
    # and ``ddpnet sbatch --json --nodes 1 --`` rendered a script that runs ``--json``
    assert clean(Target.parse, ["--bogus", "--", "x.py"]) is None
    assert clean(Target.parse, ["--json"]) is None
    assert clean(Target.parse, ["-\n"]) is None  # the message stays one line
    assert Target.parse(["--", "-m", "pkg"]) == Target("pkg", (), module=True)

"""Property-based: launcher resolution on arbitrary environments gives a valid DistConfig or
one clean ConfigError (exit 2), never another exception."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ddpnet.env.hostlist import expand
from ddpnet.env.jobport import derive_port, parse_port_range
from ddpnet.env.resolve import resolve_config
from ddpnet.env.slurm import parse_tasks_per_node
from tests.fuzzing import FUZZ, clean, int_text, text

_INT_VARS = [
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
    "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODEID",
    "SLURM_NNODES", "SLURM_JOB_NUM_NODES", "SLURM_STEP_ID", "SLURM_JOB_ID",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_NODE_RANK", "PMI_RANK", "PMI_SIZE",
    "TORCHELASTIC_RUN_ID",
]
_TEXT_VARS = ["MASTER_ADDR", "SLURM_NODELIST", "SLURM_JOB_NODELIST", "SLURM_TASKS_PER_NODE",
              "SLURM_STEP_TASKS_PER_NODE", "SLURM_LAUNCH_NODE_IPADDR", "LSB_JOBID",
              "LSB_MCPU_HOSTS"]
#: small, plausible numbers reach the derivations; the wide ones reach the parsers
_small = st.integers(min_value=-2, max_value=9).map(str)
_value = st.one_of(_small, _small, int_text)
_hostlist = st.one_of(st.sampled_from(["n[1-4]", "n[3-1]", "a,b", "n[01-02],m1", "", "n[1-"]),
                      text)
_tpn = st.one_of(st.sampled_from(["2(x2)", "1", "4(x1),2", "2(x", "(x3)"]), text)

environs = st.fixed_dictionaries(
    {},
    optional={
        **{var: _value for var in _INT_VARS},
        "MASTER_ADDR": st.one_of(st.sampled_from(["", "10.0.0.1", "node1", "::1"]), text),
        "SLURM_NODELIST": _hostlist, "SLURM_JOB_NODELIST": _hostlist,
        "SLURM_TASKS_PER_NODE": _tpn, "SLURM_STEP_TASKS_PER_NODE": _tpn,
        **{var: text for var in _TEXT_VARS[5:]},
    },
)
overrides = st.fixed_dictionaries({}, optional={
    "rank": _value, "world_size": _value, "master_port": _value, "master_addr": text,
    "init_method": st.one_of(st.sampled_from(["env://", "tcp://h:1", "tcp://[::1]:0",
                                              "file:///tmp/x", "file://h/x"]), text),
})


@FUZZ
@given(environs, overrides)
def test_resolve_gives_a_config_or_a_clean_error(environ: dict[str, str],
                                                 given_: dict[str, str]) -> None:
    sourced = {k: (v, f"argument {k}") for k, v in given_.items()}
    cfg = clean(resolve_config, environ, sourced, dir_check=lambda path: None)
    if cfg is not None:
        assert 0 <= cfg.rank < cfg.world_size
        assert 0 <= cfg.local_rank < cfg.local_world_size <= cfg.world_size
        assert 0 <= cfg.node_rank < cfg.num_nodes
        assert 1 <= cfg.master_port <= 65535
        assert cfg.master_addr


@FUZZ
@given(st.one_of(_hostlist, st.from_regex(r"[a-z]{1,3}\[[0-9,\-]{0,12}\]", fullmatch=True)))
def test_hostlist_expands_or_fails_cleanly(hostlist: str) -> None:
    hosts = clean(expand, hostlist, "SLURM_NODELIST")
    if hosts is not None:
        assert hosts and all(h and not any(c.isspace() for c in h) for h in hosts)


@FUZZ
@given(st.one_of(_tpn, st.from_regex(r"-?[0-9]{1,12}(\(x-?[0-9]{1,12}\))?(,[0-9]\(x[0-9]\))?",
                                     fullmatch=True)))
def test_tasks_per_node_parses_or_fails_cleanly(value: str) -> None:
    counts = clean(parse_tasks_per_node, value, "SLURM_TASKS_PER_NODE")
    if counts is not None:
        assert counts and all(c >= 1 for c in counts)


@FUZZ
@given(text, st.tuples(st.integers(0, 70000), st.integers(0, 70000)))
def test_derived_port_is_a_port(job_id: str, port_range: tuple[int, int]) -> None:
    low, high = parse_port_range(f"{port_range[0]}\t{port_range[1]}")
    assert 1 <= low <= high <= 65535
    assert 1 <= derive_port(job_id, (low, high)) <= 65535


@FUZZ
@given(text)
def test_port_range_never_raises(value: str) -> None:
    low, high = parse_port_range(value)
    assert 1 <= low <= high <= 65535


_SLURM_STEP = {"SLURM_JOB_ID": "7", "SLURM_NODELIST": "n[1-2]", "SLURM_PROCID": "0",
               "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0", "SLURM_NODEID": "0"}


def test_zero_tasks_per_node_is_a_config_error_not_a_division_by_zero() -> None:
    # found by the fuzzer: local_world_size 0 reached ``rank % local_world_size``
    env = {**_SLURM_STEP, "SLURM_TASKS_PER_NODE": "0(x2)"}
    assert clean(resolve_config, env, {}) is None


def test_a_huge_repeat_is_refused_before_building_the_list() -> None:
    # ``1(x99999999999)`` used to build a list of 1e11 ints (memory exhausted)
    assert clean(parse_tasks_per_node, "1(x99999999999)", "SLURM_TASKS_PER_NODE") is None
    assert clean(parse_tasks_per_node, "2(x3),1", "SLURM_TASKS_PER_NODE") == (2, 2, 2, 1)


#: each launcher's own variables, so a fuzzed environment reaches its reader and derivations
_LAUNCHERS = {
    "torchrun": ["TORCHELASTIC_RUN_ID", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                 "GROUP_RANK", "GROUP_WORLD_SIZE"],
    "manual": ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "NNODES"],
    "slurm": ["SLURM_JOB_ID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_ID", "SLURM_LOCALID",
              "SLURM_NODEID", "SLURM_NNODES", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NUM_NODES"],
    "openmpi": ["OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                "OMPI_COMM_WORLD_LOCAL_SIZE"],
    "mpich": ["PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"],
    "mvapich": ["MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK",
                "MV2_COMM_WORLD_LOCAL_SIZE"],
    "lsf": ["LSB_JOBID", "JSM_NAMESPACE_RANK", "JSM_NAMESPACE_SIZE", "JSM_NAMESPACE_LOCAL_RANK",
            "JSM_NAMESPACE_LOCAL_SIZE"],
}
_EXTRA = {"MASTER_ADDR": st.one_of(st.sampled_from(["", "10.0.0.1", "n1", "::1"]), text),
          "MASTER_PORT": _value, "SLURM_NODELIST": _hostlist, "SLURM_TASKS_PER_NODE": _tpn,
          "LSB_MCPU_HOSTS": st.one_of(st.sampled_from(["l 1 a 2 b 2", "l 1 a", ""]), text),
          "RANK": _value, "WORLD_SIZE": _value}


@st.composite
def _launcher_environ(draw: st.DrawFn) -> dict[str, str]:
    names = _LAUNCHERS[draw(st.sampled_from(sorted(_LAUNCHERS)))]
    env = {name: draw(_value) for name in names if draw(st.integers(0, 5))}  # most present
    env.update(draw(st.fixed_dictionaries({}, optional=_EXTRA)))
    return env


@FUZZ
@given(_launcher_environ())
def test_every_launcher_resolves_or_fails_cleanly(environ: dict[str, str]) -> None:
    cfg = clean(resolve_config, environ, {}, dir_check=lambda path: None)
    if cfg is not None:
        assert 0 <= cfg.rank < cfg.world_size
        assert 0 <= cfg.local_rank < cfg.local_world_size <= cfg.world_size
        assert 0 <= cfg.node_rank < cfg.num_nodes and 1 <= cfg.master_port <= 65535


def test_any_job_id_derives_a_port() -> None:
    # found by the fuzzer: SLURM_JOB_ID="²" passed isdigit() and int() raised ValueError; a
    # 5000-digit id hit int()'s digit limit; a lone surrogate (undecodable environment byte)
    # could not be encoded for the hash
    for job_id in ("²", "9" * 5000, "\udc80", "123"):
        assert 1024 <= derive_port(job_id) <= 65535
    assert derive_port("123") == derive_port("123")
    env = {**_SLURM_STEP, "SLURM_JOB_ID": "²"}
    cfg = resolve_config(env, {})
    assert 1 <= cfg.master_port <= 65535

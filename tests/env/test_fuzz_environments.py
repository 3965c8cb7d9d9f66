"""Property-based: issue 21's parsers and launchers give a value or one clean ConfigError
(exit 2, one line, a hint) on any input, never another exception."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ddpnet.env.azureml import parse_master_node
from ddpnet.env.hostlist import compress
from ddpnet.env.pbs import parse_nodefile
from ddpnet.env.resolve import resolve_config
from ddpnet.env.sagemaker import parse_hosts
from ddpnet.env.sge import parse_pe_hostfile
from tests.fuzzing import FUZZ, clean, int_text, text

_lines = st.lists(st.one_of(text, st.sampled_from(["n1", "n1 4 all.q@n1 UNDEFINED", "",
                                                   "n2 0 q x", "n3 x", " "])), max_size=6)
_file = st.one_of(text, _lines.map("\n".join))
_json = st.one_of(text, st.sampled_from(['["algo-1","algo-2"]', "[]", '["a","a"]', '{"a":1}',
                                         '["a b"]', "[1]", '["algo-1"', "null", "[" * 3000]))


@FUZZ
@given(_file)
def test_nodefile_parses_or_fails_cleanly(content: str) -> None:
    slots = clean(parse_nodefile, content)
    if slots is not None:
        assert slots and all(s and not any(c.isspace() for c in s) for s in slots)
        compress(slots)  # ddpnet env's table shows them compressed: it must not raise


@FUZZ
@given(_file)
def test_pe_hostfile_parses_or_fails_cleanly(content: str) -> None:
    entries = clean(parse_pe_hostfile, content)
    if entries is not None:
        assert entries and all(n >= 1 for _, n in entries)
        assert len({h for h, _ in entries}) == len(entries)
        compress([h for h, _ in entries])


@FUZZ
@given(_json)
def test_sm_hosts_parse_or_fail_cleanly(value: str) -> None:
    hosts = clean(parse_hosts, value)
    if hosts is not None:
        assert hosts and len(set(hosts)) == len(hosts)
        compress(hosts)


@FUZZ
@given(st.one_of(text, st.sampled_from(["10.0.0.4:6105", "10.0.0.4", ":1", "[::1]:2", "h:"])))
def test_master_node_parses_or_fails_cleanly(value: str) -> None:
    found = clean(parse_master_node, value)
    if found is not None:
        assert found[0] and found[1] >= 1


_small = st.integers(min_value=-2, max_value=9).map(str)
_value = st.one_of(_small, _small, int_text, text)
#: each environment's own variables, so a fuzzed environment reaches its reader
_ENVIRONMENTS = {
    "pytorchjob": ["PET_NNODES", "PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_NODE_RANK",
                   "PET_NPROC_PER_NODE", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"],
    "trainjob": ["PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT",
                 "PET_NPROC_PER_NODE", "JOB_COMPLETION_INDEX"],
    "jobset": ["JOB_COMPLETION_INDEX", "WORLD_SIZE", "NNODES", "JOB_INDEX", "JOBSET_NAME",
               "REPLICATED_JOB_NAME", "RANK"],
    # found by this fuzzer: a node file line '[' reached hostlist's compress and raised
    "pbs": ["PBS_JOBID", "PBS_NODEFILE", "PBS_NODENUM", "PBS_TASKNUM", "PBS_VNODENUM"],
    "sge": ["JOB_ID", "SGE_TASK_ID", "PE_HOSTFILE", "NSLOTS"],
    "sagemaker": ["SM_HOSTS", "SM_CURRENT_HOST", "SM_NUM_GPUS", "SM_HOST_COUNT",
                  "SM_CURRENT_HOST_RANK", "SM_MASTER_ADDR", "SM_MASTER_PORT"],
    "azureml": ["AZ_BATCH_MASTER_NODE", "AZ_BATCHAI_MPI_MASTER_NODE", "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "RANK", "WORLD_SIZE"],
}
_SPECIAL = {"SM_HOSTS": _json, "SM_CURRENT_HOST": st.sampled_from(["algo-1", "algo-2", ""]),
            "AZ_BATCH_MASTER_NODE": st.sampled_from(["10.0.0.4:6105", "10.0.0.4", "h:0"]),
            "PBS_NODEFILE": st.sampled_from(["/f", "/g", ""]),
            "PE_HOSTFILE": st.sampled_from(["/f", "/g"])}


@st.composite
def _environ(draw: st.DrawFn) -> dict[str, str]:
    names = _ENVIRONMENTS[draw(st.sampled_from(sorted(_ENVIRONMENTS)))]
    return {name: draw(_SPECIAL.get(name, _value)) for name in names
            if draw(st.integers(0, 5))}  # most present


@FUZZ
@given(_environ(), _file)
def test_every_environment_resolves_or_fails_cleanly(environ: dict[str, str],
                                                     content: str) -> None:
    def read_file(path: str) -> str:  # /f holds the fuzzed file, anything else is missing
        if path != "/f":
            raise FileNotFoundError(2, "No such file or directory")
        return content

    cfg = clean(resolve_config, environ, {}, dir_check=lambda path: None, read_file=read_file)
    if cfg is not None:
        assert 0 <= cfg.rank < cfg.world_size
        assert 0 <= cfg.local_rank < cfg.local_world_size <= cfg.world_size
        assert 0 <= cfg.node_rank < cfg.num_nodes and 1 <= cfg.master_port <= 65535
        assert cfg.master_addr

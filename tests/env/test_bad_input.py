"""Every bad input gets exit 2, one ``ddpnet: error:`` line, a hint, and no traceback."""

from __future__ import annotations

import pytest

from ddpnet.env.resolve import resolve_config
from ddpnet.errors import ConfigError
from tests.conftest import RunCli, assert_user_error

SLURM = {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0", "SLURM_NODEID": "0",
         "SLURM_NNODES": "2"}

BAD: list[tuple[str, dict[str, str], list[str], str]] = [
    ("rank-not-integer", {"RANK": "one", "WORLD_SIZE": "2", "MASTER_ADDR": "a"}, [], "RANK"),
    ("negative-rank", {"RANK": "-1", "WORLD_SIZE": "2", "MASTER_ADDR": "a"}, [], "RANK=-1"),
    ("rank-ge-world", {"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "a"}, [],
     "not below world size"),
    ("world-zero", {"RANK": "0", "WORLD_SIZE": "0"}, [], "WORLD_SIZE=0"),
    ("local-rank-ge-local-world", {"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "2",
                                   "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "a"}, [],
     "local rank 2"),
    ("port-out-of-range", {"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "70000"}, [],
     "outside 1..65535"),
    ("port-flag-out-of-range", {}, ["--master-port", "0"], "outside 1..65535"),
    ("port-not-integer", {"MASTER_PORT": "http"}, [], "MASTER_PORT"),
    # the hint's example must itself be valid (it used to suggest WORLD_SIZE=0, MASTER_PORT=0)
    ("world-not-integer", {"RANK": "0", "WORLD_SIZE": "two"}, [], "e.g. WORLD_SIZE=1)"),
    ("port-flag-not-integer", {}, ["--master-port", "x"], "e.g. --master-port=29500)"),
    ("malformed-hostlist", {**SLURM, "SLURM_JOB_NODELIST": "gpu[01-"}, [], "hostlist"),
    ("reversed-range-hostlist", {**SLURM, "SLURM_JOB_NODELIST": "gpu[05-01]"}, [],
     "hostlist"),
    ("malformed-init-method", {}, ["--init-method", "tcp://host"], "no port"),
    # every address form a user types (issue 42): MASTER_ADDR, --master-addr, tcp:// URLs
    ("master-addr-bracketed", {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "[fd00::1]"},
     [], "without brackets: fd00::1"),
    ("master-addr-with-port", {"RANK": "0", "WORLD_SIZE": "2",
                               "MASTER_ADDR": "10.0.0.1:29500"}, [], "MASTER_PORT=29500"),
    ("master-addr-v6-with-port", {"RANK": "0", "WORLD_SIZE": "2",
                                  "MASTER_ADDR": "[fd00::1]:29500"}, [], "holds a port"),
    ("master-addr-bad-v4", {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.256"},
     [], "not an IPv4 address"),
    ("master-addr-bad-v6", {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "fd00:::1"},
     [], "not an IPv6 address"),
    ("master-addr-bad-zone", {"RANK": "0", "WORLD_SIZE": "2",
                              "MASTER_ADDR": "fe80::1%eth/0"}, [], "not an interface name"),
    ("master-addr-zone-on-v4", {"RANK": "0", "WORLD_SIZE": "2",
                                "MASTER_ADDR": "10.0.0.1%eth0"}, [], "only an IPv6"),
    ("master-addr-flag-bad-name", {}, ["--master-addr", "node_01/x"], "not allowed"),
    ("init-v6-without-brackets", {}, ["--init-method", "tcp://fd00::1:29500"],
     "write [fd00::1]:29500"),
    ("init-v6-bad-zone", {}, ["--init-method", "tcp://[fe80::1%25eth!0]:29500"],
     "not an interface name"),
    ("init-v6-no-port", {}, ["--init-method", "tcp://[fd00::1]"], "no port"),
    ("unknown-init-scheme", {}, ["--init-method", "udp://h:1"], "unknown scheme"),
    ("relative-file-init", {}, ["--init-method", "file://relative/x"], "file URL"),
    ("missing-file-dir", {}, ["--init-method", "file:///nonexistent-ddpnet/x"],
     "does not exist"),
    ("mpi-multinode-without-master", {
        "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4",
        "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, [],
     "mpirun -x MASTER_ADDR"),
    ("rank-contradicts-slurm", {**SLURM, "SLURM_PROCID": "1", "RANK": "0"}, [],
     "contradicts SLURM_PROCID"),
    ("world-contradicts-mpi", {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
                               "WORLD_SIZE": "4"}, [], "contradicts OMPI_COMM_WORLD_SIZE"),
    ("rank-without-world", {"RANK": "0"}, [], "WORLD_SIZE is not"),
    ("nodelist-count-mismatch", {**SLURM, "SLURM_JOB_NODELIST": "a,b,c"}, [],
     "node list has 3 hosts"),
    ("bad-tasks-per-node", {**SLURM, "SLURM_TASKS_PER_NODE": "2(x"}, [], "task count"),
    ("lsf-bad-mcpu", {"LSB_JOBID": "1", "JSM_NAMESPACE_RANK": "0", "JSM_NAMESPACE_SIZE": "1",
                      "LSB_MCPU_HOSTS": "a 1 b"}, [], "LSB_MCPU_HOSTS"),
    # a bracket in a host name made ``ddpnet env``'s table (hostlist compress) traceback
    ("lsf-bracket-host", {"LSB_JOBID": "1", "JSM_NAMESPACE_RANK": "0",
                          "JSM_NAMESPACE_SIZE": "1", "LSB_MCPU_HOSTS": "l 1 a[ 2"}, [],
     "is not a host name"),
    # issue 21's environments: files that are not there, values that do not parse
    ("pbs-missing-nodefile", {"PBS_JOBID": "1.srv",
                              "PBS_NODEFILE": "/nonexistent-ddpnet/aux/1.srv"}, [],
     "PBS_NODEFILE=/nonexistent-ddpnet/aux/1.srv: cannot read it"),
    ("sge-missing-pe-hostfile", {"JOB_ID": "7", "SGE_TASK_ID": "undefined",
                                 "PE_HOSTFILE": "/nonexistent-ddpnet/pe_hostfile"}, [],
     "PE_HOSTFILE=/nonexistent-ddpnet/pe_hostfile: cannot read it"),
    ("sagemaker-hosts-not-json", {"SM_HOSTS": "[algo-1", "SM_CURRENT_HOST": "algo-1"}, [],
     "SM_HOSTS='[algo-1' is not JSON"),
    ("azureml-master-without-port", {"AZ_BATCH_MASTER_NODE": "10.0.0.4",
                                     "OMPI_COMM_WORLD_RANK": "0",
                                     "OMPI_COMM_WORLD_SIZE": "2"}, [], "is not ip:port"),
    ("job-completion-index-not-number", {"JOB_COMPLETION_INDEX": "one", "WORLD_SIZE": "2"},
     [], "JOB_COMPLETION_INDEX='one' is not an integer"),
    ("indexed-job-without-world", {"JOB_COMPLETION_INDEX": "1"}, [], "add env WORLD_SIZE"),
    ("pytorchjob-elastic-without-torchrun", {
        "PET_NNODES": "1:4", "PET_NPROC_PER_NODE": "auto",
        "PET_RDZV_ENDPOINT": "j-worker-0:23456"}, [], "torchrun"),
    ("pytorchjob-bad-nproc", {
        "PET_NNODES": "2", "PET_NPROC_PER_NODE": "four", "PET_MASTER_ADDR": "j-master-0",
        "MASTER_ADDR": "j-master-0", "RANK": "0", "WORLD_SIZE": "2"}, [], "PET_NPROC_PER_NODE"),
    ("trainjob-bad-node-rank", {
        "PET_NNODES": "2", "PET_NODE_RANK": "x", "PET_MASTER_ADDR": "t-trainer-node-0-0.t",
        "JOB_COMPLETION_INDEX": "0"}, [], "PET_NODE_RANK"),
]


@pytest.mark.parametrize(("environ", "flags", "needle"), [b[1:] for b in BAD],
                         ids=[b[0] for b in BAD])
def test_bad_input_pure(environ: dict[str, str], flags: list[str], needle: str) -> None:
    overrides = {flags[i][2:].replace("-", "_"): (flags[i + 1], flags[i])
                 for i in range(0, len(flags), 2)}
    with pytest.raises(ConfigError) as info:
        resolve_config(environ, overrides)
    assert needle in f"{info.value} {info.value.hint}"
    assert info.value.hint


@pytest.mark.parametrize(("environ", "flags", "needle"),
                         [b[1:] for b in BAD if b[0] in {
                             "rank-not-integer", "rank-ge-world", "malformed-hostlist",
                             "malformed-init-method", "mpi-multinode-without-master",
                             "master-addr-bracketed", "master-addr-with-port",
                             "master-addr-bad-zone", "init-v6-without-brackets",
                             "port-flag-out-of-range", "rank-contradicts-slurm",
                             "pbs-missing-nodefile", "sge-missing-pe-hostfile",
                             "sagemaker-hosts-not-json", "azureml-master-without-port",
                             "job-completion-index-not-number", "lsf-bracket-host"}])
def test_bad_input_cli(run_cli: RunCli, environ: dict[str, str], flags: list[str],
                       needle: str) -> None:
    proc = run_cli("env", *flags, env=environ)
    assert_user_error(proc, 2, needle)
    assert proc.stdout == ""


def test_unknown_flag_is_a_usage_error(run_cli: RunCli) -> None:
    assert_user_error(run_cli("env", "--no-such-flag"), 2, "--no-such-flag")


def test_debug_shows_the_traceback(run_cli: RunCli) -> None:
    proc = run_cli("--debug", "env", env={"RANK": "x", "WORLD_SIZE": "2"})
    assert proc.returncode == 2
    assert "Traceback" in proc.stderr and "hint:" in proc.stderr

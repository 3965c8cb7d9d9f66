"""``check --hostfile`` planned without SSH: one rank per host with the rank variables, rank 0
printing the verdict, and the result when rank 0 never printed one."""

from __future__ import annotations

import shlex

from ddpnet.check.hosts import HostsCheck, host_jobs, rank_env
from ddpnet.check.options import CheckOptions
from ddpnet.launch.command import Host
from ddpnet.launch.ssh import HostProblem
from ddpnet.launch.sshrun import HostExit, JobResult

HOSTS = (Host("a", 8), Host("b", 1), Host("c", 1))


def test_rank_env_one_rank_per_host() -> None:
    assert rank_env(HOSTS, 2, 29600) == {
        "RANK": "2", "WORLD_SIZE": "3", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
        "NODE_RANK": "2", "NNODES": "3", "MASTER_ADDR": "a", "MASTER_PORT": "29600"}


def test_jobs_rank0_prints_the_verdict_the_rest_their_json() -> None:
    opts = CheckOptions(report_path="r.html")
    jobs = host_jobs(HOSTS, opts, port=29600, python="/py", common={"PYTHONPATH": "/s"},
                     cwd="/w", as_json=False)
    words = [shlex.split(j.remote) for j in jobs]
    assert [j.host for j in jobs] == ["a", "b", "c"]
    assert words[0][-1] == "--human" and words[1][-1] != "--human"
    assert "RANK=1" in words[1] and "MASTER_ADDR=a" in words[1] and "PYTHONPATH=/s" in words[1]
    rank0 = CheckOptions.from_json(words[0][-2])
    other = CheckOptions.from_json(words[1][-1])
    assert rank0.report_path == "r.html" and other.report_path is None
    assert rank0.matrix is True and rank0.local is None
    json_jobs = host_jobs(HOSTS, opts, port=1, python="/py", common={}, cwd="/w",
                          as_json=True)
    assert shlex.split(json_jobs[0].remote)[-1] != "--human"


def test_result_without_a_verdict_names_rank0s_ssh_problem() -> None:
    problem = HostProblem("a", "ssh-unreachable", "No route to host")
    job = JobResult((HostExit("a", 255, False, problem), HostExit("b", 1, True)), ())
    result = HostsCheck("a", job)
    assert result.exit_code == 1
    cause = result.to_dict()["causes"][0]
    assert cause["id"] == "ssh-unreachable" and cause["hosts"] == ["a"]
    assert HostsCheck("a", JobResult((HostExit("a", 0, False),), ()),
                      {"verdict": "pass"}).to_dict() == {"verdict": "pass"}
    assert HostsCheck("a", JobResult((HostExit("a", 130, False),), (2,))).exit_code == 130

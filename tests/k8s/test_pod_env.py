"""The environment each rendered pod gets (our variables, the operator's or the Job
controller's, the kubelet's field and ``$(VAR)`` expansion: tests/k8s/kubelet.py) gives, through
ddpnet's own resolver, the intended rank, world size and master for every pod index: in the
check's init container (``ddpnet.resolve``'s manual launcher) and in the training container
(``ddpnet launch``'s plan, run for real with ``--dry-run``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ddpnet.env.resolve import resolve_config
from ddpnet.k8s.options import K8sOptions
from ddpnet.k8s.preflight import check_environ
from ddpnet.k8s.render import render
from ddpnet.launch.command import Target
from tests.conftest import RunCli
from tests.k8s.kubelet import Pod, pods

NODES, GPUS = 3, 2
EXPECTED = {  # kind -> (the check's MASTER_ADDR, training's MASTER_ADDR)
    "pytorchjob": ("job-rdzv", "job-master-0"),
    "jobset": ("job-node-0-0.job", "job-node-0-0.job"),
}


def rendered(kind: str) -> list[Pod]:
    opts = K8sOptions(Target.parse(["train.py", "--epochs", "2"]), NODES, GPUS, "img:1",
                      name="job", kind=kind, iface="net1")
    return pods(render(opts))


@pytest.mark.parametrize("kind", list(EXPECTED))
def test_pods_are_numbered_like_the_controllers_do(kind: str) -> None:
    assert [p.node for p in rendered(kind)] == list(range(NODES))


@pytest.mark.parametrize("kind", list(EXPECTED))
def test_the_check_resolves_rank_world_and_master_per_pod(kind: str) -> None:
    for pod in rendered(kind):
        environ = check_environ(pod.environ(pod.init, init=True))
        cfg = resolve_config(environ, {})
        assert cfg.launcher == "manual"
        assert (cfg.rank, cfg.world_size) == (pod.node, NODES), pod.node
        assert (cfg.master_addr, cfg.master_port) == (EXPECTED[kind][0], 29500)
        assert environ["GLOO_SOCKET_IFNAME"] == environ["NCCL_SOCKET_IFNAME"] == "net1"


@pytest.mark.parametrize("kind", list(EXPECTED))
def test_the_check_command_is_the_preflight_then_ddpnet_check(kind: str) -> None:
    pod = rendered(kind)[1]
    assert pod.command(pod.init, init=True) == [
        "python3", "-m", "ddpnet.k8s.preflight", "300", "--join-timeout", "300"]


def test_the_operators_world_size_counts_ranks_not_pods() -> None:
    for pod in rendered("pytorchjob"):
        assert pod.environ(pod.main)["WORLD_SIZE"] == str(NODES * GPUS)


def _launch_plan(run_cli: RunCli, pod: Pod) -> dict[str, Any]:
    """The training container's ``ddpnet launch``, run with ``--dry-run --json`` in its own
    environment: the plan for this pod."""
    argv = pod.command(pod.main)
    assert argv[:4] == ["python3", "-m", "ddpnet", "launch"]
    cut = argv.index("--")
    proc = run_cli(*argv[3:cut], "--dry-run", "--json", *argv[cut:],
                   env=pod.environ(pod.main))
    assert proc.returncode == 0, proc.stderr
    plan: dict[str, Any] = json.loads(proc.stdout)
    return plan


@pytest.mark.parametrize("kind", list(EXPECTED))
def test_training_runs_each_pods_ranks_against_the_master(kind: str, run_cli: RunCli) -> None:
    for pod in rendered(kind):
        plan = _launch_plan(run_cli, pod)
        (node,) = plan["nodes"]
        assert node["node_rank"] == pod.node
        assert node["ranks"] == list(range(pod.node * GPUS, (pod.node + 1) * GPUS))
        argv = node["argv"]
        assert argv[argv.index("--master-addr") + 1] == EXPECTED[kind][1]
        assert argv[argv.index("--master-port") + 1] == "29500"
        assert argv[argv.index("--nnodes") + 1] == str(NODES)
        assert argv[-3:] == ["train.py", "--epochs", "2"]
        assert node["env"]["NCCL_SOCKET_IFNAME"] == "net1"
        # (plan["warnings"] is about this test host, which is not the master pod)

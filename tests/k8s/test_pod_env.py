"""The environment each rendered pod gets (our variables, the operator's or the Job
controller's, the kubelet's field and ``$(VAR)`` expansion: tests/k8s/kubelet.py) gives, through
ddpnet's own resolver, the intended rank, world size and master for every pod index: in the
check's init container (``ddpnet.resolve``'s manual launcher) and in the training container
(torchrun as ``ddpnet launch`` would start it, and run for real: each worker's own
``ddpnet.resolve()``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ddpnet.env.resolve import resolve_config
from ddpnet.k8s.options import K8sOptions
from ddpnet.k8s.preflight import check_environ
from ddpnet.k8s.render import render
from ddpnet.launch.command import LaunchConfig, NNodes, Target, build_torchrun
from ddpnet.net.ports import free_port
from tests.conftest import clean_environ
from tests.k8s.kubelet import Pod, expand, pods

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
        # manual today; once environments are detected (issue 21), a JobSet pod's is "jobset"
        # (JOB_COMPLETION_INDEX): the exported RANK/WORLD_SIZE win there too
        assert cfg.launcher in ("manual", kind)
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


def _expected_torchrun(kind: str, node: int) -> list[str]:
    """What ``ddpnet launch --nnodes 3 --node-rank NODE --master-addr ...`` starts (its own
    builder), with the image's python."""
    cfg = LaunchConfig(Target.parse(["train.py", "--epochs", "2"]), GPUS, NNodes(NODES, NODES),
                       node, EXPECTED[kind][1], 29500, python="python3")
    return build_torchrun(cfg)[0]


@pytest.mark.parametrize("kind", list(EXPECTED))
def test_training_is_what_ddpnet_launch_would_start_on_each_pod(kind: str) -> None:
    for pod in rendered(kind):
        assert pod.command(pod.main) == _expected_torchrun(kind, pod.node), pod.node


@pytest.mark.slow
def test_torchrun_in_two_pods_gives_every_rank_its_place(tmp_path: Path) -> None:
    """The rendered training command of each pod of a PyTorchJob, run for real (torchrun,
    static rendezvous; the master's name replaced by 127.0.0.1, since the pods share this
    host): every worker's ``ddpnet.resolve()`` says launcher torchrun, its rank and the world."""
    script = tmp_path / "where.py"
    script.write_text(  # a file per rank: the workers of one pod share the agent's stdout
        "import json, pathlib, sys, ddpnet\n"
        "c = ddpnet.resolve()\n"
        "out = [c.launcher, c.rank, c.world_size, c.node_rank, c.master_addr]\n"
        "pathlib.Path(sys.argv[1], f'rank{c.rank}.json').write_text(json.dumps(out))\n")
    opts = K8sOptions(Target.parse([str(script), str(tmp_path)]), 2, 2, "img:1", name="job",
                      iface="lo", master_port=free_port())
    procs = []
    for pod in pods(render(opts)):
        env = {**pod.environ(pod.main), "MASTER_ADDR": "127.0.0.1"}
        argv = [sys.executable, *[expand(a, env) for a in pod.main["command"]][1:]]
        procs.append(subprocess.Popen(argv, env=clean_environ(env), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    seen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    assert seen == [["torchrun", r, 4, r // 2, "127.0.0.1"] for r in range(4)]


def test_ddpnet_env_in_a_jobset_training_container_resolves() -> None:
    """``kubectl exec POD -- ddpnet env`` outside torchrun: the master from our MASTER_ADDR;
    with JobSet detection (issue 21) the pod's index and the pod count (NNODES)."""
    for pod in rendered("jobset"):
        cfg = resolve_config(pod.environ(pod.main), {})
        assert (cfg.master_addr, cfg.master_port) == ("job-node-0-0.job", 29500)
        if cfg.launcher == "jobset":
            assert (cfg.rank, cfg.world_size) == (pod.node, NODES)
        else:
            assert cfg.launcher == "local"

"""Rendering is pure: options in, the objects out, for both kinds."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from ddpnet.k8s import names
from ddpnet.k8s.options import K8sOptions
from ddpnet.k8s.render import render, to_yaml
from ddpnet.launch.command import Target


def opts(**kw: Any) -> K8sOptions:
    base: dict[str, Any] = {"target": Target.parse(["train.py", "--epochs", "3"]), "nodes": 3,
                            "gpus_per_node": 4, "image": "reg.example/train:1", "name": "gpt"}
    return K8sOptions(**{**base, **kw})


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_pytorchjob_is_a_service_then_the_job_with_master_and_workers() -> None:
    svc, job = render(opts())
    assert (svc["kind"], svc["apiVersion"]) == ("Service", "v1")
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["metadata"]["name"] == "gpt-rdzv"
    assert (job["kind"], job["apiVersion"]) == ("PyTorchJob", "kubeflow.org/v1")
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert (specs["Master"]["replicas"], specs["Worker"]["replicas"]) == (1, 2)
    assert job["spec"]["nprocPerNode"] == "4"
    master_labels = specs["Master"]["template"]["metadata"]["labels"]
    # the service selects the master pod only
    assert svc["spec"]["selector"].items() <= master_labels.items()
    assert not svc["spec"]["selector"].items() <= \
        specs["Worker"]["template"]["metadata"]["labels"].items()


def test_pytorchjob_containers_follow_the_operator_conventions() -> None:
    _, job = render(opts())
    for rtype, offset in (("Master", "0"), ("Worker", "1")):
        spec = job["spec"]["pytorchReplicaSpecs"][rtype]["template"]["spec"]
        (main,) = spec["containers"]
        assert main["name"] == "pytorch"
        assert main["ports"] == [{"name": "pytorchjob-port", "containerPort": 29500}]
        assert main["command"][:3] == ["python3", "-m", "torch.distributed.run"]
        assert "$(PET_NODE_RANK)" in main["command"]
        (check,) = spec["initContainers"]
        env = env_of(check)
        assert env["MASTER_ADDR"] == "gpt-rdzv" and env["WORLD_SIZE"] == "3"
        assert env["DDPNET_RANK_OFFSET"] == offset
        assert env["DDPNET_POD_INDEX"] == {"fieldRef": {"fieldPath": names.PYTORCHJOB_INDEX}}


def test_jobset_is_one_indexed_job_with_dns_hostnames() -> None:
    (js,) = render(opts(kind="jobset"))
    assert (js["kind"], js["apiVersion"]) == ("JobSet", "jobset.x-k8s.io/v1alpha2")
    assert js["spec"]["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    (rjob,) = js["spec"]["replicatedJobs"]
    job = rjob["template"]["spec"]
    assert (job["parallelism"], job["completions"], job["completionMode"]) == (3, 3, "Indexed")
    pod = job["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    env = env_of(pod["containers"][0])
    assert env["MASTER_ADDR"] == "gpt-node-0-0.gpt"
    assert env["NODE_RANK"] == {"fieldRef": {"fieldPath": names.JOBSET_INDEX}}
    assert env["NNODES"] == "3"
    assert env_of(pod["initContainers"][0])["MASTER_ADDR"] == "gpt-node-0-0.gpt"


@pytest.mark.parametrize("kind", ["pytorchjob", "jobset"])
def test_every_pod_has_shm_gpus_and_the_interface(kind: str) -> None:
    for template in _templates(render(opts(kind=kind, shm_size="16Gi", iface="net1"))):
        spec = template["spec"]
        assert spec["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory",
                                                                 "sizeLimit": "16Gi"}}]
        for container in (*spec["containers"], *spec["initContainers"]):
            assert container["resources"] == {"limits": {"nvidia.com/gpu": "4"}}
            assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
            env = env_of(container)
            assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "net1"
            assert env["TP_SOCKET_IFNAME"] == "net1"


def _templates(objects: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    job = objects[-1]
    if job["kind"] == "PyTorchJob":
        return [r["template"] for r in job["spec"]["pytorchReplicaSpecs"].values()]
    return [r["template"]["spec"]["template"] for r in job["spec"]["replicatedJobs"]]


def test_one_node_pytorchjob_has_no_workers() -> None:
    _, job = render(opts(nodes=1))
    assert list(job["spec"]["pytorchReplicaSpecs"]) == ["Master"]


def test_no_check_drops_the_init_container_and_the_service() -> None:
    (job,) = render(opts(check=False))
    assert job["kind"] == "PyTorchJob"
    assert all("initContainers" not in t["spec"] for t in _templates((job,)))
    (js,) = render(opts(kind="jobset", check=False))
    assert all("initContainers" not in t["spec"] for t in _templates((js,)))


def test_cpu_pods_ask_for_no_gpu_and_run_one_rank() -> None:
    o = opts(gpus_per_node=0)
    assert (o.nproc_per_node, o.world_size) == (1, 3)
    _, job = render(o)
    assert job["spec"]["nprocPerNode"] == "1"
    assert all("resources" not in c for t in _templates((job,)) for c in t["spec"]["containers"])


def test_namespace_goes_on_every_object() -> None:
    for obj in (*render(opts(namespace="ml")), *render(opts(kind="jobset", namespace="ml"))):
        assert obj["metadata"]["namespace"] == "ml"
    assert all("namespace" not in o["metadata"] for o in render(opts()))


def test_the_script_and_its_arguments_reach_the_kubelet_unexpanded() -> None:
    o = opts(target=Target.parse(["-m", "pkg.train", "--tag", "$(HOME)", "--lr", "0.1"]))
    _, job = render(o)
    cmd = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0][
        "command"]
    assert cmd[cmd.index("--max-restarts") + 2:] == [
        "-m", "pkg.train", "--tag", "$$(HOME)", "--lr", "0.1"]


def test_master_port_reaches_service_ports_and_check() -> None:
    svc, job = render(opts(master_port=23456))
    assert svc["spec"]["ports"][0]["port"] == 23456
    spec = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert spec["containers"][0]["ports"][0]["containerPort"] == 23456
    assert env_of(spec["initContainers"][0])["MASTER_PORT"] == "23456"


def test_check_timeout_bounds_the_wait_and_the_join() -> None:
    (js,) = render(opts(kind="jobset", check_timeout=120))
    cmd = _templates((js,))[0]["spec"]["initContainers"][0]["command"]
    assert cmd == ["python3", "-m", "ddpnet.k8s.preflight", "120", "--join-timeout", "120"]


@pytest.mark.parametrize("kind", ["pytorchjob", "jobset"])
def test_yaml_text_loads_back_to_the_objects(kind: str) -> None:
    objects = render(opts(kind=kind))
    text = to_yaml(objects, "# head\n")
    assert text.startswith("# head\n---\n")
    assert tuple(yaml.safe_load_all(text)) == objects


def test_rendering_is_deterministic() -> None:
    assert render(opts()) == render(opts())
    assert to_yaml(render(opts(kind="jobset"))) == to_yaml(render(opts(kind="jobset")))

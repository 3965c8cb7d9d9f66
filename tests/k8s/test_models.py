"""Every rendered object loads into the official models and round-trips: the kubernetes client
(Service, a JobSet's Job template), the Kubeflow training SDK (PyTorchJob), JobSet's CRD schema
(its skeleton: no JobSet Python SDK is published). And the check can fail: mutated objects are
refused."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from ddpnet.k8s import models
from ddpnet.k8s.options import K8sOptions
from ddpnet.k8s.render import render
from ddpnet.launch.command import Target

kubernetes = pytest.importorskip("kubernetes", reason="pip install 'ddpnet[k8s]'")
training = pytest.importorskip("kubeflow.training", reason="pip install 'ddpnet[k8s]'")


def opts(**kw: Any) -> K8sOptions:
    base: dict[str, Any] = {"target": Target.parse(["train.py", "--lr", "0.1"]), "nodes": 4,
                            "gpus_per_node": 8, "image": "img:1", "name": "llm"}
    return K8sOptions(**{**base, **kw})


VARIANTS = [
    {}, {"nodes": 1}, {"gpus_per_node": 0}, {"check": False}, {"namespace": "ml"},
    {"kind": "jobset"}, {"kind": "jobset", "nodes": 1}, {"kind": "jobset", "check": False},
    {"kind": "jobset", "gpus_per_node": 0, "namespace": "ml", "iface": "net1"},
]


def _deserialize(data: dict[str, Any], klass: str) -> Any:
    client = training.ApiClient()  # resolves Kubeflow and kubernetes models alike
    return client._ApiClient__deserialize(data, klass)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: json.dumps(v, sort_keys=True))
def test_every_variant_is_valid(variant: dict[str, Any]) -> None:
    assert models.problems(render(opts(**variant))) == []


def test_service_round_trips_through_V1Service() -> None:
    svc, _ = render(opts())
    client = kubernetes.client.ApiClient()
    model = client._ApiClient__deserialize(svc, "V1Service")
    assert isinstance(model, kubernetes.client.V1Service)
    assert model.spec.cluster_ip == "None" and model.spec.publish_not_ready_addresses is True
    assert client.sanitize_for_serialization(model) == svc


def test_pytorchjob_round_trips_through_the_kubeflow_model() -> None:
    _, job = render(opts())
    model = _deserialize(job, "KubeflowOrgV1PyTorchJob")
    assert isinstance(model, training.KubeflowOrgV1PyTorchJob)
    worker = model.spec.pytorch_replica_specs["Worker"]
    assert worker.replicas == 3 and worker.restart_policy == "Never"
    pod = worker.template.spec
    assert isinstance(pod, kubernetes.client.V1PodSpec)
    assert pod.init_containers[0].name == "ddpnet-check"
    assert pod.containers[0].resources.limits == {"nvidia.com/gpu": "8"}
    assert pod.volumes[0].empty_dir.medium == "Memory"
    assert model.spec.run_policy.clean_pod_policy == "None"
    assert training.ApiClient().sanitize_for_serialization(model) == job


def test_jobset_job_template_round_trips_through_V1JobTemplateSpec() -> None:
    (js,) = render(opts(kind="jobset"))
    template = js["spec"]["replicatedJobs"][0]["template"]
    model = _deserialize(template, "V1JobTemplateSpec")
    assert model.spec.completion_mode == "Indexed" and model.spec.completions == 4
    assert model.spec.template.spec.subdomain is None  # JobSet sets it (to the JobSet's name)
    assert kubernetes.client.ApiClient().sanitize_for_serialization(model) == template


def test_the_shipped_jobset_schema_is_the_crd_v1alpha2() -> None:
    crd = json.loads(models.SCHEMA.read_text())
    assert (crd["group"], crd["version"], crd["kind"], crd["served"]) == (
        "jobset.x-k8s.io", "v1alpha2", "JobSet", True)
    spec = crd["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert {"replicatedJobs", "network", "failurePolicy"} <= set(spec)
    assert set(spec["network"]["properties"]) >= {"enableDNSHostnames",
                                                  "publishNotReadyAddresses"}


# ---- the check refuses what it should -------------------------------------------------------

def _mutated(kind: str, change: Any) -> list[str]:
    objects = copy.deepcopy(render(opts(kind=kind)))
    change(objects[-1])
    return models.problems(objects)


def _main(job: dict[str, Any]) -> dict[str, Any]:
    if job["kind"] == "PyTorchJob":
        return job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    return job["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"][0]


@pytest.mark.parametrize("kind", ["pytorchjob", "jobset"])
def test_a_misspelt_container_field_is_refused(kind: str) -> None:
    found = _mutated(kind, lambda j: _main(j).update(volumeMount=[]))
    assert any("volumeMount: dropped by the model" in p for p in found), found


@pytest.mark.parametrize("kind", ["pytorchjob", "jobset"])
def test_an_env_value_of_the_wrong_type_is_refused(kind: str) -> None:
    found = _mutated(kind, lambda j: _main(j)["env"].append({"name": "X", "value": 1}))
    assert any("rendered 1, the model has '1'" in p for p in found), found


@pytest.mark.parametrize("kind", ["pytorchjob", "jobset"])
def test_a_container_without_a_name_is_refused(kind: str) -> None:
    found = _mutated(kind, lambda j: _main(j).pop("name"))
    assert any("`name`, must not be `None`" in p for p in found), found


def test_a_pytorchjob_without_run_policy_is_refused() -> None:
    found = _mutated("pytorchjob", lambda j: j["spec"].pop("runPolicy"))
    assert any("run_policy" in p for p in found), found


def test_a_misplaced_pytorchjob_field_is_refused() -> None:
    found = _mutated("pytorchjob", lambda j: j["spec"].update(nproc_per_node="8"))
    assert any("nproc_per_node: dropped" in p for p in found), found


def test_jobset_skeleton_errors_are_refused() -> None:
    assert any("enableDNSHostName: not a field" in p for p in _mutated(
        "jobset", lambda j: j["spec"]["network"].update(enableDNSHostName=True)))
    assert any("replicas: -1 is below 0" in p for p in _mutated(
        "jobset", lambda j: j["spec"]["replicatedJobs"][0].update(replicas=-1)))
    assert any("name: required" in p for p in _mutated(
        "jobset", lambda j: j["spec"]["replicatedJobs"][0].pop("name")))
    assert any("is not of type boolean" in p for p in _mutated(
        "jobset", lambda j: j["spec"]["network"].update(enableDNSHostnames="true")))
    assert _mutated("jobset", lambda j: j.update(apiVersion="jobset.x-k8s.io/v1")) == [
        "JobSet jobset.x-k8s.io/v1: no model to check it against"]
    assert any("completionMode" in p for p in _mutated(
        "jobset", lambda j: j["spec"]["replicatedJobs"][0]["template"]["spec"].update(
            completionMode=7)))


def test_an_unknown_kind_is_named() -> None:
    assert models.problems(({"apiVersion": "v9", "kind": "Thing"},)) == [
        "Thing v9: no model to check it against"]

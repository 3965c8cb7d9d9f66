"""Options in, the job's Kubernetes objects out, as plain dicts (pure); then YAML text.

PyTorchJob (kubeflow.org/v1): a Master and N-1 Workers. The operator exports MASTER_ADDR
(``<job>-master-0``, its own headless service, which lists the master only once it is
ready), MASTER_PORT, PET_NODE_RANK and WORLD_SIZE into the training container, not into init
containers; so the check's init containers get their own variables and a headless service of
ours that publishes the master pod's address before it is ready (its init container is still
running the check then). JobSet (jobset.x-k8s.io/v1alpha2): one replicated job, an Indexed
Job of N pods; JobSet's own headless service (``network.enableDNSHostnames``) names them and
publishes not-ready addresses, so no service of ours is needed.
"""

from __future__ import annotations

from typing import Any

from ddpnet.k8s import names
from ddpnet.k8s.options import K8sOptions
from ddpnet.k8s.pod import CHECK_CONTAINER, Role, env, field_env, pod_template

PYTORCHJOB_API = "kubeflow.org/v1"
JOBSET_API = "jobset.x-k8s.io/v1alpha2"


def render(opts: K8sOptions) -> tuple[dict[str, Any], ...]:
    """The objects to apply, in order (the service before the pods that resolve it)."""
    if opts.kind == "jobset":
        return (jobset(opts),)
    if opts.check:
        return (service(opts), pytorchjob(opts))
    return (pytorchjob(opts),)


def _metadata(opts: K8sOptions, name: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if opts.namespace:
        meta["namespace"] = opts.namespace
    meta["labels"] = {names.JOB_LABEL: opts.name}
    return meta


def service(opts: K8sOptions) -> dict[str, Any]:
    """Headless (no cluster IP: DNS answers with the pod's own address) and publishing
    not-ready addresses: the master pod is not ready while its init container runs."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(opts, names.service(opts.name)),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {names.JOB_LABEL: opts.name, names.ROLE_LABEL: "master"},
            "ports": [{"name": "rdzv", "port": opts.master_port,
                       "targetPort": opts.master_port}],
        },
    }


def _pytorchjob_role(opts: K8sOptions, replica: str) -> Role:
    labels = {names.JOB_LABEL: opts.name}
    if replica == "master":
        labels[names.ROLE_LABEL] = "master"
    return Role(labels=labels, node_rank="$(PET_NODE_RANK)", train_env=(),
                index_path=names.PYTORCHJOB_INDEX, rank_offset=0 if replica == "master" else 1,
                check_master=names.service(opts.name), port_name=names.PYTORCH_PORT_NAME)


def pytorchjob(opts: K8sOptions) -> dict[str, Any]:
    """Master and Workers share one image and command; ``nprocPerNode`` makes the operator's
    WORLD_SIZE count ranks, not pods. Pods fail rather than restart (``Never``), the job on
    the first failure (``backoffLimit: 0``), and stay after it (``cleanPodPolicy: None``) so
    the check's log can be read."""
    replicas: dict[str, Any] = {}
    for replica, count in (("Master", 1), ("Worker", opts.nodes - 1)):
        if count:
            replicas[replica] = {
                "replicas": count,
                "restartPolicy": "Never",
                "template": pod_template(opts, _pytorchjob_role(opts, replica.lower())),
            }
    return {
        "apiVersion": PYTORCHJOB_API,
        "kind": "PyTorchJob",
        "metadata": _metadata(opts, opts.name),
        "spec": {
            "nprocPerNode": str(opts.nproc_per_node),
            "runPolicy": {"backoffLimit": 0, "cleanPodPolicy": "None"},
            "pytorchReplicaSpecs": replicas,
        },
    }


def _jobset_role(opts: K8sOptions) -> Role:
    master = names.jobset_master(opts.name)
    # NNODES: an Indexed Job exports its pod's index, not the pod count
    train_env = (env("MASTER_ADDR", master), env("MASTER_PORT", opts.master_port),
                 field_env("NODE_RANK", names.JOBSET_INDEX), env("NNODES", opts.nodes))
    return Role(labels={names.JOB_LABEL: opts.name}, node_rank="$(NODE_RANK)",
                train_env=train_env, index_path=names.JOBSET_INDEX, rank_offset=0,
                check_master=master)


def jobset(opts: K8sOptions) -> dict[str, Any]:
    """One Indexed Job of ``nodes`` pods, all started at once (parallelism = completions);
    no restarts (``backoffLimit: 0``, ``maxRestarts: 0``)."""
    job_spec = {
        "parallelism": opts.nodes,
        "completions": opts.nodes,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        "template": pod_template(opts, _jobset_role(opts), restart_policy="Never"),
    }
    return {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": _metadata(opts, opts.name),
        "spec": {
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "failurePolicy": {"maxRestarts": 0},
            "replicatedJobs": [{"name": names.REPLICATED_JOB, "replicas": 1,
                                "template": {"spec": job_spec}}],
        },
    }


def header(opts: K8sOptions) -> str:
    kind = "JobSet" if opts.kind == "jobset" else "PyTorchJob"
    gpus = f"{opts.gpus_per_node} GPU(s)" if opts.gpus_per_node else "no GPU"
    check = (f"; each pod runs `ddpnet check` first (init container {CHECK_CONTAINER})"
             if opts.check else "")
    return (f"# Rendered by `ddpnet k8s`: {kind} {opts.name}, {opts.nodes} pod(s) x {gpus}, "
            f"{opts.world_size} rank(s){check}.\n# Apply with: kubectl apply -f FILE\n")


def to_yaml(objects: tuple[dict[str, Any], ...], head: str = "") -> str:
    """Multi-document YAML, keys in the order rendered (pyyaml is imported here: ``ddpnet
    --help`` does not need it)."""
    import yaml

    return head + yaml.safe_dump_all(objects, sort_keys=False, default_flow_style=False,
                                     explicit_start=True, width=100)

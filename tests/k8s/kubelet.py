"""What the controllers and the kubelet do to a rendered pod template, as their sources say,
so tests can see the environment and command a container really gets.

- Kubeflow training operator v1.9 (``pkg/controller.v1/pytorch/envvar.go``, ``master.go``):
  appends to every *container* (not init containers) PYTHONUNBUFFERED, MASTER_PORT and
  PET_MASTER_PORT (the ``pytorchjob-port`` container port), MASTER_ADDR and PET_MASTER_ADDR
  (``<job>-master-0``), WORLD_SIZE (replicas x nprocPerNode), RANK and PET_NODE_RANK (replica
  index, +1 on workers), PET_NPROC_PER_NODE, PET_NNODES; labels each pod with its
  ``training.kubeflow.org/replica-index``.
- Job controller (Indexed completion mode): annotates pod i with
  ``batch.kubernetes.io/job-completion-index: i`` and adds JOB_COMPLETION_INDEX (read from that
  annotation) to every container and init container.
- kubelet: fills ``valueFrom.fieldRef`` from the pod's metadata, then expands ``$(VAR)`` in
  values, commands and args from the container's variables (``$$`` is a literal ``$``; an
  unknown reference is left as written).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_FIELD = re.compile(r"metadata\.(labels|annotations)\['([^']+)'\]")


def expand(text: str, env: dict[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _REF.sub(sub, text)


@dataclass
class Pod:
    """One pod as created: its node index, metadata and spec (from the rendered template)."""

    node: int
    labels: dict[str, str]
    annotations: dict[str, str]
    spec: dict[str, Any]
    injected: list[dict[str, Any]] = field(default_factory=list)  # containers only
    injected_all: list[dict[str, Any]] = field(default_factory=list)  # init containers too

    def _field(self, path: str) -> str:
        m = _FIELD.fullmatch(path)
        assert m, f"unsupported fieldPath {path}"
        return (self.labels if m.group(1) == "labels" else self.annotations)[m.group(2)]

    def environ(self, container: dict[str, Any], init: bool = False) -> dict[str, str]:
        entries = [*container.get("env", []), *self.injected_all,
                   *([] if init else self.injected)]
        env: dict[str, str] = {}
        for entry in entries:
            if "valueFrom" in entry:
                env[entry["name"]] = self._field(entry["valueFrom"]["fieldRef"]["fieldPath"])
            else:
                env[entry["name"]] = expand(entry["value"], env)
        return env

    def command(self, container: dict[str, Any], init: bool = False) -> list[str]:
        env = self.environ(container, init)
        return [expand(a, env) for a in container["command"]]

    @property
    def init(self) -> dict[str, Any]:
        (container,) = self.spec["initContainers"]
        return container

    @property
    def main(self) -> dict[str, Any]:
        (container,) = self.spec["containers"]
        return container


def _env(name: str, value: object) -> dict[str, Any]:
    return {"name": name, "value": str(value)}


def pytorchjob_pods(job: dict[str, Any]) -> list[Pod]:
    specs = job["spec"]["pytorchReplicaSpecs"]
    name = job["metadata"]["name"]
    total = sum(r["replicas"] for r in specs.values())
    nproc = int(job["spec"]["nprocPerNode"])
    port = next(p["containerPort"] for p in specs["Master"]["template"]["spec"]["containers"][0]
                ["ports"] if p["name"] == "pytorchjob-port")
    pods = []
    for rtype in ("Master", "Worker"):
        for index in range(specs.get(rtype, {}).get("replicas", 0)):
            rank = index + (1 if rtype == "Worker" else 0)
            template = specs[rtype]["template"]
            labels = {**template["metadata"]["labels"],
                      "training.kubeflow.org/job-name": name,
                      "training.kubeflow.org/replica-type": rtype.lower(),
                      "training.kubeflow.org/replica-index": str(index)}
            injected = [_env("PYTHONUNBUFFERED", 1), _env("MASTER_PORT", port),
                        _env("PET_MASTER_PORT", port), _env("MASTER_ADDR", f"{name}-master-0"),
                        _env("PET_MASTER_ADDR", f"{name}-master-0"),
                        _env("WORLD_SIZE", total * nproc), _env("RANK", rank),
                        _env("PET_NODE_RANK", rank), _env("PET_NPROC_PER_NODE", nproc),
                        _env("PET_NNODES", total)]
            pods.append(Pod(rank, labels, {}, template["spec"], injected))
    return sorted(pods, key=lambda p: p.node)


def jobset_pods(jobset: dict[str, Any]) -> list[Pod]:
    (rjob,) = jobset["spec"]["replicatedJobs"]
    job = rjob["template"]["spec"]
    key = "batch.kubernetes.io/job-completion-index"
    index_env = {"name": "JOB_COMPLETION_INDEX",
                 "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{key}']"}}}
    return [Pod(i, dict(job["template"]["metadata"]["labels"]), {key: str(i)},
                job["template"]["spec"], injected_all=[index_env])
            for i in range(job["completions"])]


def pods(objects: tuple[dict[str, Any], ...]) -> list[Pod]:
    job = objects[-1]
    return pytorchjob_pods(job) if job["kind"] == "PyTorchJob" else jobset_pods(job)

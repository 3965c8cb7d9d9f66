"""The names a job's objects and pods get, as the controllers form them (pure).

- Kubeflow training operator (v1.9, ``pkg/controller.v1/pytorch``): pods and their per-replica
  services are ``<job>-master-0`` and ``<job>-worker-<i>``; the operator exports
  ``MASTER_ADDR=<job>-master-0`` and ``MASTER_PORT`` from the container port named
  ``pytorchjob-port`` of the container named ``pytorch``; the pod's index is the label
  ``training.kubeflow.org/replica-index``.
- JobSet (v1alpha2, ``api/jobset/v1alpha2/jobset_types.go``): with
  ``network.enableDNSHostnames`` pod ``<jobset>-<replicatedJob>-<jobIndex>-<podIndex>`` is
  reachable as that name under the subdomain ``<jobset>`` (a headless service JobSet creates,
  publishing not-ready addresses by default); the pod's index in its Indexed Job is the
  annotation ``batch.kubernetes.io/job-completion-index`` (what ``JOB_COMPLETION_INDEX`` is
  read from).
"""

from __future__ import annotations

#: the one replicated job of a rendered JobSet
REPLICATED_JOB = "node"
#: the operator's names for the training container and its port
PYTORCH_CONTAINER = "pytorch"
PYTORCH_PORT_NAME = "pytorchjob-port"
#: downward-API paths of a pod's index
PYTORCHJOB_INDEX = "metadata.labels['training.kubeflow.org/replica-index']"
JOBSET_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
#: our labels: the job's pods, and the pod whose address the check's rendezvous service has
JOB_LABEL = "ddpnet/job"
ROLE_LABEL = "ddpnet/role"


def service(job: str) -> str:
    """The headless service the init containers of a PyTorchJob rendezvous at."""
    return f"{job}-rdzv"


def pytorchjob_pod(job: str, node: int) -> str:
    """Node ``node``'s pod: the master is node 0, worker ``i`` is node ``i + 1``."""
    return f"{job}-master-0" if node == 0 else f"{job}-worker-{node - 1}"


def jobset_pod(job: str, node: int) -> str:
    return f"{job}-{REPLICATED_JOB}-0-{node}"


def jobset_master(job: str) -> str:
    """Pod 0's hostname under the JobSet's subdomain (relative: the pod's DNS search path
    completes it in its namespace)."""
    return f"{jobset_pod(job, 0)}.{job}"

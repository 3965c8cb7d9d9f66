"""Kubernetes indexed Jobs and JobSet (``jobset.x-k8s.io``): one process per pod.

Kubernetes sets ``JOB_COMPLETION_INDEX`` in every pod of an Indexed Job (kubernetes.io,
"Job with Pod-to-Pod Communication"; the same value as the annotation
``batch.kubernetes.io/job-completion-index``). JobSet exports no variable of its own: it
labels pods with ``jobset.sigs.k8s.io/jobset-name``, ``.../replicatedjob-name`` and
``.../job-index`` (kubernetes-sigs/jobset ``api/jobset/v1alpha2/jobset_types.go``), which pods
map to variables with the downward API, by convention ``JOBSET_NAME``,
``REPLICATED_JOB_NAME`` and ``JOB_INDEX``. Pod hostnames are
``<jobset>-<replicatedJob>-<jobIndex>-<podIndex>`` under the headless service
``<subdomain>`` (``spec.network.subdomain``, by default the JobSet name:
``GetSubdomain`` in ``pkg/controllers/jobset_controller.go``).

The pod count is not exported: JobSet's PyTorch example passes RANK (from the completion
index) and MASTER_ADDR; WORLD_SIZE (or NNODES) must be set too. Exported RANK/WORLD_SIZE win
over the index, which numbers pods within one Job only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ddpnet.env.base import Launcher, ReadContext, Sourced, env_int, first_int, put, put_master
from ddpnet.errors import ConfigError

_INDEX = "JOB_COMPLETION_INDEX"


def master_hostname(jobset: str, replicated_job: str, subdomain: str | None = None) -> str:
    """The headless-service name of pod 0 of Job 0 of a replicated job."""
    return f"{jobset}-{replicated_job}-0-0.{subdomain or jobset}"


def _rank(environ: Mapping[str, str]) -> Sourced:
    index = env_int(environ, _INDEX)
    assert index is not None
    rank = env_int(environ, "RANK")
    if rank is not None:
        return rank
    job_index = env_int(environ, "JOB_INDEX")
    if job_index is not None and job_index[0] > 0:
        raise ConfigError(
            f"JOB_INDEX={job_index[0]}: this replicated job has several Jobs, and "
            f"{_INDEX}={index[0]} numbers pods within one Job only",
            "export RANK in the pod template (e.g. JOB_INDEX * completions + "
            "JOB_COMPLETION_INDEX), or use one Job with completions = the pod count",
        )
    return index


def _world(environ: Mapping[str, str]) -> Sourced:
    found = first_int(environ, "WORLD_SIZE", "NNODES", minimum=1)
    if found is None:
        raise ConfigError(
            f"{_INDEX} is set but not the number of pods (an indexed Job does not export it)",
            "add env WORLD_SIZE with the Job's completions (the pod count) to the pod template",
        )
    return found


class JobSetLauncher(Launcher):
    name: ClassVar[str] = "jobset"
    markers: ClassVar[tuple[str, ...]] = (_INDEX, "JOBSET_NAME", "REPLICATED_JOB_NAME")

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        return _INDEX in environ

    def read(self, environ: Mapping[str, str], ctx: ReadContext) -> dict[str, Sourced]:
        out: dict[str, Sourced] = {"rank": _rank(environ), "world_size": _world(environ)}
        put(out, "local_rank", env_int(environ, "LOCAL_RANK"))
        out["local_world_size"] = env_int(environ, "LOCAL_WORLD_SIZE", minimum=1) or (
            1, "one process per pod")
        put(out, "num_nodes", env_int(environ, "NNODES", minimum=1))
        put_master(out, environ)
        jobset, rjob = environ.get("JOBSET_NAME"), environ.get("REPLICATED_JOB_NAME")
        if "master_addr" not in out and jobset and rjob:
            out["master_addr"] = (master_hostname(jobset, rjob),
                                  "JOBSET_NAME, REPLICATED_JOB_NAME (default subdomain)")
        return out

"""Kubeflow TrainJob (Trainer v2, ``trainer.kubeflow.org``) with a torch runtime.

The Torch plugin (kubeflow/trainer ``pkg/runtime/framework/plugins/torch/torch.go`` and
``pkg/constants/constants.go``, 2025-2026) sets in the trainer ``node`` container:

- ``PET_NNODES`` (numNodes), ``PET_NPROC_PER_NODE`` (numProcPerNode; ``auto``, which the
  plugin turns into the CPU count on nodes without GPUs);
- ``PET_NODE_RANK`` from the pod annotation ``batch.kubernetes.io/job-completion-index``;
- ``PET_MASTER_ADDR`` = ``<trainjob>-node-0-0.<trainjob>`` (``-trainer-node-0-0`` before the
  replicated job was renamed), the JobSet headless-service name of the first pod, and
  ``PET_MASTER_PORT`` = 29500.

No RANK, WORLD_SIZE or MASTER_ADDR (the validator refuses them as reserved): the runtime's
command is torchrun, which reads the PET_* variables (then the torchrun launcher wins). A
TrainJob runs on a JobSet of indexed Jobs, so ``JOB_COMPLETION_INDEX`` is set too: it is
detected before ``jobset`` and runs within it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ddpnet.env.base import Launcher, ReadContext, Sourced, env_int, put
from ddpnet.env.pytorchjob import per_pod_note, put_pet_master


class TrainJobLauncher(Launcher):
    name: ClassVar[str] = "trainjob"
    markers: ClassVar[tuple[str, ...]] = ("PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR",
                                          "JOB_COMPLETION_INDEX")
    runs_within: ClassVar[tuple[str, ...]] = ("jobset",)

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        return all(v in environ for v in TrainJobLauncher.markers)

    def read(self, environ: Mapping[str, str], ctx: ReadContext) -> dict[str, Sourced]:
        out: dict[str, Sourced] = {}
        put(out, "note", per_pod_note(environ, "TrainJob"))
        # one process per pod: the node rank is the rank, the node count the world size
        put(out, "rank", env_int(environ, "PET_NODE_RANK"))
        put(out, "world_size", env_int(environ, "PET_NNODES", minimum=1))
        put(out, "node_rank", env_int(environ, "PET_NODE_RANK"))
        put(out, "num_nodes", env_int(environ, "PET_NNODES", minimum=1))
        put_pet_master(out, environ)
        return out

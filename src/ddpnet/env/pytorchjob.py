"""Kubeflow PyTorchJob (training-operator v1, ``kubeflow.org/v1``): one process per pod.

What the operator sets in every container (kubeflow/training-operator v1.9.0,
``pkg/controller.v1/pytorch/envvar.go``, ``master.go``, ``elastic.go``):

- with a Master replica: ``MASTER_ADDR`` and ``PET_MASTER_ADDR`` (``<job>-master-0``, the
  master pod's service), ``MASTER_PORT`` and ``PET_MASTER_PORT`` (the master container's
  ``pytorchjob-port``), ``RANK`` and ``PET_NODE_RANK`` (the pod's index: master 0, worker
  i+1), ``WORLD_SIZE`` (replicas x nprocPerNode);
- ``PET_NPROC_PER_NODE`` (``spec.nprocPerNode``, defaulted to ``auto``);
- ``PET_NNODES``: the replica count, or ``min:max`` with an ``elasticPolicy``, which also sets
  ``PET_RDZV_BACKEND``, ``PET_RDZV_ENDPOINT``, ``PET_RDZV_ID``, ``PET_MAX_RESTARTS`` ...;
- ``PYTHONUNBUFFERED``.

``PET_*`` are torchrun's own flags as variables (``torch/distributed/argparse_util.py``):
torchrun started in the pod reads them and sets TORCHELASTIC_RUN_ID, so the torchrun launcher
wins there. This launcher is the process started directly in the pod: one process per pod.
With a numeric nprocPerNode above 1 the operator's WORLD_SIZE counts torchrun's processes, so
this process counts as rank PET_NODE_RANK of PET_NNODES (a note says so), which is also what
``ddpnet launch`` in the pod needs (the node rank, node count and master). A hand-exported
RANK/WORLD_SIZE (``manual``) has no PET_MASTER_ADDR / PET_NNODES: that is how the two differ.
The operator creates pods, not Jobs, so a PyTorchJob pod has no ``JOB_COMPLETION_INDEX``
(which marks a TrainJob or a JobSet). Operators before 1.7 set only MASTER_ADDR, MASTER_PORT,
WORLD_SIZE (the pod count) and RANK (the pod index): that is detected as ``manual``, with the
same values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ddpnet.env.base import Launcher, ReadContext, Sourced, env_int, parse_int, put, put_master
from ddpnet.errors import ConfigError

#: PET_NPROC_PER_NODE values that let torchrun decide the process count
_TORCHRUN_DECIDES = ("auto", "cpu", "gpu", "xpu")


def nproc_per_node(environ: Mapping[str, str]) -> int | None:
    """``PET_NPROC_PER_NODE`` as a number, None when unset or left to torchrun (``auto``)."""
    text = environ.get("PET_NPROC_PER_NODE")
    if text is None or text.strip() in _TORCHRUN_DECIDES:
        return None
    return parse_int(text, "PET_NPROC_PER_NODE", minimum=1)


def refuse_elastic(environ: Mapping[str, str], kind: str) -> None:
    """An elastic job's ranks come from torchrun's rendezvous, not from the pod."""
    nnodes = environ.get("PET_NNODES", "")
    if ":" in nnodes or "PET_RDZV_ENDPOINT" in environ:
        raise ConfigError(
            f"PET_NNODES={nnodes!r}: an elastic {kind} (elasticPolicy); its ranks are given "
            "by torchrun's rendezvous, not by the pod",
            "start the container's command with torchrun (it reads PET_RDZV_ENDPOINT and "
            "PET_NNODES), or drop elasticPolicy for fixed ranks",
        )


def per_pod_note(environ: Mapping[str, str], kind: str) -> Sourced | None:
    """A note when the pod is meant for several processes: outside torchrun this process is
    one per pod (``ddpnet launch`` in the pod starts the rest from the same node facts)."""
    nproc = nproc_per_node(environ)
    if nproc is None or nproc == 1:
        return None
    return (f"PET_NPROC_PER_NODE={nproc}: this {kind} pod is meant to run {nproc} processes; "
            "this one was not started by torchrun and counts as one process per pod (start "
            f"them with torchrun, which reads PET_*, or ddpnet launch --nproc-per-node {nproc})",
            "PET_NPROC_PER_NODE")


def put_pet_master(out: dict[str, Sourced], environ: Mapping[str, str]) -> None:
    """MASTER_ADDR/MASTER_PORT when exported, else torchrun's PET_MASTER_ADDR/PORT."""
    put_master(out, environ)
    if "master_addr" not in out and environ.get("PET_MASTER_ADDR"):
        out["master_addr"] = (environ["PET_MASTER_ADDR"], "PET_MASTER_ADDR")
    if "master_port" not in out:
        put(out, "master_port", env_int(environ, "PET_MASTER_PORT"))


class PyTorchJobLauncher(Launcher):
    name: ClassVar[str] = "pytorchjob"
    markers: ClassVar[tuple[str, ...]] = ("PET_NNODES", "PET_MASTER_ADDR", "PET_RDZV_ENDPOINT")

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        if "PET_NNODES" not in environ or "JOB_COMPLETION_INDEX" in environ:
            return False
        return "PET_MASTER_ADDR" in environ or "PET_RDZV_ENDPOINT" in environ

    def read(self, environ: Mapping[str, str], ctx: ReadContext) -> dict[str, Sourced]:
        refuse_elastic(environ, "PyTorchJob")
        out: dict[str, Sourced] = {}
        put(out, "node_rank", env_int(environ, "PET_NODE_RANK"))
        put(out, "num_nodes", env_int(environ, "PET_NNODES", minimum=1))
        note = per_pod_note(environ, "PyTorchJob")
        if note is None:
            put(out, "rank", env_int(environ, "RANK"))
            put(out, "world_size", env_int(environ, "WORLD_SIZE", minimum=1))
        else:  # the operator's RANK is the pod's, its WORLD_SIZE counts torchrun's processes
            put(out, "rank", out.get("node_rank"))
            put(out, "world_size", out.get("num_nodes"))
            out["note"] = note
        put(out, "local_rank", env_int(environ, "LOCAL_RANK"))
        put_pet_master(out, environ)
        return out

"""One pod template of a rendered job (pure): the training container running torchrun,
``ddpnet check`` as its init container, ``/dev/shm`` in memory and the GPUs.

A :class:`Role` carries what differs between the templates (PyTorchJob master and worker, the
JobSet's one template): labels, where the node rank and master come from, the rank offset.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ddpnet.k8s import names
from ddpnet.k8s.options import K8sOptions

SHM_VOLUME = "dshm"
CHECK_CONTAINER = "ddpnet-check"


@dataclass(frozen=True)
class Role:
    """``node_rank``: the variable torchrun's node rank is read from (the kubelet expands
    ``$(VAR)`` from the container's environment, MASTER_ADDR and MASTER_PORT too);
    ``train_env``: what we add to the training container (the operator adds its own);
    ``index_path`` and ``rank_offset``: the check's rank is the pod's index plus the offset."""

    labels: Mapping[str, str]
    node_rank: str
    train_env: tuple[dict[str, Any], ...]
    index_path: str
    rank_offset: int
    check_master: str
    port_name: str = "rdzv"
    container: str = names.PYTORCH_CONTAINER


def env(name: str, value: str | int) -> dict[str, Any]:
    return {"name": name, "value": str(value)}


def field_env(name: str, path: str) -> dict[str, Any]:
    """A variable the kubelet fills from the pod's own metadata (downward API)."""
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def iface_env(opts: K8sOptions) -> list[dict[str, Any]]:
    """GLOO/NCCL/TP_SOCKET_IFNAME for ``--iface``, as ``ddpnet launch --ifname`` exports them
    (the one interface choice, :mod:`ddpnet.net.select`; the name is not checked here: it is
    the pods', not this host's)."""
    from ddpnet.net.select import Ask, choose_interface

    choice = choose_interface((), Ask(flag=opts.iface, flag_name="--iface", here=False,
                                      fallback=False), environ={})
    return [env(k, v) for k, v in choice.env.items()]


def escape(arg: str) -> str:
    """``arg`` with ``$(`` written ``$$(`` so the kubelet passes it on as the user wrote it."""
    return arg.replace("$(", "$$(")


def torchrun_command(opts: K8sOptions, role: Role) -> list[str]:
    """torchrun with every value explicit, in the layout ``ddpnet launch`` builds
    (:func:`ddpnet.launch.command.build_torchrun`, static rendezvous: global rank 0 on node 0,
    the master pod). Not ``ddpnet launch`` itself: in a PyTorchJob pod the operator's
    variables describe a job of torchrun agents, which is what runs here."""
    return [opts.python, "-m", "torch.distributed.run", "--nnodes", str(opts.nodes),
            "--nproc-per-node", str(opts.nproc_per_node), "--node-rank", role.node_rank,
            "--master-addr", "$(MASTER_ADDR)", "--master-port", "$(MASTER_PORT)",
            "--max-restarts", "0", *(escape(a) for a in opts.target.torchrun_args())]


def check_command(opts: K8sOptions) -> list[str]:
    """The preflight (rank from the pod index; wait, bounded, until MASTER_ADDR resolves),
    then ``ddpnet check`` with rank 0 waiting as long for every pod to join."""
    wait = str(opts.check_timeout)
    return [opts.python, "-m", "ddpnet.k8s.preflight", wait, "--join-timeout", wait]


def check_env(opts: K8sOptions, role: Role) -> list[dict[str, Any]]:
    """One check rank per pod: WORLD_SIZE is the pod count (the manual launcher's variables)."""
    return [env("MASTER_ADDR", role.check_master), env("MASTER_PORT", opts.master_port),
            env("WORLD_SIZE", opts.nodes), field_env("DDPNET_POD_INDEX", role.index_path),
            env("DDPNET_RANK_OFFSET", role.rank_offset), *iface_env(opts)]


def _resources(opts: K8sOptions) -> dict[str, Any]:
    if not opts.gpus_per_node:
        return {}
    return {"resources": {"limits": {"nvidia.com/gpu": str(opts.gpus_per_node)}}}


def _mounts() -> dict[str, Any]:
    return {"volumeMounts": [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}]}


def train_container(opts: K8sOptions, role: Role) -> dict[str, Any]:
    return {
        "name": role.container,
        "image": opts.image,
        "command": torchrun_command(opts, role),
        "env": [*role.train_env, *iface_env(opts)],
        "ports": [{"name": role.port_name, "containerPort": opts.master_port}],
        **_resources(opts),
        **_mounts(),
    }


def check_container(opts: K8sOptions, role: Role) -> dict[str, Any]:
    """The same image, GPUs (the kubelet hands an init container's devices on to the
    training container) and /dev/shm as training, so the check sees what training will."""
    return {
        "name": CHECK_CONTAINER,
        "image": opts.image,
        "command": check_command(opts),
        "env": check_env(opts, role),
        **_resources(opts),
        **_mounts(),
    }


def pod_template(opts: K8sOptions, role: Role, restart_policy: str | None = None
                 ) -> dict[str, Any]:
    """``restart_policy``: a Job's template must set it; a PyTorchJob's replica spec does."""
    spec: dict[str, Any] = {}
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    if opts.check:
        spec["initContainers"] = [check_container(opts, role)]
    spec["containers"] = [train_container(opts, role)]
    spec["volumes"] = [{"name": SHM_VOLUME,
                        "emptyDir": {"medium": "Memory", "sizeLimit": opts.shm_size}}]
    return {"metadata": {"labels": dict(role.labels)}, "spec": spec}

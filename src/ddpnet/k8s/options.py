"""``ddpnet k8s``'s options, validated when built: a ConfigError (exit 2) names the first bad
flag, with its fix, before anything is rendered."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ddpnet.errors import ConfigError
from ddpnet.k8s import names
from ddpnet.launch.command import MAX_PROCS_PER_NODE, Target

KINDS = ("pytorchjob", "jobset")
#: a Kubernetes object and namespace name (RFC 1123 DNS label): pod hostnames are labels too
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_LABEL_MAX = 63
#: a positive quantity with an optional binary or decimal suffix (``8Gi``, ``512Mi``, ``1G``)
_QUANTITY = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")
#: a Linux interface name: at most 15 bytes (IFNAMSIZ - 1), no '/', ':' or blanks
_IFNAME = re.compile(r"[A-Za-z0-9_.@\-]{1,15}")
#: how many pods one job may have (a JobSet's Indexed Job allows 100000 completions)
MAX_K8S_NODES = 100_000
#: seconds the init container waits for MASTER_ADDR to resolve and rank 0 for the others
MAX_CHECK_TIMEOUT_S = 3600


@dataclass(frozen=True)
class K8sOptions:
    """One job: ``nodes`` pods of ``gpus_per_node`` GPUs (one rank per GPU, or one rank on a
    pod without GPUs) running ``target`` from ``image``."""

    target: Target
    nodes: int
    gpus_per_node: int
    image: str
    name: str = "ddpnet"
    kind: str = "pytorchjob"
    namespace: str | None = None
    shm_size: str = "8Gi"
    iface: str = "eth0"
    check: bool = True
    check_timeout: int = 300
    master_port: int = 29500
    #: the Python that has ddpnet and torch inside the image
    python: str = "python3"
    #: ranks per pod as given (``--nproc-per-node``); None: one per GPU, or one without GPUs
    nproc: int | None = None

    def __post_init__(self) -> None:
        validate(self)

    @property
    def nproc_per_node(self) -> int:
        if self.nproc is not None:
            return self.nproc
        return max(1, self.gpus_per_node)

    @property
    def world_size(self) -> int:
        return self.nodes * self.nproc_per_node


def validate(opts: K8sOptions) -> None:
    """Every flag alone, then the names the job derives from ``--name``."""
    if opts.kind not in KINDS:
        raise ConfigError(f"--kind {opts.kind!r} is not one of {', '.join(KINDS)}",
                          "pytorchjob needs the Kubeflow training operator; jobset the JobSet "
                          "controller")
    _check_counts(opts)
    _check_label("--name", opts.name)
    if opts.namespace is not None:
        _check_label("--namespace", opts.namespace)
    for flag, value, example in (("--image", opts.image, "nvcr.io/nvidia/pytorch:24.05-py3"),
                                 ("--python", opts.python, "python3")):
        if not value.strip() or any(c.isspace() for c in value):
            raise ConfigError(f"{flag} {value!r} is empty or contains blanks",
                              f"give {flag} one word, e.g. {flag} {example}")
    m = _QUANTITY.fullmatch(opts.shm_size)
    if not m or float(m.group(1)) <= 0:
        raise ConfigError(f"--shm-size {opts.shm_size!r} is not a positive Kubernetes quantity",
                          "use a size such as 8Gi, 16Gi or 512Mi")
    if not _IFNAME.fullmatch(opts.iface):
        raise ConfigError(f"--iface {opts.iface!r} is not an interface name",
                          "give the pod network's interface (1-15 characters), e.g. --iface eth0 "
                          "(net1 for a Multus secondary network)")
    for name in derived_names(opts):
        _check_label("--name", name, derived_from=opts.name)


def _check_counts(opts: K8sOptions) -> None:
    if not 1 <= opts.nodes <= MAX_K8S_NODES:
        raise ConfigError(f"--nodes {opts.nodes} is outside 1..{MAX_K8S_NODES}",
                          "a job needs --nodes 1 or more (one pod per node)")
    if not 0 <= opts.gpus_per_node <= MAX_PROCS_PER_NODE:
        raise ConfigError(f"--gpus-per-node {opts.gpus_per_node} is outside "
                          f"0..{MAX_PROCS_PER_NODE}",
                          "give the GPUs of one pod (one rank each), e.g. --gpus-per-node 8; "
                          "0 runs one CPU rank per pod")
    if opts.nproc is not None and not 1 <= opts.nproc <= MAX_PROCS_PER_NODE:
        raise ConfigError(f"--nproc-per-node {opts.nproc} is outside 1..{MAX_PROCS_PER_NODE}",
                          "give the ranks of one pod, e.g. --nproc-per-node 4; leave it out "
                          "for one rank per GPU")
    if opts.nproc is not None and 0 < opts.gpus_per_node < opts.nproc:
        raise ConfigError(f"--nproc-per-node {opts.nproc} is more than --gpus-per-node "
                          f"{opts.gpus_per_node}: two ranks would share a GPU, which NCCL "
                          "refuses", "one rank per GPU: drop --nproc-per-node, or request "
                          "more GPUs")
    if not 1 <= opts.check_timeout <= MAX_CHECK_TIMEOUT_S:
        raise ConfigError(f"--check-timeout {opts.check_timeout} is outside "
                          f"1..{MAX_CHECK_TIMEOUT_S} s",
                          "allow for image pulls and scheduling, e.g. --check-timeout 300")
    if not 1 <= opts.master_port <= 65535:
        raise ConfigError(f"--master-port {opts.master_port} is outside 1..65535",
                          "use a port such as 29500")


def _check_label(flag: str, value: str, *, derived_from: str | None = None) -> None:
    if _DNS_LABEL.fullmatch(value) and len(value) <= _LABEL_MAX:
        return
    if derived_from is not None:
        raise ConfigError(
            f"--name {derived_from!r} makes the pod or service name {value!r} longer than "
            f"{_LABEL_MAX} characters",
            f"shorten --name to at most {len(derived_from) - (len(value) - _LABEL_MAX)} "
            "characters")
    raise ConfigError(f"{flag} {value!r} is not a DNS label (RFC 1123)",
                      f"use at most {_LABEL_MAX} lower-case letters, digits and '-', starting "
                      f"and ending with a letter or digit, e.g. {flag} train-gpt")


def derived_names(opts: K8sOptions) -> tuple[str, ...]:
    """The longest names the job gives Kubernetes objects and pod hostnames (each must be a
    DNS label): the service and last worker of a PyTorchJob, the last pod of a JobSet."""
    if opts.kind == "jobset":
        return (names.jobset_pod(opts.name, opts.nodes - 1),)
    return (names.service(opts.name), names.pytorchjob_pod(opts.name, opts.nodes - 1))

"""Amazon SageMaker training jobs: the entry point runs once per instance (host).

The training toolkit (aws/sagemaker-training-toolkit ``src/sagemaker_training/environment.py``,
documented in its ENVIRONMENT_VARIABLES.md) exports ``SM_HOSTS`` (a JSON list, e.g.
``["algo-1","algo-2"]``), ``SM_CURRENT_HOST`` (``algo-2``), ``SM_NUM_GPUS``, ``SM_NUM_CPUS``,
``SM_NETWORK_INTERFACE_NAME``; the SageMaker Python SDK's ModelTrainer drivers
(``sagemaker/modules/train/container_drivers``) also read ``SM_MASTER_ADDR``,
``SM_MASTER_PORT``, ``SM_HOST_COUNT`` and ``SM_CURRENT_HOST_RANK`` where the platform sets them.

One process per host: the rank is the host's index in SM_HOSTS (or SM_CURRENT_HOST_RANK), the
master the first host (the toolkit's ``master_hostname``; SM_HOSTS is sorted
lexicographically, ``algo-10`` before ``algo-2``, the same order on every host). With
``distribution`` set, SageMaker starts torchrun or mpirun instead, which are detected and win.
A heterogeneous cluster (several instance groups) lists every group's hosts in SM_HOSTS: there
SM_CURRENT_HOST_RANK / SM_HOST_COUNT, where set, are the ones to trust.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import ClassVar

from ddpnet.env.base import Launcher, ReadContext, Sourced, env_int, put, put_master
from ddpnet.env.hostlist import valid_host
from ddpnet.errors import ConfigError

_HINT = "SageMaker sets SM_HOSTS to a JSON list of host names, e.g. [\"algo-1\",\"algo-2\"]"


def parse_hosts(text: str, source: str = "SM_HOSTS") -> tuple[str, ...]:
    """The JSON list of host names, or a one-line ConfigError."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise ConfigError(f"{source}={text[:60]!r} is not JSON", _HINT) from None
    if not isinstance(value, list) or not value or not all(
            isinstance(h, str) and valid_host(h) for h in value):
        raise ConfigError(f"{source}={text[:60]!r} is not a list of host names", _HINT)
    if len(set(value)) != len(value):
        raise ConfigError(f"{source} lists a host twice", _HINT)
    return tuple(value)


def _node_rank(environ: Mapping[str, str], hosts: tuple[str, ...]) -> Sourced:
    found = env_int(environ, "SM_CURRENT_HOST_RANK")
    if found is not None:
        return found
    current = environ["SM_CURRENT_HOST"]
    if current not in hosts:
        raise ConfigError(
            f"SM_CURRENT_HOST={current!r} is not in SM_HOSTS {list(hosts)[:8]}",
            "both come from SageMaker for the same job; do not overwrite either",
        )
    return hosts.index(current), "SM_CURRENT_HOST in SM_HOSTS"


class SageMakerLauncher(Launcher):
    name: ClassVar[str] = "sagemaker"
    markers: ClassVar[tuple[str, ...]] = ("SM_HOSTS", "SM_CURRENT_HOST")

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        return "SM_HOSTS" in environ and "SM_CURRENT_HOST" in environ

    def read(self, environ: Mapping[str, str], ctx: ReadContext) -> dict[str, Sourced]:
        hosts = parse_hosts(environ["SM_HOSTS"])
        node = _node_rank(environ, hosts)
        count = env_int(environ, "SM_HOST_COUNT", minimum=1) or (len(hosts), "SM_HOSTS")
        out: dict[str, Sourced] = {
            "rank": node, "world_size": count, "node_rank": node, "num_nodes": count,
            "local_rank": (0, "one process per host"),
            "local_world_size": (1, "one process per host"),
            "hosts": (hosts, "SM_HOSTS"),
        }
        gpus = env_int(environ, "SM_NUM_GPUS")
        if gpus is not None and gpus[0] > 1:
            out["note"] = (f"SM_NUM_GPUS={gpus[0]}: this is one process per host; set the "
                           "estimator's distribution to torch_distributed (torchrun) for one "
                           "per GPU", "SM_NUM_GPUS")
        put_master(out, environ)
        if "master_addr" not in out and environ.get("SM_MASTER_ADDR"):
            out["master_addr"] = (environ["SM_MASTER_ADDR"], "SM_MASTER_ADDR")
        if "master_port" not in out:
            put(out, "master_port", env_int(environ, "SM_MASTER_PORT"))
        return out

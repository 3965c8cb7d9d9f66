"""Azure Machine Learning (AzureML) distributed jobs.

AzureML starts the processes with its MPI launcher (Open MPI in its GPU images, or Intel MPI)
or, for ``distribution: pytorch``, sets the torch variables itself, and always names the
master node ("Distributed GPU training guide", learn.microsoft.com/azure/machine-learning/
how-to-train-distributed-gpu; Azure Batch "runtime environment variables" for multi-instance
tasks):

- ``AZ_BATCH_MASTER_NODE``: ``ip:port`` of the master node;
- ``AZ_BATCHAI_MPI_MASTER_NODE``: the master node's address for MPI jobs;
- ``AZ_BATCHAI_JOB_MASTER_NODE_IP``: the same, older images;
- the ranks: ``OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE`` (Open MPI),
  ``PMI_RANK/PMI_SIZE`` (Intel MPI), or ``RANK/WORLD_SIZE/LOCAL_RANK/NODE_RANK`` with
  ``MASTER_ADDR/MASTER_PORT`` (PyTorch distribution).

Detected before the MPI launchers: its MPI variables are its own (it runs "within" them by
design), and only it knows the master that plain MPI lacks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ddpnet.address import REQUIRED_PORT, parse_address
from ddpnet.env.base import Launcher, ReadContext, Sourced, first_int, put
from ddpnet.env.manual import ManualLauncher
from ddpnet.env.mpi import MpichLauncher, OpenMpiLauncher
from ddpnet.errors import ConfigError

_MASTER_VARS = ("AZ_BATCH_MASTER_NODE", "AZ_BATCHAI_MPI_MASTER_NODE",
                "AZ_BATCHAI_JOB_MASTER_NODE_IP")


def parse_master_node(text: str, source: str = "AZ_BATCH_MASTER_NODE") -> tuple[str, int]:
    """``ip:port`` -> (ip, port); a one-line ConfigError without a port."""
    try:
        addr = parse_address(text.strip(), source, port=REQUIRED_PORT)
    except ConfigError as exc:
        raise ConfigError(
            f"{source}={text[:60]!r} is not ip:port ({str(exc).removeprefix(source + ' ')})",
            f"AzureML sets {source} as the master's address and port, e.g. 10.0.0.4:6105; "
            "do not overwrite it (or export MASTER_ADDR and MASTER_PORT instead)",
        ) from None
    assert addr.port is not None  # REQUIRED_PORT
    return addr.dial, addr.port


def _ranks(environ: Mapping[str, str], ctx: ReadContext) -> dict[str, Sourced]:
    """The ranks of whichever launcher AzureML used (without its master variables)."""
    for cls in (OpenMpiLauncher, MpichLauncher, ManualLauncher):
        if cls.detect(environ):
            out = cls().read(environ, ctx)
            out.pop("master_addr", None)
            out.pop("master_port", None)
            return out
    return {}


def _master(environ: Mapping[str, str]) -> dict[str, Sourced]:
    if environ.get("MASTER_ADDR"):
        out: dict[str, Sourced] = {"master_addr": (environ["MASTER_ADDR"], "MASTER_ADDR")}
        put(out, "master_port", first_int(environ, "MASTER_PORT"))
        return out
    if environ.get("AZ_BATCH_MASTER_NODE"):
        host, port = parse_master_node(environ["AZ_BATCH_MASTER_NODE"])
        return {"master_addr": (host, "AZ_BATCH_MASTER_NODE"),
                "master_port": (port, "AZ_BATCH_MASTER_NODE")}
    out = {}
    for var in _MASTER_VARS[1:]:
        if environ.get(var):
            out["master_addr"] = (environ[var].strip(), var)
            break
    put(out, "master_port", first_int(environ, "MASTER_PORT"))
    return out


class AzureMlLauncher(Launcher):
    name: ClassVar[str] = "azureml"
    markers: ClassVar[tuple[str, ...]] = _MASTER_VARS
    runs_within: ClassVar[tuple[str, ...]] = ("openmpi", "mpich")

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        if not any(v in environ for v in _MASTER_VARS):
            return False
        return any(v in environ for v in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "RANK"))

    def read(self, environ: Mapping[str, str], ctx: ReadContext) -> dict[str, Sourced]:
        out = _ranks(environ, ctx)
        out.update(_master(environ))
        return out

"""MPI launchers: Open MPI, MPICH/Hydra (and Intel MPI), MVAPICH.

MPI exports no node list and no master: ``resolve`` derives node rank from the rank and the
local size (mpirun maps by slot by default) and needs MASTER_ADDR for multi-node jobs, which
users forward with ``mpirun -x MASTER_ADDR=...``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ddpnet.env.base import Launcher, ReadContext, Sourced, env_int, put, put_master


class _MpiLauncher(Launcher):
    #: mpirun runs inside batch jobs and pods, and inside AzureML's MPI launch
    runs_within: ClassVar[tuple[str, ...]] = (
        "slurm", "lsf", "pbs", "sge", "sagemaker", "jobset", "trainjob", "pytorchjob",
        "azureml")
    rank_var: ClassVar[str]
    size_var: ClassVar[str]
    local_rank_var: ClassVar[str]
    local_size_var: ClassVar[str]

    @classmethod
    def _markers(cls) -> tuple[str, ...]:
        return (cls.rank_var, cls.size_var)

    @classmethod
    def _detect(cls, environ: Mapping[str, str]) -> bool:
        return cls.rank_var in environ and cls.size_var in environ

    def read(self, environ: Mapping[str, str], ctx: ReadContext) -> dict[str, Sourced]:
        out: dict[str, Sourced] = {}
        put(out, "rank", env_int(environ, self.rank_var))
        put(out, "world_size", env_int(environ, self.size_var, minimum=1))
        put(out, "local_rank", env_int(environ, self.local_rank_var))
        put(out, "local_world_size", env_int(environ, self.local_size_var, minimum=1))
        put_master(out, environ)
        return out


class OpenMpiLauncher(_MpiLauncher):
    name: ClassVar[str] = "openmpi"
    rank_var = "OMPI_COMM_WORLD_RANK"
    size_var = "OMPI_COMM_WORLD_SIZE"
    local_rank_var = "OMPI_COMM_WORLD_LOCAL_RANK"
    local_size_var = "OMPI_COMM_WORLD_LOCAL_SIZE"
    markers: ClassVar[tuple[str, ...]] = (rank_var, size_var)

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        return OpenMpiLauncher._detect(environ)


class MpichLauncher(_MpiLauncher):
    """MPICH's Hydra, also used by Intel MPI."""

    name: ClassVar[str] = "mpich"
    rank_var = "PMI_RANK"
    size_var = "PMI_SIZE"
    local_rank_var = "MPI_LOCALRANKID"
    local_size_var = "MPI_LOCALNRANKS"
    markers: ClassVar[tuple[str, ...]] = (rank_var, size_var)

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        return MpichLauncher._detect(environ)


class MvapichLauncher(_MpiLauncher):
    name: ClassVar[str] = "mvapich"
    rank_var = "MV2_COMM_WORLD_RANK"
    size_var = "MV2_COMM_WORLD_SIZE"
    local_rank_var = "MV2_COMM_WORLD_LOCAL_RANK"
    local_size_var = "MV2_COMM_WORLD_LOCAL_SIZE"
    markers: ClassVar[tuple[str, ...]] = (rank_var, size_var)

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        return MvapichLauncher._detect(environ)

"""Which launcher started this process: one priority order, with the reason for it."""

from __future__ import annotations

from collections.abc import Mapping

from ddpnet.env.base import Launcher
from ddpnet.env.lsf import LsfLauncher
from ddpnet.env.manual import LocalLauncher, ManualLauncher
from ddpnet.env.mpi import MpichLauncher, MvapichLauncher, OpenMpiLauncher
from ddpnet.env.slurm import SlurmLauncher
from ddpnet.env.torchrun import TorchrunLauncher

#: Priority order, most specific first:
#: - torchrun before everything: it runs inside SLURM steps and MPI jobs, and its RANK is the
#:   per-process rank while the outer launcher's numbers count torchrun agents;
#: - MPI before SLURM: ``mpirun`` inside an ``sbatch`` script inherits the batch step's
#:   SLURM variables, but OMPI_/PMI_/MV2_ variables exist only in processes mpirun started;
#: - SLURM (srun steps), then LSF (jsrun);
#: - manual (RANK/WORLD_SIZE exported by hand), and local (nothing: one process) last.
LAUNCHERS: tuple[type[Launcher], ...] = (
    TorchrunLauncher,
    OpenMpiLauncher,
    MpichLauncher,
    MvapichLauncher,
    SlurmLauncher,
    LsfLauncher,
    ManualLauncher,
    LocalLauncher,
)

BY_NAME: dict[str, type[Launcher]] = {cls.name: cls for cls in LAUNCHERS}


def detect_all(environ: Mapping[str, str]) -> list[type[Launcher]]:
    """Every launcher whose markers are present, in priority order (``local`` always last)."""
    return [cls for cls in LAUNCHERS if cls.detect(environ)]


def detect_launcher(environ: Mapping[str, str]) -> tuple[type[Launcher], str]:
    """The winning launcher and why, e.g. ``(SlurmLauncher, "SLURM_PROCID, SLURM_STEP_ID set")``."""
    found = detect_all(environ)
    winner = found[0]
    if winner is LocalLauncher:
        if environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID"):
            # a salloc shell: SLURM_* set, but this process is not one of the tasks
            return winner, ("inside SLURM job " + (environ.get("SLURM_JOB_ID")
                                                  or environ.get("SLURM_JOBID", ""))
                            + " but not in an srun step: one local process (start the "
                            "ranks with srun, or torchrun on each node)")
        return winner, "no launcher variables set: one local process"
    present = [m for m in winner.markers if m in environ]
    reason = f"{', '.join(present)} set"
    others = [cls.name for cls in found[1:] if cls not in (ManualLauncher, LocalLauncher)]
    if others:
        reason += f"; wins over {', '.join(others)} (it runs inside them)"
    return winner, reason

"""Which launcher started this process: one priority order, with the reason for it, and the
other environments that match too (nested by design, or ambiguous)."""

from __future__ import annotations

from collections.abc import Mapping

from ddpnet.config import Ambiguity
from ddpnet.env.azureml import AzureMlLauncher
from ddpnet.env.base import Launcher
from ddpnet.env.jobset import JobSetLauncher
from ddpnet.env.lsf import LsfLauncher
from ddpnet.env.manual import LocalLauncher, ManualLauncher
from ddpnet.env.mpi import MpichLauncher, MvapichLauncher, OpenMpiLauncher
from ddpnet.env.pbs import PbsLauncher
from ddpnet.env.pytorchjob import PyTorchJobLauncher
from ddpnet.env.sagemaker import SageMakerLauncher
from ddpnet.env.sge import SgeLauncher
from ddpnet.env.slurm import SlurmLauncher
from ddpnet.env.torchrun import TorchrunLauncher
from ddpnet.env.trainjob import TrainJobLauncher

#: Priority order, innermost first (what runs inside what):
#: - torchrun before everything: it runs inside SLURM steps, MPI jobs, PyTorchJob/TrainJob
#:   pods (reading their PET_* variables) and SageMaker's torch_distributed, and its RANK is
#:   the per-process rank while the outer numbers count torchrun agents or pods;
#: - AzureML before MPI: its MPI launch sets OMPI_/PMI_ variables, and only it names the master;
#: - MPI before the batch systems and pods: ``mpirun`` inside an ``sbatch``/``qsub`` script or a
#:   pod inherits their variables, but OMPI_/PMI_/MV2_ variables exist only in what mpirun
#:   started;
#: - TrainJob before JobSet (a TrainJob is a JobSet of indexed Jobs: both see
#:   JOB_COMPLETION_INDEX), PyTorchJob (no completion index), then plain indexed Jobs;
#: - SageMaker, then the batch systems: SLURM (srun steps), LSF (jsrun), PBS, Grid Engine;
#:   they never nest in one another, so two of them matching is reported as ambiguous;
#: - manual (RANK/WORLD_SIZE exported by hand), and local (nothing: one process) last.
LAUNCHERS: tuple[type[Launcher], ...] = (
    TorchrunLauncher,
    AzureMlLauncher,
    OpenMpiLauncher,
    MpichLauncher,
    MvapichLauncher,
    TrainJobLauncher,
    PyTorchJobLauncher,
    JobSetLauncher,
    SageMakerLauncher,
    SlurmLauncher,
    LsfLauncher,
    PbsLauncher,
    SgeLauncher,
    ManualLauncher,
    LocalLauncher,
)

BY_NAME: dict[str, type[Launcher]] = {cls.name: cls for cls in LAUNCHERS}
#: fallbacks that never conflict: exported RANK/WORLD_SIZE are checked against the winner
_FALLBACKS = (ManualLauncher, LocalLauncher)


def detect_all(environ: Mapping[str, str]) -> list[type[Launcher]]:
    """Every launcher whose markers are present, in priority order (``local`` always last)."""
    return [cls for cls in LAUNCHERS if cls.detect(environ)]


def nested(inner: type[Launcher], outer: type[Launcher]) -> bool:
    """True when ``inner`` runs inside (or alongside) ``outer`` by design."""
    return "*" in inner.runs_within or outer.name in inner.runs_within


def ambiguities(environ: Mapping[str, str]) -> tuple[Ambiguity, ...]:
    """Each matching environment that is not nested by design with one above it in priority:
    the priority order chose between them, so the choice is reported, not silent."""
    found = [cls for cls in detect_all(environ) if cls not in _FALLBACKS]
    out: list[Ambiguity] = []
    for i, other in enumerate(found):
        rival = next((cls for cls in found[:i] if not nested(cls, other)), None)
        if rival is not None:
            markers = {m: environ[m] for m in other.markers if m in environ}
            out.append(Ambiguity(other.name, markers, rival.name))
    return tuple(out)


def marked_by(cls: type[Launcher], environ: Mapping[str, str]) -> str:
    """The source of the launcher itself: its marker variables that are set."""
    present = [m for m in cls.markers if m in environ]
    return ", ".join(present) if present else "no launcher variables set"


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
    reason = f"{marked_by(winner, environ)} set"
    inside = [cls.name for cls in found[1:] if cls not in _FALLBACKS and nested(winner, cls)]
    if inside:
        reason += f"; wins over {', '.join(inside)} (nested by design: it runs inside them)"
    return winner, reason

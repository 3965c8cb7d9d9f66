"""torchrun / torch.distributed.run (TorchElastic).

Checked first: torchrun is often started inside a SLURM step or an MPI job, and then its
RANK is the process rank while SLURM_PROCID only numbers the per-node agents.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ddpnet.env.base import Launcher, ReadContext, Sourced, env_int, put, put_master


class TorchrunLauncher(Launcher):
    name: ClassVar[str] = "torchrun"
    markers: ClassVar[tuple[str, ...]] = ("TORCHELASTIC_RUN_ID",)
    runs_within: ClassVar[tuple[str, ...]] = ("*",)

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        return "TORCHELASTIC_RUN_ID" in environ and "RANK" in environ

    def read(self, environ: Mapping[str, str], ctx: ReadContext) -> dict[str, Sourced]:
        out: dict[str, Sourced] = {}
        put(out, "rank", env_int(environ, "RANK"))
        put(out, "world_size", env_int(environ, "WORLD_SIZE", minimum=1))
        put(out, "local_rank", env_int(environ, "LOCAL_RANK"))
        put(out, "local_world_size", env_int(environ, "LOCAL_WORLD_SIZE", minimum=1))
        put(out, "node_rank", env_int(environ, "GROUP_RANK"))
        put(out, "num_nodes", env_int(environ, "GROUP_WORLD_SIZE", minimum=1))
        put_master(out, environ)
        if environ.get("TORCHELASTIC_RUN_ID"):
            out["job_id"] = (environ["TORCHELASTIC_RUN_ID"], "TORCHELASTIC_RUN_ID")
        return out

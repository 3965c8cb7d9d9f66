"""Variables exported by hand, as the guides do: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
(plus optional LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, NNODES, which ``ddpnet lab run`` and
``mp.spawn`` wrappers also export)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ddpnet.env.base import Launcher, ReadContext, Sourced, env_int, first_int, put, put_master


class ManualLauncher(Launcher):
    name: ClassVar[str] = "manual"
    markers: ClassVar[tuple[str, ...]] = ("RANK", "WORLD_SIZE")

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        return "RANK" in environ and "WORLD_SIZE" in environ

    def read(self, environ: Mapping[str, str], ctx: ReadContext) -> dict[str, Sourced]:
        out: dict[str, Sourced] = {}
        put(out, "rank", env_int(environ, "RANK"))
        put(out, "world_size", env_int(environ, "WORLD_SIZE", minimum=1))
        put(out, "local_rank", env_int(environ, "LOCAL_RANK"))
        put(out, "local_world_size", env_int(environ, "LOCAL_WORLD_SIZE", minimum=1))
        put(out, "node_rank", first_int(environ, "NODE_RANK", "GROUP_RANK"))
        put(out, "num_nodes", first_int(environ, "NNODES", "GROUP_WORLD_SIZE", minimum=1))
        put_master(out, environ)
        return out


class LocalLauncher(Launcher):
    """Nothing set: a single process. MASTER_ADDR/MASTER_PORT are still honoured."""

    name: ClassVar[str] = "local"
    markers: ClassVar[tuple[str, ...]] = ()

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        return True

    def read(self, environ: Mapping[str, str], ctx: ReadContext) -> dict[str, Sourced]:
        out: dict[str, Sourced] = {}
        put_master(out, environ)
        return out

"""Merge a launcher's values with overrides and defaults, derive the rest, validate all.

Precedence, highest first: explicit overrides (``ddpnet env --rank``, ``resolve(rank=...)``,
a ``tcp://`` init method's host and port), the detected launcher's variables, derivations
(node rank from rank and local size, master from the first host, port from the job id),
defaults (rank 0 of 1, 127.0.0.1:29500).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ddpnet.address import parse_address
from ddpnet.config import DistConfig
from ddpnet.env.base import Launcher, ReadContext, Sourced, parse_int
from ddpnet.env.detect import ambiguities, detect_all, detect_launcher, marked_by, nested
from ddpnet.env.initmethod import InitMethod, parse_init_method
from ddpnet.env.jobport import TORCH_DEFAULT_PORT, derive_port, read_port_range
from ddpnet.errors import ConfigError
from ddpnet.paths import file_writable

#: the torch variables a non-torchrun launcher may also find in the environment
_TORCH_VARS = {"rank": "RANK", "world_size": "WORLD_SIZE"}
_MPI = ("openmpi", "mpich", "mvapich")
#: launchers whose job id is the same on every node: the port is derived from it
_JOB_ID_PORT = ("slurm", "lsf", "pbs", "sge")
#: the most of a launcher's file (a node file) read: a million hosts fit
_FILE_LIMIT = 64 * 1024 * 1024


def _read_file(path: str) -> str:
    """A launcher's file (edge: reads it), bounded; OSError says why it cannot be read. Only
    a regular file: a FIFO or a device named by mistake must not block or stream forever."""
    if not os.path.isfile(path):
        raise OSError("No such file or directory" if not os.path.exists(path)
                      else "not a regular file")
    with open(path, "rb") as handle:
        data = handle.read(_FILE_LIMIT + 1)
    if len(data) > _FILE_LIMIT:
        raise OSError(f"larger than {_FILE_LIMIT // (1024 * 1024)} MiB")
    return data.decode("utf-8", errors="replace")


def read_files(paths: tuple[tuple[str, str], ...], read_file: Callable[[str], str]
               ) -> tuple[dict[str, str], dict[str, str]]:
    """The contents of each ``(variable, path)``, and why each unreadable one is not."""
    files: dict[str, str] = {}
    errors: dict[str, str] = {}
    for _, path in paths:
        try:
            files[path] = read_file(path)
        except OSError as exc:
            errors[path] = exc.strerror or str(exc)
    return files, errors


def resolve(
    environ: Mapping[str, str] | None = None,
    *,
    proc: Path = Path("/proc"),
    **overrides: Any,
) -> DistConfig:
    """Resolve this process's distributed configuration.

    ``overrides`` take any of ``rank, world_size, local_rank, local_world_size, node_rank,
    num_nodes, master_addr, master_port, init_method``; ``None`` means "not given".
    """
    given = {k: (v, f"argument {k}") for k, v in overrides.items() if v is not None}
    cfg = resolve_config(
        os.environ if environ is None else environ,
        given,
        port_range=read_port_range(proc),
    )
    for other in cfg.ambiguous:  # ddpnet.init() prints no notes: an ambiguity must show
        warnings.warn(f"ddpnet: {other.describe(cfg.launcher)}", stacklevel=2)
    return cfg


_OVERRIDABLE = {
    "rank", "world_size", "local_rank", "local_world_size", "node_rank", "num_nodes",
    "master_addr", "master_port", "init_method",
}


def resolve_config(
    environ: Mapping[str, str],
    overrides: Mapping[str, Sourced],
    *,
    port_range: tuple[int, int] = (32768, 60999),
    dir_check: Callable[[str], str | None] = file_writable,
    read_file: Callable[[str], str] = _read_file,
) -> DistConfig:
    """The pure core of :func:`resolve`: overrides map a key to ``(value, source)``; the
    launcher's files (PBS_NODEFILE, PE_HOSTFILE) come through ``read_file``."""
    _reject_unknown(overrides)
    launcher_cls, reason = detect_launcher(environ)
    launcher = launcher_cls()
    notes: list[str] = [f"launcher {launcher.name}: {reason}"]
    others = ambiguities(environ)
    found = detect_all(environ)
    ctx = _read_context(found, environ, port_range, read_file)
    try:
        values: dict[str, Sourced] = dict(launcher.read(environ, ctx))
    except ConfigError as exc:
        if not others:
            raise
        # the error may be about the environment this job is not: say what else matched
        raise ConfigError(exc.message, f"{exc.hint}; note: "
                          f"{others[0].describe(launcher.name)}") from None
    if "note" in values:
        notes.append(str(values.pop("note")[0]))
    script = values.pop("job_script", (None, ""))[0]

    _check_torch_vars(launcher.name, environ, values, notes)
    if launcher.name in _MPI and "master_addr" not in values:
        _put_outer_hosts(launcher_cls, found, environ, ctx, values)
    if launcher.name == "local":
        _check_rank_pair(environ)
    _apply_overrides(overrides, values)

    init = _init_method(overrides, values, notes, dir_check)
    job_id = values.pop("job_id", (None, ""))[0]
    _derive(launcher.name, values, notes, job_id, port_range)
    values["launcher"] = (launcher.name, marked_by(launcher_cls, environ))
    cfg = replace(_config(values, overrides, init, job_id, notes), job_script=script)
    _validate(cfg)
    return replace(cfg, ambiguous=others) if others else cfg


def _read_context(found: list[type[Launcher]], environ: Mapping[str, str],
                  port_range: tuple[int, int], read_file: Callable[[str], str]) -> ReadContext:
    """The files every matching launcher names (the winner's, and an enclosing batch job's
    node file for mpirun's master), read once through the edge reader."""
    named = tuple(pair for cls in found for pair in cls.files(environ))
    files, errors = read_files(tuple(dict.fromkeys(named)), read_file)
    return ReadContext(port_range=port_range, files=files, file_errors=errors)


def _put_outer_hosts(inner: type[Launcher], found: list[type[Launcher]],
                     environ: Mapping[str, str], ctx: ReadContext,
                     values: dict[str, Sourced]) -> None:
    """``mpirun`` inside a batch job: keep the job's hosts, whose first one runs rank 0 (mpirun
    maps ranks from the allocation's first node), as the master's fallback. A broken outer
    file is not this launcher's error: the master is then just unknown."""
    for outer in found:
        if outer is inner or not nested(inner, outer):
            continue
        try:
            hosts = outer.job_hosts(environ, ctx)
        except ConfigError:
            continue
        if hosts is not None:
            values["outer_hosts"] = (hosts[0], f"{hosts[1]} of the enclosing {outer.name} job")
            return


def _reject_unknown(overrides: Mapping[str, Sourced]) -> None:
    unknown = set(overrides) - _OVERRIDABLE
    if unknown:
        raise ConfigError(
            f"unknown setting(s): {', '.join(sorted(unknown))}",
            f"use only: {', '.join(sorted(_OVERRIDABLE))}",
        )


def _check_rank_pair(environ: Mapping[str, str]) -> None:
    """Without a launcher, RANK and WORLD_SIZE come together or not at all."""
    if ("RANK" in environ) != ("WORLD_SIZE" in environ):
        have, missing = ("RANK", "WORLD_SIZE") if "RANK" in environ else ("WORLD_SIZE", "RANK")
        raise ConfigError(
            f"{have} is set but {missing} is not",
            f"export both, e.g. export {missing}=... {have}={environ[have]}, or unset {have}",
        )


def _apply_overrides(overrides: Mapping[str, Sourced], values: dict[str, Sourced]) -> None:
    """Explicit settings win over the launcher's (the init method is applied on its own)."""
    for key, (value, source) in overrides.items():
        if key == "init_method":
            continue
        if key == "master_addr":
            values[key] = (str(value), source)
        else:
            values[key] = (parse_int(str(value), source, minimum=_minimum(key)), source)


def _config(
    values: Mapping[str, Sourced],
    overrides: Mapping[str, Sourced],
    init: InitMethod,
    job_id: str | None,
    notes: list[str],
) -> DistConfig:
    sources = {k: s for k, (_, s) in values.items()}
    sources["init_method"] = overrides["init_method"][1] if "init_method" in overrides \
        else "default"
    return DistConfig(
        launcher=values["launcher"][0],
        rank=values["rank"][0],
        world_size=values["world_size"][0],
        local_rank=values["local_rank"][0],
        local_world_size=values["local_world_size"][0],
        node_rank=values["node_rank"][0],
        num_nodes=values["num_nodes"][0],
        master_addr=values["master_addr"][0],
        master_port=values["master_port"][0],
        init_method=init.url,
        hosts=tuple(values["hosts"][0]) if "hosts" in values else (),
        job_id=job_id,
        sources=MappingProxyType(sources),
        notes=tuple(notes),
    )


def _minimum(key: str) -> int:
    return 1 if key in ("world_size", "local_world_size", "num_nodes") else 0


def _check_torch_vars(
    launcher: str, environ: Mapping[str, str], values: dict[str, Sourced], notes: list[str]
) -> None:
    """RANK/WORLD_SIZE left in the environment of an srun/mpirun process: agree or fail.
    A PyTorchJob's own RANK/WORLD_SIZE count torchrun's processes, not this one's."""
    if launcher in ("torchrun", "manual", "local", "pytorchjob"):
        return
    for key, var in _TORCH_VARS.items():
        if var not in environ or key not in values or values[key][1] == var:
            continue
        theirs = parse_int(environ[var], var, minimum=_minimum(key))
        ours, source = values[key]
        if theirs != ours:
            raise ConfigError(
                f"{var}={theirs} contradicts {source}={ours} ({launcher} launched this process)",
                f"unset {var} in the job script (the {launcher} value is the real one), or "
                f"start the job with torchrun, whose {var} then wins",
            )
        notes.append(f"{var}={theirs} agrees with {source}")


def _init_method(
    overrides: Mapping[str, Sourced],
    values: dict[str, Sourced],
    notes: list[str],
    dir_check: Callable[[str], str | None],
) -> InitMethod:
    if "init_method" not in overrides:
        return InitMethod("env")
    url, source = overrides["init_method"]
    init = parse_init_method(str(url), source)
    if init.scheme == "tcp":
        assert init.host is not None and init.port is not None
        for key, new in (("master_addr", init.host), ("master_port", init.port)):
            old = values.get(key)
            if old is not None and old[0] != new:
                notes.append(f"{source} {init.url} overrides {old[1]}={old[0]}")
            values[key] = (new, source)
    elif init.scheme == "file":
        assert init.path is not None
        problem = dir_check(init.path)
        if problem:
            raise ConfigError(
                f"{source}={init.url}: {problem}",
                "point file:// at a file in a directory every rank can write "
                "(a shared filesystem for several nodes), e.g. file:///shared/ddp/init",
            )
    return init


def _derive(
    launcher: str,
    values: dict[str, Sourced],
    notes: list[str],
    job_id: str | None,
    port_range: tuple[int, int],
) -> None:
    """Fill what the launcher did not say, marking each value ``derived`` or ``default``."""
    values.setdefault("rank", (0, "default"))
    values.setdefault("world_size", (1, "default"))
    _derive_layout(launcher, values, notes)
    outer = values.pop("outer_hosts", None)
    if "master_addr" not in values:
        values["master_addr"] = _master_addr(launcher, values, notes, outer)
    if "master_port" not in values:
        values["master_port"] = _master_port(launcher, job_id, port_range, notes)


def _derive_layout(launcher: str, values: dict[str, Sourced], notes: list[str]) -> None:
    """Local world size, local rank, node count and node rank."""
    world = values["world_size"][0]
    hosts = values.get("hosts", ((), ""))[0]
    if "local_world_size" not in values:
        values["local_world_size"] = _local_world_size(launcher, values, notes)
    lws = values["local_world_size"][0]
    if "local_rank" not in values:
        values["local_rank"] = (values["rank"][0] % lws, "derived")
    if "num_nodes" not in values:
        nodes = len(hosts) if hosts else max(1, -(-world // lws))
        values["num_nodes"] = (nodes, "derived")
    if "node_rank" not in values:
        values["node_rank"] = (values["rank"][0] // lws, "derived")
        if launcher in _MPI and values["num_nodes"][0] > 1:
            notes.append("node_rank derived as rank // local_world_size (mpirun --map-by slot)")


def _local_world_size(launcher: str, values: Mapping[str, Sourced], notes: list[str]
                      ) -> Sourced:
    """From the node count or the host list when they divide the world; else a default."""
    world = values["world_size"][0]
    hosts = values.get("hosts", ((), ""))[0]
    if "num_nodes" in values and world % values["num_nodes"][0] == 0:
        return world // values["num_nodes"][0], "derived"
    if hosts and world % len(hosts) == 0:
        return world // len(hosts), "derived"
    if launcher == "local":
        return world, "default"
    if world > 1:
        notes.append("local_world_size unknown: assuming one process per node")
    return 1, "default"


#: how to hand MASTER_ADDR to every rank, per launcher
_MASTER_ADDR_HINTS = {
    "openmpi": "forward it: mpirun -x MASTER_ADDR=<rank-0 host> -x MASTER_PORT=...",
    "mpich": "forward it: mpiexec -genv MASTER_ADDR <rank-0 host> ...",
    "mvapich": "forward it: mpirun_rsh ... MASTER_ADDR=<rank-0 host> ...",
    "jobset": "add env MASTER_ADDR=<jobset>-<replicatedJob>-0-0.<subdomain> (the rank-0 pod's "
              "headless-service name) to the pod template, or JOBSET_NAME and "
              "REPLICATED_JOB_NAME from the pod's labels (downward API) to derive it",
    "azureml": "AzureML sets AZ_BATCH_MASTER_NODE (ip:port) for distributed jobs; run with "
               "a distribution (mpi or pytorch) and instance_count > 1",
}


def _master_addr(launcher: str, values: Mapping[str, Sourced], notes: list[str],
                 outer: Sourced | None = None) -> Sourced:
    """The first host of the node list; 127.0.0.1 on one node; on several, the first host of
    an enclosing batch job (mpirun inside it), else an error."""
    hosts = values.get("hosts", ((), ""))[0]
    if hosts:
        notes.append(f"MASTER_ADDR is the first host of the node list: {hosts[0]}")
        return hosts[0], "derived"
    if values["num_nodes"][0] > 1 and outer is not None:
        notes.append(f"MASTER_ADDR is the first host of {outer[1]}: {outer[0][0]}, where "
                     f"{launcher}'s mpirun places rank 0 unless -host/--hostfile reorder the "
                     "nodes (export MASTER_ADDR to choose another)")
        return outer[0][0], "derived"
    if values["num_nodes"][0] > 1:
        raise ConfigError(
            f"MASTER_ADDR is not set for a {values['num_nodes'][0]}-node {launcher} job "
            f"(rank {values['rank'][0]})",
            _MASTER_ADDR_HINTS.get(
                launcher, "export MASTER_ADDR=<address of the rank-0 host> on every node"),
        )
    return "127.0.0.1", "default"


def _master_port(launcher: str, job_id: str | None, port_range: tuple[int, int],
                 notes: list[str]) -> Sourced:
    """Derived from a batch job id (SLURM, LSF, PBS, Grid Engine: the same on every node),
    else torch's default."""
    if job_id and launcher in _JOB_ID_PORT:
        port = derive_port(job_id, port_range)
        notes.append(
            f"MASTER_PORT {port} derived from job id {job_id}, outside the ephemeral "
            f"range {port_range[0]}-{port_range[1]}"
        )
        return port, "derived"
    return TORCH_DEFAULT_PORT, "default"


def _validate(cfg: DistConfig) -> None:
    where = f"rank {cfg.rank}"
    src = cfg.sources
    if cfg.rank >= cfg.world_size:
        raise ConfigError(
            f"rank {cfg.rank} ({src['rank']}) is not below world size {cfg.world_size} "
            f"({src['world_size']})",
            "ranks run from 0 to WORLD_SIZE-1; set WORLD_SIZE to the total number of "
            "processes on all nodes",
        )
    if cfg.local_rank >= cfg.local_world_size:
        raise ConfigError(
            f"local rank {cfg.local_rank} ({src['local_rank']}) is not below local world size "
            f"{cfg.local_world_size} ({src['local_world_size']}) on {where}",
            "LOCAL_RANK runs from 0 to LOCAL_WORLD_SIZE-1 (processes on this node)",
        )
    if cfg.local_world_size > cfg.world_size:
        raise ConfigError(
            f"local world size {cfg.local_world_size} exceeds world size {cfg.world_size}",
            "LOCAL_WORLD_SIZE counts processes on one node; WORLD_SIZE counts all of them",
        )
    if cfg.node_rank >= cfg.num_nodes:
        raise ConfigError(
            f"node rank {cfg.node_rank} ({src['node_rank']}) is not below the node count "
            f"{cfg.num_nodes} ({src['num_nodes']})",
            "node ranks run from 0 to NNODES-1",
        )
    if not 1 <= cfg.master_port <= 65535:
        raise ConfigError(
            f"MASTER_PORT {cfg.master_port} ({src['master_port']}) is outside 1..65535",
            "pick a free port such as 29500 and use the same one on every node",
        )
    where = src["master_addr"]
    parse_address(cfg.master_addr, "MASTER_ADDR" if where == "MASTER_ADDR" else
                  f"MASTER_ADDR ({where})")
    if cfg.hosts and cfg.num_nodes != len(cfg.hosts) and src["num_nodes"] != "derived":
        raise ConfigError(
            f"the node list has {len(cfg.hosts)} hosts but the node count is {cfg.num_nodes} "
            f"({src['num_nodes']})",
            "the job's node list and node count disagree: is SLURM_NODELIST overwritten?",
        )

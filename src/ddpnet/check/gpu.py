"""GPU facts for ``check`` with NCCL: what each rank reports about its GPU (edge:
:func:`gpu_facts`, :func:`nccl_facts`) and what rank 0 concludes from them (pure): ranks
sharing a GPU (NCCL refuses that), GPUs and drivers that differ between nodes, and NCCL
network settings that differ.

A rank's GPU is ``process_group.gpu_index`` (its local rank among the visible GPUs), the
device check's process group and ``ddpnet.init()`` use. Ranks are on one machine when their
hostnames agree, as NCCL sees it: two lab nodes (network namespaces, their own hostnames)
may both use GPU 0, NCCL treats them as two hosts."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ddpnet.check.causes import Cause
from ddpnet.check.compare import NodeFacts, _describe, _groups, _minority
from ddpnet.net.nccl import nccl_conf_paths, nccl_settings

#: GPU facts compared across nodes (besides torch/cuda/nccl: ``version-mismatch``)
GPU_KEYS = ("driver", "gpu_name", "gpu_capability", "persistence_mode")
#: NCCL settings that must agree: ranks on different transports cannot connect
NCCL_MUST_AGREE = ("NCCL_NET", "NCCL_IB_DISABLE")


# --------------------------------------------------------------------------- the edge

def gpu_facts(local_rank: int) -> dict[str, Any]:
    """This rank's GPU as torch sees it (count, the index it would use, UUID, model,
    compute capability) and its persistence mode from NVML where nvidia-ml-py is installed;
    ``gpu_count`` 0 on a CPU node."""
    try:
        import torch

        from ddpnet.process_group import gpu_index  # after torch: nothing before needs it

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = gpu_index(local_rank, count)
        out: dict[str, Any] = {"gpu_count": count, "gpu_index": index,
                               "local_rank": local_rank}
        if index is None:
            return out
        props = torch.cuda.get_device_properties(index)
        uuid = str(getattr(props, "uuid", "") or "") or None
        if uuid is not None and not uuid.startswith("GPU-"):
            uuid = f"GPU-{uuid}"
        out.update(gpu_uuid=uuid, gpu_name=props.name,
                   gpu_capability=f"{props.major}.{props.minor}",
                   persistence_mode=_persistence(uuid))
        return out
    except Exception as exc:  # a broken driver is a fact, not a crash of the check
        return {"gpu_error": str(exc).splitlines()[0][:200] if str(exc) else repr(exc)}


def _persistence(uuid: str | None) -> str | None:
    """"on"/"off" from NVML for the GPU with this UUID; None when unknown."""
    if uuid is None:
        return None
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
            return "on" if pynvml.nvmlDeviceGetPersistenceMode(handle) else "off"
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None


def nccl_facts(environ: Mapping[str, str]) -> dict[str, Any]:
    """NCCL's network variables as NCCL will read them: the environment over its config
    files (``ddpnet.net.nccl.nccl_settings``)."""
    texts = []
    for path in nccl_conf_paths(environ, os.path.expanduser("~")):
        try:
            texts.append(Path(path).read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
    return {"nccl_settings": nccl_settings(environ, texts)}


# --------------------------------------------------------------------------- pure

def compare_gpus(nodes: Sequence[NodeFacts], backend: str | None) -> list[Cause]:
    """Every GPU comparison; ranks sharing a GPU only matter to NCCL."""
    nodes = sorted(nodes, key=lambda n: n.rank)
    shared = share_gpu(nodes) if backend == "nccl" else []
    return [*shared, *compare_gpu_facts(nodes), *compare_nccl_settings(nodes)]


def _crowding(host: str, ranks: list[NodeFacts]) -> list[str]:
    """Why ranks on one host share a GPU: more of them than visible GPUs, or the same GPU."""
    counts = {n.facts.get("gpu_count") for n in ranks}
    count = max((c for c in counts if isinstance(c, int)), default=None)
    problems = []
    over = [n for n in ranks if n.facts.get("gpu_index") is None
            and isinstance(n.facts.get("gpu_count"), int)]
    if over and count is not None:
        problems.append(f"{host}: {len(ranks)} ranks ({_rank_list(ranks)}) on {count} visible "
                        f"GPU(s): local rank(s) "
                        + ",".join(str(n.facts.get("local_rank")) for n in over)
                        + " have none of their own")
    by_gpu: dict[str, list[NodeFacts]] = defaultdict(list)
    for n in ranks:
        if n.facts.get("gpu_index") is not None:
            by_gpu[str(n.facts.get("gpu_uuid") or f"cuda:{n.facts['gpu_index']}")].append(n)
    problems += [f"{host}: ranks {_rank_list(same)} all use GPU {gpu}"
                 for gpu, same in by_gpu.items() if len(same) > 1]
    return problems


def _rank_list(nodes: Sequence[NodeFacts]) -> str:
    return ",".join(str(n.rank) for n in nodes)


def share_gpu(nodes: Sequence[NodeFacts]) -> list[Cause]:
    """``ranks-share-gpu``: on one host, more ranks than visible GPUs or two ranks on the
    same GPU (UUID where known, else the index); NCCL refuses both ("invalid usage")."""
    by_host: dict[str, list[NodeFacts]] = defaultdict(list)
    for n in nodes:
        if "gpu_count" in n.facts:
            by_host[n.host].append(n)
    problems, odd = [], []
    for host, ranks in by_host.items():
        found = _crowding(host, ranks)
        if found:
            problems += found
            odd += ranks
    if not problems:
        return []
    return [Cause(
        id="ranks-share-gpu", stage="facts",
        hosts=tuple(dict.fromkeys(n.label for n in odd)), ranks=tuple(n.rank for n in odd),
        detail="; ".join(problems) + ": NCCL needs one GPU per rank",
        fix="start at most one rank per visible GPU on each node (--local N or "
            "--nproc-per-node N with N = GPUs), or check CUDA_VISIBLE_DEVICES; to try NCCL "
            "across nodes on one GPU, give each rank its own host (ddpnet lab: network "
            "namespaces with their own hostnames)",
        evidence=tuple(problems),
        see_for_yourself="nvidia-smi -L; echo $CUDA_VISIBLE_DEVICES $LOCAL_RANK",
    )]


def compare_gpu_facts(nodes: Sequence[NodeFacts]) -> list[Cause]:
    """``gpu-mismatch`` (a warning): driver, GPU model, compute capability or persistence
    mode differ between ranks; the minority (rank 0 breaks ties) is named."""
    details, odd = [], []
    for key in GPU_KEYS:
        groups = _groups(nodes, key)
        if len(groups) < 2:
            continue
        details.append(f"{key} differs: {_describe(groups, key)}")
        ref = str(nodes[0].facts.get(key)) if nodes else None
        odd += [n for v in _minority(groups, ref) for n in groups[v]]
    if not details:
        return []
    odd = list({n.rank: n for n in odd}.values())
    return [Cause(
        id="gpu-mismatch", stage="facts", severity="warn",
        hosts=tuple(dict.fromkeys(n.label for n in odd)), ranks=tuple(n.rank for n in odd),
        detail="; ".join(details) + " (the slowest GPU paces every step; drivers that differ "
               "can break NCCL)",
        fix="install the same NVIDIA driver on every node, enable persistence mode "
            "(nvidia-smi -pm 1, or the nvidia-persistenced service) everywhere, and train "
            "on one GPU model per job",
        evidence=tuple(details),
        see_for_yourself="nvidia-smi --query-gpu=name,driver_version,compute_cap,"
                         "persistence_mode --format=csv",
    )]


def compare_nccl_settings(nodes: Sequence[NodeFacts]) -> list[Cause]:
    """``nccl-setting-mismatch``: NCCL_NET / NCCL_IB_DISABLE differ between ranks (a fail:
    ranks on different transports cannot connect); other NCCL_IB_* differences are a
    warning. NCCL_SOCKET_IFNAME may differ (interface names do): the interface selection
    judges it on each node."""
    reported = [n for n in nodes if isinstance(n.facts.get("nccl_settings"), dict)]
    keys = sorted({k for n in reported for k in n.facts["nccl_settings"]
                   if k != "NCCL_SOCKET_IFNAME"})
    causes = []
    for must in (True, False):
        lines = []
        for key in keys:
            if (key in NCCL_MUST_AGREE) != must:
                continue
            values = {n.rank: n.facts["nccl_settings"].get(key, "(unset)") for n in reported}
            if len(set(values.values())) > 1:
                lines.append(f"{key}: " + ", ".join(f"rank {r} {v}" for r, v in values.items()))
        if lines:
            causes.append(Cause(
                id="nccl-setting-mismatch", stage="facts",
                severity="fail" if must else "warn",
                hosts=tuple(dict.fromkeys(n.label for n in reported)),
                ranks=tuple(n.rank for n in reported),
                detail="NCCL will read different settings (environment over ~/.nccl.conf and "
                       "/etc/nccl.conf): " + "; ".join(lines),
                fix="set the same NCCL_NET/NCCL_IB_* on every node (export them in the job "
                    "script, or the same /etc/nccl.conf everywhere)",
                evidence=tuple(lines),
                see_for_yourself="env | grep ^NCCL_; cat ~/.nccl.conf /etc/nccl.conf"))
    return causes

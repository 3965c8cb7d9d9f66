"""Stage 4: the process group on the check's own store (no second rendezvous), a checked
all_reduce and a barrier. The group stays up for the bench and is destroyed at the end."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from ddpnet.check.causes import Cause
from ddpnet.check.context import Findings, RankContext
from ddpnet.check.store import PREFIX
from ddpnet.net.nccl import nccl_failure
from ddpnet.output import lend_stdout


def _device(torch: Any, backend: str, local_rank: int) -> Any:
    """The rank's own GPU for NCCL (``process_group.gpu_index``; it was the current device,
    GPU 0 for every rank); where it has none, GPU 0, and NCCL's refusal is explained by the
    facts' ``ranks-share-gpu``."""
    if backend != "nccl":
        return torch.device("cpu")
    from ddpnet.process_group import gpu_index

    index = gpu_index(local_rank, torch.cuda.device_count())
    if index is not None:
        torch.cuda.set_device(index)
    return torch.device("cuda", torch.cuda.current_device())


def _error(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:300] if str(exc) else repr(exc)


def run_group(ctx: RankContext) -> dict[str, Any]:
    """Join the group and all_reduce ``rank + 1``; what happened, as published."""
    t = time.monotonic()
    try:
        import torch
        import torch.distributed as dist

        from ddpnet.process_group import choose

        backend = choose(ctx.opts.backend).backend
        device = _device(torch, backend, ctx.cfg.local_rank)
        lend_stdout()  # under --json, NCCL's debug lines go to stderr, not into the JSON
        dist.init_process_group(
            backend, store=dist.PrefixStore(PREFIX + "pg", ctx.store.raw),  # type: ignore[attr-defined]
            rank=ctx.rank, world_size=ctx.world,
            timeout=timedelta(seconds=ctx.opts.stage_timeout))
        ta = time.monotonic()
        x = torch.full((1024,), float(ctx.rank + 1), device=device)
        dist.all_reduce(x)
        expected = ctx.world * (ctx.world + 1) / 2
        good = bool(torch.all(x == expected).item())
        allreduce_s = time.monotonic() - ta
        dist.barrier()
    except Exception as exc:
        return {"ok": False, "error": _error(exc), "seconds": time.monotonic() - t}
    if not good:
        return {"ok": False, "wrong": True, "backend": backend, "expected": expected,
                "error": f"all_reduce gave {x[0].item()} instead of {expected}",
                "seconds": time.monotonic() - t}
    return {"ok": True, "backend": backend, "expected": expected,
            "allreduce_s": allreduce_s, "seconds": time.monotonic() - t}


def destroy() -> None:
    with contextlib.suppress(Exception):
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def join(ctx: RankContext) -> None:
    """Ranks > 0."""
    ctx.store.publish("pg", ctx.rank, run_group(ctx))


def summary(pgs: Mapping[int, Any], ranks: list[int]) -> dict[str, Any]:
    """The report's ``allreduce`` object (pure)."""
    ok = [r for r in ranks if pgs.get(r, {}).get("ok")]
    seconds = [float(p.get("allreduce_s", 0)) for p in pgs.values() if p.get("ok")]
    first: dict[str, Any] = next(iter(pgs.values()), {})
    return {"ok": len(ok) == len(ranks), "ranks_ok": len(ok), "backend": first.get("backend"),
            "expected": first.get("expected"), "max_seconds": max(seconds) if seconds else None}


def _failed_cause(found: Findings, pgs: Mapping[int, Any], bad: list[int]) -> Cause:
    return Cause(
        id="process-group-failed" if any(not pgs.get(r, {}).get("wrong") for r in bad)
        else "allreduce-wrong",
        stage="process-group",
        ranks=tuple(bad), hosts=tuple(found.label_of(r) for r in bad),
        detail="; ".join(f"rank {r}: {pgs.get(r, {}).get('error', 'no answer')}"
                         for r in bad),
        fix="run `ddpnet doctor` on these nodes; pin the interface with "
            "GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME",
        evidence=tuple(f"rank {r}: {pgs.get(r, {}).get('error', 'no answer')}" for r in bad),
        ruled_out=("the rendezvous, the facts and the plain-socket mesh: earlier stages "
                   "passed or are named above",),
        confidence="medium",
        see_for_yourself="ddpnet check --local 2  # the same group on one node",
    )


def nccl_cause(found: Findings, pgs: Mapping[int, Any], bad: list[int]) -> Cause | None:
    """The cause NCCL's own failure text names (``net.nccl.nccl_failure``), unless an
    earlier stage already named it (pure)."""
    for r in bad:
        error = str(pgs.get(r, {}).get("error", ""))
        known = nccl_failure(error)
        if known is None or any(c.id == known.cause for c in found.causes):
            continue
        named = [q for q in bad if nccl_failure(str(pgs.get(q, {}).get("error", "")))
                 == known]
        return Cause(id=known.cause, stage="process-group", ranks=tuple(named),
                     hosts=tuple(found.label_of(q) for q in named),
                     detail=f"NCCL's failure on rank {r}: {error}", fix=known.fix,
                     evidence=(f"NCCL's own error on rank {r}: {error}",),
                     see_for_yourself="NCCL_DEBUG=INFO  # in the job's environment, rerun")
    return None


def group_stage(ctx: RankContext, found: Findings) -> bool:
    """Rank 0: join the group, gather every rank's result; whether every rank passed."""
    ctx.store.publish("pg", 0, run_group(ctx))
    pgs = ctx.store.gather("pg", found.ranks, ctx.opts.stage_timeout + 5)
    found.extra["allreduce"] = summary(pgs, found.ranks)
    bad = [r for r in found.ranks if not pgs.get(r, {}).get("ok")]
    if bad:
        named = nccl_cause(found, pgs, bad)
        found.causes.extend([_failed_cause(found, pgs, bad), *([named] if named else [])])
    ctx.timings["process_group"] = max(float(p.get("seconds", 0)) for p in pgs.values()) \
        if pgs else 0.0
    found.stages["process_group"] = "fail" if bad else "pass"
    ctx.progress(f"process group: all_reduce {'ok' if not bad else 'FAILED'} "
                 f"in {ctx.timings['process_group']:.1f} s")
    return not bad

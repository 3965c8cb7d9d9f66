"""The driver (nccl-tests' common.cu): sizes, warm-up, timing, checking and rows, generic over
the collective modules. Runs on every rank of an initialised process group.

Each timed iteration starts after a barrier (so every rank starts together) and is timed on
each rank; an iteration's time is the slowest rank's (one MAX all_reduce per size, so the cost
does not grow with the iteration count); rows report the median, min and max over iterations.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ddpnet.bench.collectives import REGISTRY, Collective, Ctx
from ddpnet.bench.config import DTYPES, BenchConfig, format_size
from ddpnet.bench.link import measure_link
from ddpnet.bench.result import BenchResult, BenchRow, LinkRate, Skipped, make_row
from ddpnet.bench.timing import DevicePlan, Timer, make_timer, plan_device
from ddpnet.errors import CheckFailed, ConfigError

#: progress(done, total, label) on rank 0
Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class Listener:
    """Rank 0's view of the sweep as it goes, so rows are printed when they finish: ``start``
    gets the result's head (backend, ranks, device, link; no rows yet), ``measuring`` the
    row about to run (done, total, label), ``row`` each finished one."""

    start: Callable[[BenchResult], None]
    measuring: Progress
    row: Callable[[BenchRow], None]


def row_label(coll: str, size: int, inplace: bool, places: int) -> str:
    """``all_reduce 64M`` (``(out-of-place)`` where the collective has both places)."""
    return f"{coll} {format_size(size)}" + ("" if inplace or places < 2 else " (out-of-place)")

#: relative tolerance of the result check per dtype (data are small integers: sums, max, min
#: and products are exact at small world sizes; avg and low precision need slack)
RTOL = {"float64": 1e-12, "float32": 1e-5, "float16": 1e-3, "bfloat16": 1e-2, "int32": 0.0}


def places(coll: Collective, mode: str) -> tuple[bool, ...]:
    """The in-place variants to run for ``--mode`` (a collective without one is skipped)."""
    if mode == "inplace":
        return tuple(p for p in coll.places if p)
    if mode == "outofplace":
        return tuple(p for p in coll.places if not p)
    return coll.places


def count_wrong(torch: Any, out: Any, expected: Any, dtype: str) -> int:
    """Elements of ``out`` differing from the float64 ``expected`` beyond the dtype's rtol."""
    got = out.to(torch.float64)
    exp = expected.to(got.device)
    if got.shape != exp.shape:
        return int(max(got.numel(), exp.numel()))
    tol = RTOL.get(dtype, 1e-5) * exp.abs() + (0.0 if dtype == "int32" else 1e-12)
    return int(((got - exp).abs() > tol).sum().item())


class Driver:
    """Measures rows for one config on one rank; ``registry`` is injectable for tests."""

    def __init__(self, cfg: BenchConfig, torch: Any, dist: Any, plan: DevicePlan,
                 registry: Mapping[str, Collective] = REGISTRY,
                 timer: Timer | None = None) -> None:
        self.cfg = cfg
        self.torch = torch
        self.dist = dist
        self.plan = plan
        self.registry = registry
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.backend = str(dist.get_backend())
        self.device = torch.device(plan.device)
        self.timer = timer or make_timer(plan, torch)
        self.ctx = Ctx(torch, dist, self.rank, self.world, self.device, cfg.dtype, cfg.op)

    def sync(self) -> None:
        if self.plan.is_cuda:
            self.torch.cuda.synchronize(self.device)
            self.dist.barrier(device_ids=[self.device.index])
        else:
            self.dist.barrier()

    def work(self) -> tuple[list[tuple[Collective, bool, int, int]], list[Skipped]]:
        """Every (collective, inplace, size, count) to measure, and what is skipped and why."""
        todo, skipped = [], []
        elsize = DTYPES[self.cfg.dtype]
        for name in self.cfg.collectives:
            coll = self.registry[name]
            reason = coll.unsupported(self.backend, self.cfg.op, self.world)
            chosen = places(coll, self.cfg.mode)
            if reason is None and not chosen:
                reason = f"has no {self.cfg.mode} variant in torch.distributed"
            if reason:
                skipped.append(Skipped(name, reason))
                continue
            for inplace in chosen:
                for size in self.cfg.sizes():
                    count = coll.count(size, elsize, self.world)
                    if count > 0:
                        todo.append((coll, inplace, size, count))
        return todo, skipped

    def measure(self, coll: Collective, inplace: bool, count: int,
                link_gbps: float | None) -> BenchRow:
        torch, ctx, cfg = self.torch, self.ctx, self.cfg
        bufs = coll.buffers(ctx, count, inplace)
        coll.fill(ctx, bufs)
        for _ in range(cfg.warmup):
            coll.call(ctx, bufs)
        times = []
        for _ in range(cfg.iters):
            self.sync()
            self.timer.start()
            coll.call(ctx, bufs)
            times.append(self.timer.stop())
        slowest = torch.tensor(times, dtype=torch.float64, device=self.device)
        self.dist.all_reduce(slowest, op=self.dist.ReduceOp.MAX)
        wrong = None
        if cfg.check:
            coll.fill(ctx, bufs)
            self.sync()
            coll.call(ctx, bufs)
            expected = coll.expected(ctx, count)
            mine = 0 if expected is None else count_wrong(torch, bufs.out, expected, cfg.dtype)
            total = torch.tensor([mine], dtype=torch.int64, device=self.device)
            self.dist.all_reduce(total)
            wrong = int(total.item())
        nbytes = count * DTYPES[cfg.dtype]
        return make_row(coll.name, nbytes, count, cfg.dtype, cfg.op if coll.reduces else None,
                        inplace, slowest.cpu().tolist(), coll.bus_factor(self.world),
                        link_gbps, wrong)


def run(
    config: BenchConfig,
    *,
    registry: Mapping[str, Collective] = REGISTRY,
    listener: Listener | None = None,
    environ: Mapping[str, str] | None = None,
    link: LinkRate | None = None,
) -> BenchResult:
    """Benchmark on every rank of the initialised default process group; same result on all.

    ``link`` skips the baseline measurement (a caller that already measured it). A
    collective that fails (torch's process-group timeout included) is a CheckFailed naming
    it, its size and the rows finished before it.
    """
    import torch
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise ConfigError("ddpnet.bench.run needs an initialised process group",
                          "call ddpnet.init() first, or run `ddpnet bench --local N`")
    env = os.environ if environ is None else environ
    backend = str(dist.get_backend())
    cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    current = torch.cuda.current_device() if backend == "nccl" and cuda_count else None
    plan = plan_device(backend, env, cuda_count, current)
    if plan.is_cuda:
        torch.cuda.set_device(torch.device(plan.device))
    config = config.on_device(plan.is_cuda)
    driver = Driver(config, torch, dist, plan, registry)
    if link is None:
        link = _measure_link(driver, env)
    todo, skipped = driver.work()
    head = BenchResult(backend, driver.world, plan.device, link, (), tuple(skipped),
                       config=_config_dict(config))
    tell = listener if driver.rank == 0 else None
    if tell:
        tell.start(head)
    rows: list[BenchRow] = []
    for i, (coll, inplace, size, count) in enumerate(todo):
        label = row_label(coll.name, size, inplace, len(coll.places))
        if tell:
            tell.measuring(i, len(todo), label)
        try:
            rows.append(driver.measure(coll, inplace, count, link.gbps))
        except RuntimeError as exc:  # torch's DistBackendError/timeout: which row, not where
            raise _failed(label, exc, len(rows), len(todo)) from None
        if tell:
            tell.row(rows[-1])
    if tell:
        tell.measuring(len(todo), len(todo), "done")
    return replace(head, rows=tuple(rows))


def _failed(label: str, exc: RuntimeError, done: int, total: int) -> CheckFailed:
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()),
                 type(exc).__name__)
    return CheckFailed(f"{label} failed after {done} of {total} rows: {first[:300]}",
                       "a timeout names a stuck or lost rank: run `ddpnet check` on these "
                       "nodes, or raise --timeout for a slow link")


def _measure_link(driver: Driver, env: Mapping[str, str]) -> LinkRate:
    """The baseline, measured by every rank together (objects exchanged over the group)."""
    def allgather(obj: Any) -> list[Any]:
        out: list[Any] = [None] * driver.world
        driver.dist.all_gather_object(out, obj)
        return out

    master = env.get("MASTER_ADDR") or _resolved_master(env)
    return measure_link(driver.cfg.baseline, driver.cfg.baseline_seconds, driver.rank,
                        allgather, backend=driver.backend, environ=env, master_addr=master)


def _resolved_master(environ: Mapping[str, str]) -> str:
    from ddpnet.env.resolve import resolve

    return resolve(environ).master_addr


def _config_dict(cfg: BenchConfig) -> dict[str, Any]:
    from dataclasses import asdict

    out = asdict(cfg)
    out["collectives"] = list(cfg.collectives)
    return out

"""The staged check as run by one rank (edge: TCPStore, sockets, torch.distributed).

Rank 0 hosts torch's c10d TCPStore on MASTER_PORT and judges; every rank publishes what it
sees under its own keys and follows rank 0's go/stop decision after each stage, so a failure
anywhere stops everyone within one stage budget instead of hanging. Store keys per rank are
O(1) per stage (registration, facts, mesh row, pg result, bandwidth column, ack).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from ddpnet.check import mesh, tournament
from ddpnet.check.causes import Cause, host_label
from ddpnet.check.compare import NodeFacts, compare_facts
from ddpnet.check.deps import Deps
from ddpnet.check.local import Selected
from ddpnet.check.registration import Registration, judge_registrations
from ddpnet.check.report import CheckReport
from ddpnet.config import DistConfig
from ddpnet.errors import RendezvousError

PREFIX = "ddpnet/check/"
#: the bandwidth matrix is on by default up to this many ranks (N-1 rounds)
MATRIX_AUTO_MAX = 64

Progress = Callable[[str], None]


@dataclass(frozen=True)
class CheckOptions:
    matrix: bool | None = None
    bench: bool = False
    #: budget of one waiting stage (facts, mesh, process group)
    stage_timeout: float = 20.0
    #: how long rank 0 waits for every rank to join
    join_timeout: float = 10.0
    connect_timeout: float = 3.0
    bw_seconds: float = 1.0
    fanout: int = 32
    backend: str = "auto"

    def matrix_on(self, world: int) -> bool:
        return self.matrix if self.matrix is not None else world <= MATRIX_AUTO_MAX


@dataclass(frozen=True)
class RankOutcome:
    """What this rank prints: rank 0 the report, others one line."""

    rank: int
    host: str
    ok: bool
    line: str
    report: CheckReport | None = None
    own_cause: Cause | None = None


class StageTimeout(Exception):
    pass


@dataclass
class _Ctx:
    cfg: DistConfig
    opts: CheckOptions
    deps: Deps
    sel: Selected
    store: Any
    progress: Progress
    uid: str = field(default_factory=lambda: uuid.uuid4().hex)
    timings: dict[str, float] = field(default_factory=dict)

    def key(self, name: str) -> str:
        return PREFIX + name

    def set(self, name: str, value: Any) -> None:
        self.store.set(self.key(name), json.dumps(value))

    def get(self, name: str, timeout: float) -> Any:
        try:
            self.store.wait([self.key(name)], timedelta(seconds=max(timeout, 0.01)))
        except Exception as exc:  # torch raises DistStoreError/RuntimeError on timeout
            raise StageTimeout(name) from exc
        return json.loads(self.store.get(self.key(name)))

    def publish(self, stage: str, rank: int, value: Any) -> None:
        self.set(f"{stage}/{rank}", value)
        self.store.add(self.key(f"{stage}/n"), 1)

    def gather(self, stage: str, ranks: list[int], timeout: float) -> dict[int, Any]:
        """Rank 0: wait (bounded) until every rank in ``ranks`` published; O(1) polling."""
        deadline = time.monotonic() + timeout
        want = len(ranks)
        while time.monotonic() < deadline:
            if int(self.store.add(self.key(f"{stage}/n"), 0)) >= want:
                break
            time.sleep(0.02)
        out: dict[int, Any] = {}
        for r in ranks:
            if self.store.check([self.key(f"{stage}/{r}")]):
                out[r] = json.loads(self.store.get(self.key(f"{stage}/{r}")))
        return out


def _me(ctx: _Ctx, host: str) -> Registration:
    return Registration(
        rank=ctx.cfg.rank, world_size=ctx.cfg.world_size, master_port=ctx.cfg.master_port,
        host=host, address=ctx.sel.address, interface=ctx.sel.interface, pid=os.getpid(),
        uid=ctx.uid, launcher=ctx.cfg.launcher,
    )


def _bind_error(cfg: DistConfig, host: str) -> RendezvousError:
    return RendezvousError(
        "port-in-use",
        f"rank 0 cannot listen on MASTER_PORT {cfg.master_port} on {host}: "
        "the port is already in use (another job or a stale rank 0)",
        f"pick a free port (export MASTER_PORT=...) on every node or stop the process "
        f"holding it: ss -ltnp 'sport = :{cfg.master_port}'",
        host=host, rank=0)


def _listen_early(cfg: DistConfig, host: str) -> int | None:
    """Rank 0 binds MASTER_PORT before importing torch, so early ranks connect instead of
    being refused; returns the listening fd for TCPStore(master_listen_fd=...)."""
    import errno

    if cfg.world_size <= 1:
        return None
    family = socket.AF_INET6 if ":" in cfg.master_addr else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", cfg.master_port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            raise _bind_error(cfg, host) from None
        return None
    return int(sock.detach())  # the store owns it from now on


def _preflight_patiently(cfg: DistConfig, deps: Deps, sel: Selected,
                         opts: CheckOptions) -> None:
    """A dropped SYN is named after ``connect_timeout``; a refusal is retried up to the join
    timeout, since rank 0 may simply start later than this rank."""
    deadline = time.monotonic() + opts.join_timeout
    while True:
        try:
            deps.preflight(cfg, sel, opts.connect_timeout)
            return
        except RendezvousError as exc:
            if exc.cause != "master-port-refused" or time.monotonic() >= deadline:
                raise


def _open_store(cfg: DistConfig, deps: Deps, sel: Selected, opts: CheckOptions,
                listen_fd: int | None = None) -> Any:
    """Rank 0 hosts the store on MASTER_PORT (on the early socket); others connect."""
    import torch.distributed as dist

    host = socket.gethostname()
    if cfg.rank == 0:
        try:
            if listen_fd is not None:
                return dist.TCPStore(  # type: ignore[attr-defined]
                    cfg.master_addr, cfg.master_port, None, True,
                    timedelta(seconds=opts.stage_timeout), wait_for_workers=False,
                    master_listen_fd=listen_fd)
            return dist.TCPStore(  # type: ignore[attr-defined]
                cfg.master_addr, cfg.master_port, None, True,
                                 timedelta(seconds=opts.stage_timeout), wait_for_workers=False)
        except Exception as exc:
            text = str(exc)
            if "in use" in text or "EADDRINUSE" in text or "errno: 98" in text:
                raise _bind_error(cfg, host) from None
            raise RendezvousError(
                "master-no-route",
                f"rank 0 cannot host the store on {cfg.master_addr}:{cfg.master_port}: "
                f"{text.splitlines()[0] if text else type(exc).__name__}",
                "MASTER_ADDR must be an address of rank 0's node",
                host=host, rank=0) from None
    try:
        return dist.TCPStore(  # type: ignore[attr-defined]
                cfg.master_addr, cfg.master_port, None, False,
                             timedelta(seconds=max(opts.connect_timeout * 3, 5.0)))
    except Exception as exc:
        raise RendezvousError(
            "master-port-refused",
            f"rank {cfg.rank} on {host} could not join the store at "
            f"{cfg.master_addr}:{cfg.master_port}: {str(exc).splitlines()[0] if str(exc) else exc}",
            "start rank 0 first and use the same MASTER_ADDR/MASTER_PORT everywhere",
            host=host, rank=cfg.rank) from None


def run_check(cfg: DistConfig, opts: CheckOptions, deps: Deps,
              environ: Mapping[str, str], progress: Progress = lambda _m: None) -> RankOutcome:
    """Run every stage on this rank. Raises RendezvousError when this rank cannot even join."""
    host = socket.gethostname()
    started = time.monotonic()
    sel = deps.select(cfg, environ)
    # the facts (the doctor: 1-4 s) are gathered while this rank joins
    facts_future: Future[dict[str, Any]] = Future()

    def collect() -> None:
        try:
            facts_future.set_result(deps.facts(cfg, sel))
        except BaseException as exc:  # reported as this rank's facts error
            facts_future.set_exception(exc)

    threading.Thread(target=collect, name="ddpnet-check-facts", daemon=True).start()
    # plain sockets before torch's (slow) import: an unreachable master is named at once,
    # and rank 0 listens on MASTER_PORT at once (the store takes the socket over)
    listen_fd = None
    if cfg.rank == 0:
        deps.preflight(cfg, sel, opts.connect_timeout)  # MASTER_ADDR is ours, port free
        listen_fd = _listen_early(cfg, host)
    else:
        _preflight_patiently(cfg, deps, sel, opts)
    import warnings

    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    # c10d's C++ warnings (a peer's reverse DNS) are noise on every rank's stderr
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    import torch.distributed  # noqa: F401  (here, before the facts thread: torch's import
    # is not thread-safe)

    for k, v in sel.env.items():
        if not os.environ.get(k):  # the automatic choice; a user's own value stays
            os.environ[k] = v
    listener = mesh.Listener(sel.address)
    try:
        store = _open_store(cfg, deps, sel, opts, listen_fd)
        ctx = _Ctx(cfg, opts, deps, sel, store, progress)
        ctx.timings["connect"] = time.monotonic() - started
        if cfg.rank == 0:
            return _rank0(ctx, host, facts_future, listener, started)
        return _worker(ctx, host, facts_future, listener)
    finally:
        listener.close()


# ----------------------------------------------------------------------------- rank 0

def _rank0(ctx: _Ctx, host: str, facts_future: Future[dict[str, Any]],
           listener: mesh.Listener, started: float) -> RankOutcome:
    cfg, opts = ctx.cfg, ctx.opts
    world = cfg.world_size
    causes: list[Cause] = []
    stages: dict[str, str] = {}
    t = time.monotonic()
    own = _me(ctx, host)
    ctx.progress(f"rendezvous: waiting for {world} ranks on {cfg.master_addr}:"
                 f"{cfg.master_port} (up to {opts.join_timeout:g} s)")
    n = int(ctx.store.add(ctx.key("reg/n"), 1))
    ctx.set(f"reg/{n}", json.loads(own.to_json()))
    deadline = t + opts.join_timeout  # from the moment the store is up
    while time.monotonic() < deadline:
        n = int(ctx.store.add(ctx.key("reg/n"), 0))
        if n >= world:
            time.sleep(0.2)  # a duplicate or an extra rank arriving right behind
            n = int(ctx.store.add(ctx.key("reg/n"), 0))
            break
        time.sleep(0.02)
    arrivals: list[Registration] = []
    for i in range(1, n + 1):
        try:
            arrivals.append(Registration(**ctx.get(f"reg/{i}", 2.0)))
        except StageTimeout:
            continue
    verdict = judge_registrations(own, arrivals, waited_s=time.monotonic() - t)
    causes.extend(verdict.causes)
    roster = list(verdict.roster)
    ctx.timings["rendezvous"] = time.monotonic() - t
    stages["rendezvous"] = "fail" if verdict.causes else "pass"
    ctx.progress(f"rendezvous: {len(arrivals)} joined in {ctx.timings['rendezvous']:.1f} s"
                 + (f" - {', '.join(c.id for c in verdict.causes)}" if verdict.causes else ""))
    labels = [r.label for r in roster]
    ranks = [r.rank for r in roster]
    plan = {"ok": verdict.ok, "t0": time.time(), "world": world,
            "uids": {str(r.rank): r.uid for r in roster},
            "matrix": opts.matrix_on(world), "bench": opts.bench and ctx.deps.bench is not None,
            "causes": [c.to_dict() for c in verdict.causes]}
    ctx.set("plan", plan)
    nodes = [{"rank": r.rank, "host": r.host, "address": r.address, "interface": r.interface,
              "pid": r.pid, "status": "joined"} for r in roster]
    report_kw: dict[str, Any] = {"world_size": world,
                                 "master": f"{cfg.master_addr}:{cfg.master_port}"}

    def finish(**extra: Any) -> RankOutcome:
        ctx.timings["total"] = time.monotonic() - started
        report = CheckReport(causes=tuple(causes), nodes=tuple(nodes), timings=ctx.timings,
                             stages=stages, **report_kw, **extra)
        root = report.root
        ctx.set("result", {"verdict": report.verdict,
                           "root": root.to_dict() if root else None})
        t_ack = time.monotonic()
        _wait_acks(ctx, len(roster) - 1, 3.0)
        ctx.timings["acks"] = time.monotonic() - t_ack
        return RankOutcome(0, host, report.verdict == "pass",
                           _line(0, host, ctx.sel.address, report.verdict, root), report)

    if not verdict.ok:
        return finish()

    # ---- facts
    t = time.monotonic()
    ctx.progress("facts: collecting versions, interfaces, MTU, clocks")
    my_facts = _facts_record(ctx, facts_future, listener, clock_offset=0.0)
    ctx.publish("facts", 0, my_facts)
    got = ctx.gather("facts", ranks, opts.stage_timeout)
    lost = [r for r in ranks if r not in got]
    if lost:
        causes.append(_timeout_cause("facts", lost, labels, roster))
    node_facts = [NodeFacts(r, got[r]) for r in sorted(got)]
    causes.extend(compare_facts(node_facts))
    for node in nodes:
        f = got.get(int(str(node["rank"])), {})
        node.update({k: f.get(k) for k in ("python", "torch", "cuda", "nccl", "mtu", "subnet",
                                          "hostname_loopback", "clock_offset_s", "doctor")})
        node["host"] = f.get("hostname", node["host"])
    ctx.timings["facts"] = time.monotonic() - t
    stages["facts"] = "fail" if any(c.stage == "facts" and c.severity == "fail"
                                    for c in causes) else "pass"
    ctx.progress(f"facts: compared {len(got)} ranks in {ctx.timings['facts']:.1f} s")

    # ---- reachability
    t = time.monotonic()
    peers = [[got[r]["address"], got[r]["mesh_port"]] if r in got else None
             for r in range(world)]
    ctx.set("stage/mesh", {"go": not lost, "peers": peers})
    if lost:
        return finish()
    ctx.progress(f"reachability: {world} x {world} connects (fan-out {opts.fanout})")
    row = mesh.probe_row(0, [tuple(p) if p else None for p in peers],  # type: ignore[misc]
                         timeout=opts.connect_timeout, fanout=opts.fanout)
    ctx.publish("mesh", 0, row)
    rows = ctx.gather("mesh", ranks, opts.stage_timeout + opts.connect_timeout * 2)
    matrix = tuple(tuple(rows.get(i, [mesh.UNKNOWN] * world)) for i in range(world))
    lost = [r for r in ranks if r not in rows]
    if lost:
        causes.append(_timeout_cause("reachability", lost, labels, roster))
    mesh_causes = mesh.analyze(matrix, labels, [p[1] if p else None for p in peers],
                               cfg.master_port, str(got[0].get("subnet") or "<cluster-subnet>"))
    causes.extend(mesh_causes)
    report_kw["reachability"] = matrix
    ctx.timings["reachability"] = time.monotonic() - t
    stages["reachability"] = "fail" if mesh_causes or lost else "pass"
    ctx.progress(f"reachability: {sum(s == mesh.OK for r in matrix for s in r)} of "
                 f"{world * (world - 1)} links ok in {ctx.timings['reachability']:.1f} s")
    go = not mesh_causes and not lost and not any(c.id == "hostname-loopback"
                                                  and c.severity == "fail" for c in causes)
    ctx.set("stage/pg", {"go": go})
    if not go:
        return finish()

    # ---- process group + bandwidth + bench (the group stays up for the bench)
    pg = _process_group(ctx, world)
    ctx.publish("pg", 0, pg)
    pgs = ctx.gather("pg", ranks, opts.stage_timeout + 5)
    report_kw["allreduce"] = _allreduce_summary(pgs, ranks)
    bad = [r for r in ranks if not pgs.get(r, {}).get("ok")]
    if bad:
        causes.append(Cause(
            id="process-group-failed" if any(not pgs.get(r, {}).get("wrong") for r in bad)
            else "allreduce-wrong",
            stage="process-group",
            ranks=tuple(bad), hosts=tuple(labels[ranks.index(r)] for r in bad),
            detail="; ".join(f"rank {r}: {pgs.get(r, {}).get('error', 'no answer')}"
                             for r in bad),
            fix="run `ddpnet doctor` on these nodes; pin the interface with "
                "GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME",
        ))
    ctx.timings["process_group"] = max(float(p.get("seconds", 0)) for p in pgs.values()) \
        if pgs else 0.0
    stages["process_group"] = "fail" if bad else "pass"
    ctx.progress(f"process group: all_reduce {'ok' if not bad else 'FAILED'} "
                 f"in {ctx.timings['process_group']:.1f} s")
    ctx.set("stage/bw", {"go": not bad and plan["matrix"]})
    if not bad and plan["matrix"]:
        t = time.monotonic()
        ctx.progress(f"bandwidth: {world - 1 + world % 2} rounds x {opts.bw_seconds:g} s")
        try:
            _bandwidth_rounds(ctx, world, peers, listener)
        except StageTimeout as exc:  # a rank stopped answering mid-tournament
            ctx.publish("bwcol", 0, [None] * world)
            stuck = [r for r in ranks if r != 0]
            causes.append(Cause(
                id="stage-timeout", stage="bandwidth", ranks=tuple(stuck),
                hosts=tuple(labels[ranks.index(r)] for r in stuck),
                detail=f"the bandwidth round barrier ({exc}) timed out: a rank died or hung",
                fix="look at those ranks' own output; rerun with --no-matrix to skip the stage",
            ))
        cols = ctx.gather("bwcol", ranks, opts.stage_timeout)
        gbps: list[list[float | None]] = [[None] * world for _ in range(world)]
        for dst, col in cols.items():
            for src, v in enumerate(col):
                gbps[src][dst] = v
        report_kw["bandwidth_gbps"] = tuple(tuple(r) for r in gbps)
        bw_causes = tournament.analyze(gbps, labels)
        if len({(r.host, r.address) for r in roster}) == 1:
            # one host over loopback: the streams compete for CPUs, not for a network
            bw_causes = [dataclasses.replace(
                c, severity="warn",
                detail=c.detail + " (all ranks on one host: this measures CPU contention, "
                "not the network)") for c in bw_causes]
        causes.extend(bw_causes)
        ctx.timings["bandwidth"] = time.monotonic() - t
        stages["bandwidth"] = "pass" if not bw_causes else (
            "fail" if any(c.severity == "fail" for c in bw_causes) else "warn")
        ctx.progress(f"bandwidth: done in {ctx.timings['bandwidth']:.1f} s")
    if plan["bench"] and (bad or ctx.deps.bench is None):
        ctx.set("stage/bench", {"go": False, "link": 0.0})
    elif plan["bench"]:
        t = time.monotonic()
        report_kw["bench"] = _bench(ctx, report_kw.get("bandwidth_gbps", ()))
        ctx.timings["bench"] = time.monotonic() - t
        stages["bench"] = "pass" if "error" not in report_kw["bench"] else "fail"
    t = time.monotonic()
    _destroy_pg()
    ctx.timings["teardown"] = time.monotonic() - t
    return finish()


def _wait_acks(ctx: _Ctx, expected: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while expected > 0 and time.monotonic() < deadline:
        if int(ctx.store.add(ctx.key("ack"), 0)) >= expected:
            return
        time.sleep(0.02)


def _timeout_cause(stage: str, lost: list[int], labels: list[str],
                   roster: list[Registration]) -> Cause:
    by_rank = {r.rank: r.label for r in roster}
    return Cause(
        id="stage-timeout", stage=stage, ranks=tuple(lost),
        hosts=tuple(by_rank.get(r, "?") for r in lost),
        detail=f"rank(s) {', '.join(map(str, lost))} did not finish the {stage} stage in time",
        fix="look at those ranks' own output; run `ddpnet doctor` there",
    )


def _allreduce_summary(pgs: dict[int, Any], ranks: list[int]) -> dict[str, Any]:
    ok = [r for r in ranks if pgs.get(r, {}).get("ok")]
    seconds = [float(p.get("allreduce_s", 0)) for p in pgs.values() if p.get("ok")]
    first: dict[str, Any] = next(iter(pgs.values()), {})
    return {"ok": len(ok) == len(ranks), "ranks_ok": len(ok), "backend": first.get("backend"),
            "expected": first.get("expected"), "max_seconds": max(seconds) if seconds else None}


def _bench(ctx: _Ctx, gbps: Any) -> dict[str, Any]:
    vals = [v for row in gbps for v in row if v is not None]
    link = min(vals) if vals else 0.0  # a ring all_reduce moves at its slowest link
    assert ctx.deps.bench is not None
    ctx.set("stage/bench", {"go": True, "link": link})
    try:
        return ctx.deps.bench(link)
    except Exception as exc:  # the bench is optional: report, do not crash the check
        return {"error": str(exc)}


# ----------------------------------------------------------------------------- shared

def _facts_record(ctx: _Ctx, fut: Future[dict[str, Any]], listener: mesh.Listener,
                  clock_offset: float | None) -> dict[str, Any]:
    try:
        facts = dict(fut.result(timeout=ctx.opts.stage_timeout))
    except Exception as exc:
        facts = {"error": f"facts failed: {exc}"}
    facts.setdefault("hostname", socket.gethostname())
    facts["address"] = ctx.sel.address
    facts["interface"] = ctx.sel.interface
    facts["mesh_port"] = listener.port
    facts["clock_offset_s"] = clock_offset
    facts["selection_problems"] = [list(p) for p in ctx.sel.problems]
    return facts


def _process_group(ctx: _Ctx, world: int) -> dict[str, Any]:
    """init_process_group on our own store (no second rendezvous), a checked all_reduce,
    a barrier; the group stays up for the bench and is destroyed at the end."""
    t = time.monotonic()
    try:
        import torch
        import torch.distributed as dist

        backend = ctx.opts.backend
        if backend == "auto":
            backend = "nccl" if torch.cuda.is_available() else "gloo"
        device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" \
            else torch.device("cpu")
        dist.init_process_group(backend, store=dist.PrefixStore(  # type: ignore[attr-defined]
                PREFIX + "pg", ctx.store),
                                rank=ctx.cfg.rank, world_size=world,
                                timeout=timedelta(seconds=ctx.opts.stage_timeout))
        ta = time.monotonic()
        x = torch.full((1024,), float(ctx.cfg.rank + 1), device=device)
        dist.all_reduce(x)
        expected = world * (world + 1) / 2
        good = bool(torch.all(x == expected).item())
        allreduce_s = time.monotonic() - ta
        dist.barrier()
        if not good:
            return {"ok": False, "wrong": True, "backend": backend, "expected": expected,
                    "error": f"all_reduce gave {x[0].item()} instead of {expected}",
                    "seconds": time.monotonic() - t}
        return {"ok": True, "backend": backend, "expected": expected,
                "allreduce_s": allreduce_s, "seconds": time.monotonic() - t}
    except Exception as exc:
        return {"ok": False, "error": str(exc).splitlines()[0][:300] if str(exc) else repr(exc),
                "seconds": time.monotonic() - t}


def _destroy_pg() -> None:
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:
        pass


def _round_barrier(ctx: _Ctx, rnd: int, world: int, timeout: float) -> None:
    n = int(ctx.store.add(ctx.key(f"bw/{rnd}"), 1))
    if n == world:
        ctx.set(f"bw/{rnd}/go", 1)
    ctx.get(f"bw/{rnd}/go", timeout)


def _bandwidth_rounds(ctx: _Ctx, world: int, peers: list[Any],
                      listener: mesh.Listener) -> None:
    """Play every round: stream to this round's partner while it streams to us; publish the
    incoming column ``[src] -> Gb/s`` measured by our listener."""
    me = ctx.cfg.rank
    rounds = tournament.schedule(world)
    budget = ctx.opts.bw_seconds + ctx.opts.stage_timeout
    for rnd in range(len(rounds)):
        _round_barrier(ctx, rnd, world, budget)
        other = tournament.partner(rounds, rnd, me)
        if other is None or peers[other] is None:
            continue
        addr, port = peers[other]
        with contextlib.suppress(OSError):
            tournament.send_stream(addr, int(port), rnd, me, seconds=ctx.opts.bw_seconds,
                                   timeout=ctx.opts.connect_timeout + ctx.opts.bw_seconds)
        deadline = time.monotonic() + ctx.opts.connect_timeout + 2
        while (rnd, other) not in listener.received and time.monotonic() < deadline:
            time.sleep(0.01)
    col: list[float | None] = [None] * world
    for (_rnd, src), (nbytes, secs) in listener.received.items():
        if secs > 0:
            col[src] = round(nbytes * 8 / secs / 1e9, 4)
    ctx.publish("bwcol", me, col)


def _line(rank: int, host: str, address: str, verdict: str, root: Cause | dict[str, Any] | None
          ) -> str:
    who = f"rank {rank} {host_label(host, address)}"
    if root is None:
        return f"{who}: ok (cluster verdict {verdict})"
    rid = root.id if isinstance(root, Cause) else root.get("id")
    detail = root.detail if isinstance(root, Cause) else root.get("detail", "")
    return f"{who}: cluster verdict {verdict}: {rid}: {detail}"


# ----------------------------------------------------------------------------- other ranks

def _worker(ctx: _Ctx, host: str, facts_future: Future[dict[str, Any]],
            listener: mesh.Listener) -> RankOutcome:
    cfg, opts = ctx.cfg, ctx.opts
    me = cfg.rank
    n = int(ctx.store.add(ctx.key("reg/n"), 1))
    fresh = not ctx.store.check([ctx.key("plan")])
    ctx.set(f"reg/{n}", json.loads(_me(ctx, host).to_json()))
    budget = opts.join_timeout + opts.stage_timeout

    def stopped(why: str) -> RankOutcome:
        return RankOutcome(me, host, False, f"rank {me} {host_label(host, ctx.sel.address)}: "
                           f"stopped: {why}")

    try:
        plan = ctx.get("plan", budget)
        clock = time.time() - float(plan["t0"]) if fresh else None
        holder = plan["uids"].get(str(me))
        if holder != ctx.uid:
            who = f"rank {me} {host_label(host, ctx.sel.address)}"
            if holder is not None:
                return RankOutcome(me, host, False, f"{who}: duplicate-rank: another process "
                                   f"already holds RANK={me}")
            why = (f"RANK={me} is outside rank 0's WORLD_SIZE={plan['world']}"
                   if me >= int(plan["world"]) else "arrived after rank 0's join deadline")
            return RankOutcome(me, host, False, f"{who}: not checked: {why}")
        if not plan["ok"]:
            return _finish_worker(ctx, host, budget)
        ctx.publish("facts", me, _facts_record(ctx, facts_future, listener, clock))
        stage = ctx.get("stage/mesh", budget)
        if not stage["go"]:
            return _finish_worker(ctx, host, budget)
        peers = [tuple(p) if p else None for p in stage["peers"]]
        ctx.publish("mesh", me, mesh.probe_row(me, peers, timeout=opts.connect_timeout,
                                               fanout=opts.fanout))
        if not ctx.get("stage/pg", budget + opts.connect_timeout * 2)["go"]:
            return _finish_worker(ctx, host, budget)
        ctx.publish("pg", me, _process_group(ctx, cfg.world_size))
        bw = ctx.get("stage/bw", budget)
        if bw["go"]:
            _bandwidth_rounds(ctx, cfg.world_size, list(stage["peers"]), listener)
        if plan["bench"] and ctx.deps.bench is not None:
            try:
                bench = ctx.get("stage/bench", budget + 60)
                if bench["go"]:
                    ctx.deps.bench(float(bench["link"]))
            except Exception:  # the bench is optional; rank 0 reports its own outcome
                pass
        _destroy_pg()
        return _finish_worker(ctx, host, budget + 60)
    except StageTimeout as exc:
        return stopped(f"rank 0 did not answer in time (waiting for {exc})")


def _finish_worker(ctx: _Ctx, host: str, timeout: float) -> RankOutcome:
    me = ctx.cfg.rank
    try:
        result = ctx.get("result", timeout)
    except StageTimeout:
        return RankOutcome(me, host, False, f"rank {me} {host_label(host, ctx.sel.address)}: "
                           "stopped: rank 0 did not publish a verdict in time")
    with contextlib.suppress(Exception):
        ctx.store.add(ctx.key("ack"), 1)
    verdict = str(result.get("verdict"))
    return RankOutcome(me, host, verdict == "pass",
                       _line(me, host, ctx.sel.address, verdict, result.get("root")))


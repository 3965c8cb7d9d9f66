"""`check`, `init()` and the watch at 64 to 4,096 ranks, measured with simulated ranks
(issue 31; root required: it builds a two-node lab).

Rank 0 runs the real code in its own process on lab node 0 (`check`: ``run_rank`` whole,
with its doctor, its c10d TCPStore, its mesh listener and its coordinator; `init`: the
rendezvous preflight, the TCPStore and the ``GroupGuard``; `watch`: the hub process), so
its RSS and CPU are its own. The other ranks are threads in a few client processes on lab
node 1, each on its own address (many /32s on node 1's lab interface, all inside
198.18.0.0/15, routed from node 0 through node 1), and each runs the real rank code:

- check: ``worker.follow`` on a real ``RankContext`` (torch's TCPStore client, a real
  ``mesh.Listener`` and path-MTU echo); its facts are one real facts record of that node,
  cloned with the rank's address and a host name of its own;
- init: ``rendezvous`` preflight and a ``GroupGuard`` on torch's TCPStore, as ``init()`` runs
  them while the group forms (the process group itself is torch's and not simulated);
- watch: a ``heartbeat.Beacon`` per rank, connected to the real hub.

The process group stage of `check` (one gloo all_reduce over N ranks) is torch's own and is
not simulated: its per-rank result is published as a pass. A client process imports torch
once (torch's own store client); nothing is imported per rank.

    sudo .venv/bin/python benchmarks/scale_sim.py --command check --ranks 1024 \
        [--per-node 1] [--fault filtered-port|slow-link] --json   # one point, one JSON object
    sudo .venv/bin/python benchmarks/scale_sim.py        # the sweep: results/scale_sim.json

Exit status: 0 when the point reached a verdict, 1 when it did not (the JSON says why), 2
for what cannot be simulated (``--ranks`` below 2 or beyond the lab's route, ``--per-node``
below 1, ``--fault`` outside check, ``--hub-share`` outside (0, 1] or outside the watch, not
root): one line on stderr with a hint, before any lab is built.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import ipaddress
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PORT = 29620
#: the lab's subnet: node 0 (rank 0) is .0.1, node 1 (the simulated ranks) .0.2
SUBNET = "198.18.0.0/18"
#: simulated rank r's address: SIM_BASE + r (routed from node 0 through node 1)
SIM_BASE = ipaddress.ip_address("198.18.16.0")
SIM_ROUTE = "198.18.16.0/20"
#: simulated ranks per client process (threads): the launcher imports torch once and forks one
#: process per this many ranks (2,000+ Python threads in one process spend the 2 cores on
#: handing the GIL round, not on the ranks' work: 74 against 41 CPU-s at 1,024 ranks)
PER_PROCESS = 128
#: between two client processes' starts: ranks arrive over ~10 s at 4,096 (32 processes),
#: as a job's nodes start over seconds; 4,096 ranks started in the same instant on 2 cores
#: spent the rendezvous on the scheduler (every rank's first store call past 100 s)
RAMP_S = 0.3
#: the client processes' GIL switch interval from SWITCH_FROM ranks (CPython's default, 5 ms,
#: below: at 256 ranks 0.1 s held echoes and accepts behind busy threads, 9 s became 16 s;
#: at 1,024 single-rank nodes 5 ms made 12% of the CPU futex calls: 51-54 s became 43.5 s)
SWITCH_S, SWITCH_FROM = 0.1, 1024
SIZES = (64, 256, 1024, 4096)
#: the sweep's faulty points stop here (4,096 healthy takes minutes on the 2-core VM)
FAULTS_UP_TO = 1024
FAULTS = ("filtered-port", "slow-link")
COMMANDS = ("check", "init", "watch")
#: the issue's goals (seconds to verdict) on the 2-core VM
GOALS = {("check", 1024, None): 30.0, ("check", 4096, None): 120.0,
         ("check", 1024, "filtered-port"): 45.0, ("watch", 4096, None): 15.0}
RSS_GOAL_MIB = 1024.0


#: simulated ranks per simulated node (``--per-node``): they share its address, as a GPU
#: node's ranks do; rank 0 is alone on lab node 0. By default 8, a GPU node's ranks: the
#: issue's ranks are a job's GPUs (1,024 ranks: 128 nodes). ``--per-node 1`` makes every
#: rank a host of its own, each probing loss, MTU and a stream for its host: the hosts'
#: probes, which N nodes run on their own cores, then all run on this machine's (at 1,024
#: ~75 CPU-s against ~31 at 8 a node: docs/scaling.md)
DEFAULT_PER_NODE = 8
PER_NODE = DEFAULT_PER_NODE


def sim_node(rank: int) -> int:
    """The simulated node of ``rank`` (rank 0: node 0, lab node 0)."""
    return 0 if rank == 0 else 1 + (rank - 1) // PER_NODE


def node_ranks(rank: int, ranks: int) -> int:
    """How many of ``ranks`` share ``rank``'s simulated node (its last node may be short:
    a LOCAL_WORLD_SIZE above the world's is refused, as ``init()`` refuses it)."""
    if rank == 0:
        return 1
    first = 1 + (sim_node(rank) - 1) * PER_NODE
    return min(PER_NODE, ranks - first)


#: simulated nodes the lab's route holds (SIM_BASE + 1 ... within SIM_ROUTE)
MAX_NODES = ipaddress.ip_network(SIM_ROUTE).num_addresses - 1


def bad_input(ranks: int | None, per_node: int) -> str | None:
    """Why ``--ranks``/``--per-node`` cannot be simulated, with the fix (pure), or None."""
    if per_node < 1:
        return (f"--per-node {per_node}: a node has at least one rank; "
                "hint: --per-node 8 (a GPU node) or 1 (every rank a host)")
    if ranks is None:
        return None
    if ranks < 2:
        return (f"--ranks {ranks}: rank 0 and at least one simulated rank are needed; "
                "hint: --ranks 64 (or 256, 1024, 4096)")
    nodes = -(-(ranks - 1) // per_node)
    if nodes > MAX_NODES:
        return (f"--ranks {ranks} at --per-node {per_node} needs {nodes} simulated nodes, "
                f"and the lab's route {SIM_ROUTE} holds {MAX_NODES}; hint: at most "
                f"{MAX_NODES * per_node + 1} ranks at this --per-node, or raise --per-node")
    return None


def sim_address(rank: int) -> str:
    return str(SIM_BASE + sim_node(rank))


def sim_host(rank: int) -> str:
    return f"sim{sim_node(rank):05d}"


def cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write("SIMRESULT " + json.dumps(obj) + "\n")
    sys.stdout.flush()


# ============================================================== rank 0 and the rank clients

def timeouts(ranks: int) -> dict[str, float]:
    """The check's timeouts for N ranks: what a user sets for a large job (docs/scaling.md)."""
    join = max(10.0, ranks / 40)
    return {"join_timeout": join, "stage_timeout": max(20.0, ranks / 40)}


def check_options(args: argparse.Namespace) -> Any:
    from ddpnet.check.options import CheckOptions

    t = timeouts(args.ranks)
    return CheckOptions(matrix=False, full_mesh=args.full_mesh, join_timeout=t["join_timeout"],
                        stage_timeout=t["stage_timeout"])


def no_process_group() -> None:
    """The process-group stage is torch's (gloo over N ranks), not simulated: pass it."""
    from ddpnet.check.stages import allreduce

    def run_group(ctx: Any) -> dict[str, Any]:
        return {"ok": True, "backend": "gloo", "expected": ctx.world * (ctx.world + 1) / 2,
                "allreduce_s": 0.0, "seconds": 0.0, "simulated": True}

    allreduce.run_group = run_group


def rank0_check(args: argparse.Namespace) -> None:
    """Rank 0 of `ddpnet check`, all real but the process group."""
    from ddpnet.check.run import run_rank
    from ddpnet.check.tools import Tools

    no_process_group()
    started = time.time()
    result = run_rank(check_options(args), dict(os.environ), Tools())
    done = time.time()
    report = result.report
    out: dict[str, Any] = {"started": started, "done": done, "cpu_s": cpu_self(),
                           "max_rss_mib": rss_mib()}
    if report is None:
        out["verdict"] = f"failed: {result.failure}"
    else:
        d = report.to_dict()
        out.update(verdict=report.verdict, timings=d.get("timings"),
                   causes=[{"id": c["id"], "severity": c.get("severity"),
                            "hosts": c["hosts"][:8], "ranks": c["ranks"][:8],
                            "hosts_named": len(c["hosts"]), "ranks_named": len(c["ranks"])}
                           for c in d.get("causes", [])],
                   report_json_bytes=len(json.dumps(d)), notes=d.get("notes"),
                   verdict_at=done - float((d.get("timings") or {}).get("acks", 0.0)))
    emit(out)


def lowest_autogroup() -> None:
    """This process in a session (an autogroup) of its own at the autogroup's lowest weight.

    With the kernel's autogroups (``/proc/sys/kernel/sched_autogroup_enabled``, on by default)
    a process's nice value counts only against the processes of its own session; between
    sessions each autogroup gets an equal share. The lab starts rank 0 and the client
    processes in sessions of their own, so ``nice 19`` alone left rank 0's group (the watch
    hub, the store) ~0.6 of a core beside ~8,000 client threads: the hub at 4,096 ranks read
    its heartbeats 20 s late (22 MB queued) and named thousands of live ranks gone."""
    with contextlib.suppress(OSError):
        os.setsid()  # already a session leader: keep the one it leads
    with contextlib.suppress(OSError):
        Path("/proc/self/autogroup").write_text("19\n")


class Clients:
    """The simulated ranks of one client process: threads, each one real rank."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.first, self.count = args.first, args.count
        self.outcomes: list[str] = []
        self.lock = threading.Lock()
        self.marks: Milestones | None = None
        #: the start barrier (``run``): a child says it is ready, the launcher says go
        self.ready_fd, self.go_pipe = -1, (-1, -1)

    def env(self, rank: int) -> dict[str, str]:
        return {**os.environ, "RANK": str(rank), "LOCAL_RANK": str((rank - 1) % PER_NODE),
                "LOCAL_WORLD_SIZE": str(node_ranks(rank, self.args.ranks)),
                "WORLD_SIZE": str(self.args.ranks), "MASTER_ADDR": self.args.master,
                "MASTER_PORT": str(PORT)}

    def run(self, one: Callable[[int], str]) -> None:
        """Fork one process per PER_PROCESS ranks (everything imported and prepared before
        the fork is shared), run each share as threads there, wait for them all."""
        # rank 0 stands for a node of its own: the simulated ranks take the CPU it leaves
        # (on one 2-core host, ~16,000 client threads otherwise starve its store's one
        # thread: calls past 15 s, ranks given up at 4,096)
        os.nice(19)
        lowest_autogroup()
        # a thread waiting for the GIL wakes every switch interval to ask for it: 4,000
        # waiting rank threads at 5 ms made ~800,000 wake-ups a second, and each handoff
        # waited a scheduler round (ranks started 150 s after they were told to go)
        if self.args.ranks >= SWITCH_FROM:  # below, the default answers probes sooner
            sys.setswitchinterval(SWITCH_S)
        # what was imported and prepared (torch, the facts) is never garbage: out of the
        # collector's sight, a full collection walks only what the ranks made (it walked
        # torch's objects each time: ~6% of the clients' CPU at 1,024 single-rank hosts),
        # and the forked children do not copy the pages it would have touched
        gc.collect()
        gc.freeze()
        children = []
        last = self.first + self.count
        # a barrier: no rank runs before every process is forked and every thread started
        # (forks and thread starts behind thousands of running ranks came minutes late)
        ready, self.go_pipe = os.pipe(), os.pipe()
        for first in range(self.first, last, PER_PROCESS):
            pid = os.fork()
            if pid == 0:  # a share of the ranks; never returns
                code = 1
                try:
                    self.first, self.count = first, min(PER_PROCESS, last - first)
                    self.ready_fd = ready[1]
                    self._threads(one)
                    code = 0
                finally:
                    os._exit(code)
            children.append(pid)
        for _ in children:
            os.read(ready[0], 1)
        for _ in children:  # the processes' ranks arrive over RAMP_S x processes seconds
            os.write(self.go_pipe[1], b"g")
            time.sleep(RAMP_S)
        for pid in children:
            os.waitpid(pid, 0)
        emit({"first": None, "count": 0, "finished": 0, "ok": 0, "sample": [],
              "cpu_s": cpu_self(), "max_rss_mib": rss_mib()})  # the launcher's own

    def _threads(self, one: Callable[[int], str]) -> None:
        if self.marks is not None:
            self.marks.mark("forked")
        threading.stack_size(512 * 1024)
        # every thread is started before any rank runs: Thread.start() waits for the new
        # thread to take the GIL, and behind 100 running ranks each start took seconds (at
        # 4,096 ranks a process's last ranks started 200 s late, after rank 0 gave up)
        go = threading.Event()

        def body(rank: int) -> None:
            go.wait()
            try:
                line = one(rank)
            except Exception as exc:  # reported, never a traceback per rank
                line = f"rank {rank}: error: {type(exc).__name__}: {exc}"
            with self.lock:
                self.outcomes.append(line)

        threads = [threading.Thread(target=body, args=(r,), daemon=True)
                   for r in range(self.first, self.first + self.count)]
        for t in threads:
            t.start()
        os.write(self.ready_fd, b"r")
        os.read(self.go_pipe[0], 1)
        if self.marks is not None:  # a process's own marks: when it was told to go
            self.marks.mark("go")
        go.set()
        # stopped by the launcher (rank 0 is done, these ranks are not): say what was seen
        signal.signal(signal.SIGTERM, lambda _s, _f: (self._report(), os._exit(0)))
        deadline = time.monotonic() + self.args.timeout
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self._report()

    def _report(self) -> None:
        with self.lock:
            lines = list(self.outcomes)
        emit({"first": self.first, "count": self.count, "finished": len(lines),
              "ok": sum(passed(line) for line in lines), "sample": outcome_kinds(lines),
              "cpu_s": cpu_self(), "max_rss_mib": rss_mib(),
              "milestones": self.marks.times if self.marks else {}})


def passed(line: str) -> bool:
    """A rank's line says it finished with a passing verdict (warnings included)."""
    return ": ok" in line or "cluster verdict pass" in line


def outcome_kinds(lines: Sequence[str], most: int = 4) -> list[str]:
    """One line of each kind of outcome (digits aside), failures first, with its count
    (pure): what went wrong on 3 ranks of 4,095 is not lost among the rest."""
    import re

    kinds: dict[str, list[str]] = {}
    for line in lines:
        kinds.setdefault(re.sub(r"\d+", "#", line)[:160], []).append(line)
    order = sorted(kinds.values(), key=lambda v: (passed(v[0]), len(v)))
    return [f"{len(v)} x {v[0][:300]}" for v in order[:most]]


#: the steps of a simulated check rank whose times (seconds from the launch) a point reports
#: as percentiles: where the time goes at 4,096 ranks
MILESTONES = ("forked", "go", "started", "store", "to_rank0", "registered", "plan", "facts",
              "peers", "probed", "verdict")


class Milestones:
    """When the simulated ranks of this process reached each step (the rank code's own
    functions, wrapped): one time per rank and step, not said whose."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.times: dict[str, list[float]] = {m: [] for m in MILESTONES}

    def mark(self, name: str) -> None:
        self.times[name].append(round(time.time() - self.t0, 3))

    def wrap(self, module: Any, attr: str, name: str) -> None:
        """``module.attr`` marks ``name`` when it returns."""
        inner = getattr(module, attr)

        def wrapped(*a: Any, **kw: Any) -> Any:
            out = inner(*a, **kw)
            self.mark(name)
            return out

        setattr(module, attr, wrapped)

    def wrap_check(self) -> None:
        from ddpnet.check.stages import facts, pathmtu, reachability, rendezvous

        for module, attr, name in ((pathmtu, "probe_master", "to_rank0"),
                                   (rendezvous, "_register", "registered"),
                                   (rendezvous, "join", "plan"),
                                   (facts, "publish", "facts"),
                                   (reachability, "peers_for", "peers"),
                                   (reachability, "probe", "probed")):
            self.wrap(module, attr, name)


def percentiles(times: dict[str, list[float]]) -> dict[str, list[float]]:
    """Each milestone's [ranks, p50, p90, max] (pure)."""
    out = {}
    for name in MILESTONES:
        v = sorted(times.get(name) or ())
        if v:
            out[name] = [len(v), v[len(v) // 2], v[min(len(v) - 1, len(v) * 9 // 10)], v[-1]]
    return out


def check_clients(args: argparse.Namespace) -> None:
    """Simulated check ranks: ``worker.follow`` on a real context, one thread each."""
    from ddpnet.check import mesh
    from ddpnet.check.context import RankContext
    from ddpnet.check.store import join_store
    from ddpnet.check.tools import Tools
    from ddpnet.check.torchimport import import_torch
    from ddpnet.check.worker import follow
    from ddpnet.env.resolve import resolve

    import_torch()
    no_process_group()
    clients = Clients(args)
    opts = check_options(args)
    base_cfg = resolve(clients.env(clients.first))
    tools = Tools()
    base_sel = tools.select(base_cfg, clients.env(clients.first))
    facts = tools.facts(base_cfg, base_sel, clients.env(clients.first))
    marks = clients.marks = Milestones(args.t0)
    marks.wrap_check()

    def one(rank: int) -> str:
        marks.mark("started")
        address = sim_address(rank)
        host = sim_host(rank)
        cfg = resolve(clients.env(rank))
        sel = replace(base_sel, address=address)
        own: Future[dict[str, Any]] = Future()
        own.set_result(clone_facts(facts, rank, address, host))
        listener = mesh.Listener(address)
        try:
            store = join_store(cfg, opts, host)
            marks.mark("store")
            try:
                ctx = RankContext(cfg, opts, sel, store, listener, own, lambda _s: {}, host,
                                  time.monotonic(), probe_from=address)
                line = follow(ctx).line
                marks.mark("verdict")
                return line
            finally:
                store.close()
        finally:
            listener.close()

    clients.run(one)


def clone_facts(facts: dict[str, Any], rank: int, address: str, host: str) -> dict[str, Any]:
    """Node 1's real facts as rank ``rank`` on its own address would publish them."""
    prefix = SUBNET.split("/")[1]
    out = dict(facts)
    out["hostname"] = host
    out["ifaddrs"] = {name: [f"{address}/{prefix}"] for name in (facts.get("ifaddrs") or {})}
    out["hostname_addresses"] = [address]  # its own name resolves to its own address
    out["netns"] = f"{facts.get('netns')}-{host}"  # one namespace per simulated node
    return out


# ---------------------------------------------------------------- init(): rendezvous, guard

#: seconds every rank holds its GroupGuard, standing in for gloo forming the group
GUARD_S = 5.0
FORMED = "ddpnet/sim/formed"


def rank0_init(args: argparse.Namespace) -> None:
    """Rank 0 of ``init()``: the real rendezvous store (``open_store``: host, wait for every
    rank, say go) and ``GroupGuard`` while the group forms; the CPU the guard phase costs."""
    from ddpnet.check.torchimport import import_torch
    from ddpnet.env.resolve import resolve
    from ddpnet.rendezvous import GroupGuard, open_store

    import_torch()
    cfg = resolve(dict(os.environ))
    started = time.time()
    store = open_store(cfg, "rank0", 600.0, timeouts(args.ranks)["join_timeout"])
    go = time.time()
    cpu_go = cpu_self()
    with GroupGuard(cfg, "rank0"):
        time.sleep(GUARD_S)
        store.add(FORMED, 1)
        deadline = time.monotonic() + args.timeout
        while int(store.add(FORMED, 0)) < cfg.world_size and time.monotonic() < deadline:
            time.sleep(0.05)
    formed = time.time()
    emit({"started": started, "done": formed, "verdict_at": go,
          "verdict": "go" if int(store.add(FORMED, 0)) >= cfg.world_size else "incomplete",
          "timings": {"rendezvous": go - started, "guard": formed - go},
          "guard_cpu_per_s": (cpu_self() - cpu_go) / max(formed - go, 1e-6),
          "cpu_s": cpu_self(), "max_rss_mib": rss_mib()})
    time.sleep(1.0)  # the last ranks read the count before the store goes


def init_clients(args: argparse.Namespace) -> None:
    """Simulated ranks of ``init()``: ``open_store`` (agree, register, wait for go), then a
    ``GroupGuard`` (its own store connection, a check every 0.25 s) for GUARD_S."""
    from ddpnet.check.torchimport import import_torch
    from ddpnet.env.resolve import resolve
    from ddpnet.rendezvous import GroupGuard, open_store

    import_torch()
    clients = Clients(args)

    def one(rank: int) -> str:
        cfg = resolve(clients.env(rank))
        host = sim_host(rank)
        store = open_store(cfg, host, 600.0, timeouts(args.ranks)["join_timeout"])
        with GroupGuard(cfg, host, exit_now=lambda code: None):
            time.sleep(GUARD_S)
        store.add(FORMED, 1)
        return f"rank {rank}: ok"

    clients.run(one)


# ---------------------------------------------------------------- the watch: hub, heartbeats

#: the watch's timeout in the simulation, and when the stall begins after the launch
WATCH_TIMEOUT_S = 5.0
STALL_AFTER_S = 20.0


def watch_rank(rank: int, world: int, directory: Path, exits: list[float]) -> Any:
    """A rank's real heartbeat (``Beacon``) with a recorder that has run one all_reduce."""
    from ddpnet.watch.heartbeat import Beacon
    from ddpnet.watch.recorder import Recorder
    from ddpnet.watch.state import CollectiveRecord, RankState

    rec = Recorder()
    rec.use_fr = False
    now = time.time()
    rec.called.append(CollectiveRecord(seq=1, op="all_reduce", group="default_pg",
                                       started=now, ended=now, state="completed"))
    ident = RankState(rank=rank, world_size=world, host=sim_host(rank),
                      address=sim_address(rank) if rank else "", pid=os.getpid())
    return Beacon(rec, ident, directory, exit_now=lambda _code: exits.append(time.time()))


def stall(beacon: Any, rank: int, faulty: int) -> None:
    """Every rank but ``faulty`` enters all_reduce #2 and stays there (a rank that never
    calls it: the hang the watchdog names)."""
    from ddpnet.watch.state import CollectiveRecord

    if rank != faulty:
        beacon.recorder.called.append(CollectiveRecord(seq=2, op="all_reduce",
                                                       group="default_pg",
                                                       started=time.time()))


def rank0_watch(args: argparse.Namespace) -> None:
    """Rank 0 of the watch: the real hub process (started as ``init()`` starts it) and rank
    0's own heartbeat; the hub's CPU and memory, and when the verdict came."""
    import tempfile

    import psutil

    from ddpnet.env.resolve import resolve
    from ddpnet.watch.session import hub_ready, spawn_hub
    from ddpnet.watch.settings import WatchConfig, hub_port, job_token

    cfg = resolve(dict(os.environ))
    directory = Path(tempfile.mkdtemp(prefix="ddpnet-sim-watch-"))
    wc = WatchConfig(True, timeout=WATCH_TIMEOUT_S, directory=directory)
    started = time.time()
    hub = hub_ready(spawn_hub(cfg, wc, args.master))  # as init() starts it, on MASTER_ADDR
    if isinstance(hub, str):
        emit({"verdict": f"hub failed: {hub}"})
        return
    proc = psutil.Process(hub.pid)
    exits: list[float] = []
    beacon = watch_rank(0, cfg.world_size, directory, exits)
    beacon.connect(args.master, hub_port(cfg, wc), token=job_token(cfg))
    stall_at = args.t0 + STALL_AFTER_S
    samples: list[tuple[float, float, float]] = []  # (time, cpu s, rss MiB)
    stalled = False
    while hub.poll() is None and time.time() < args.t0 + args.timeout:
        with contextlib.suppress(psutil.Error):
            t = proc.cpu_times()
            samples.append((time.time(), t.user + t.system, proc.memory_info().rss / 2**20))
        if not stalled and time.time() >= stall_at:
            stall(beacon, 0, faulty_rank(cfg.world_size))
            stalled = True
        time.sleep(0.5)
    emit({"started": started, "stall_at": stall_at, "verdict_at": exits[0] if exits else None,
          "verdict": _watch_verdict(directory), "causes": _watch_named(directory),
          "timings": {"stall_to_verdict": exits[0] - stall_at if exits else None},
          **hub_load(samples, stall_at), "cpu_s": samples[-1][1] if samples else 0.0,
          "max_rss_mib": max((s[2] for s in samples), default=0.0),
          "rank0_process_cpu_s": cpu_self()})


def hub_load(samples: Sequence[tuple[float, float, float]], stall_at: float) -> dict[str, Any]:
    """The hub's CPU per second of wall time while every rank heartbeats (before the stall;
    pure)."""
    steady = [s for s in samples if stall_at - 10.0 <= s[0] <= stall_at]
    if len(steady) < 2:
        return {"hub_cores_steady": None}
    (t0, c0, _), (t1, c1, _) = steady[0], steady[-1]
    return {"hub_cores_steady": round((c1 - c0) / (t1 - t0), 3)}


def _watch_verdict(directory: Path) -> str | None:
    """The hub's report: its diagnosis kind and the ranks/hosts it names."""
    path = directory / "report.json"
    if not path.exists():
        return None
    report = json.loads(path.read_text())
    return str(report.get("kind") or "report")


def _watch_named(directory: Path) -> list[dict[str, Any]]:
    """The diagnosis as a cause list: its kind and the ranks/hosts it names."""
    path = directory / "report.json"
    if not path.exists():
        return []
    d = json.loads(path.read_text()).get("diagnosis") or {}
    ranks = [int(r) for r in d.get("ranks", [])][:8]
    return [{"id": d.get("kind"), "ranks": ranks, "hosts": [sim_host(r) for r in ranks],
             "summary": str(d.get("summary", ""))[:300]}]


def watch_clients(args: argparse.Namespace) -> None:
    """Simulated ranks of the watch: one real ``Beacon`` each, connected to the hub."""
    import tempfile

    from ddpnet.env.resolve import resolve
    from ddpnet.watch.settings import WatchConfig, hub_port, job_token

    clients = Clients(args)
    directory = Path(tempfile.mkdtemp(prefix="ddpnet-sim-watch-"))
    exits: list[float] = []
    faulty = faulty_rank(args.ranks)

    def one(rank: int) -> str:
        cfg = resolve(clients.env(rank))
        wc = WatchConfig(True, timeout=WATCH_TIMEOUT_S, directory=directory)
        beacon = watch_rank(rank, args.ranks, directory, exits)
        beacon.connect(args.master, hub_port(cfg, wc), token=job_token(cfg), patience=60.0)
        time.sleep(max(0.0, args.t0 + STALL_AFTER_S - time.time()))
        stall(beacon, rank, faulty)
        beacon.obeyed.wait(args.timeout)  # blocks: 4,096 threads polling would be the load
        beacon.stopped.set()
        return f"rank {rank}: ok (verdict)" if beacon.obeyed.is_set() else \
            f"rank {rank}: no verdict"

    clients.run(one)


# ============================================================== the lab around one point

def nft(namespace: str, ruleset: str) -> None:
    subprocess.run(["ip", "netns", "exec", namespace, "nft", "-f", "-"], input=ruleset,
                   text=True, check=True, capture_output=True, timeout=30)


def ip_batch(namespace: str, lines: Sequence[str]) -> None:
    subprocess.run(["ip", "-n", namespace, "-batch", "-"], input="\n".join(lines) + "\n",
                   text=True, check=True, capture_output=True, timeout=120)


def listen_drops(namespace: str) -> int:
    """TcpExt ListenOverflows + ListenDrops in a lab node so far: connections to a full
    accept queue (rank 0's store in a herd of joins) dropped, to be retried seconds later."""
    out = subprocess.run(["ip", "netns", "exec", namespace, "cat", "/proc/net/netstat"],
                         capture_output=True, text=True, timeout=30).stdout.splitlines()
    for names, values in zip(out[::2], out[1::2], strict=False):
        if names.startswith("TcpExt:"):
            row = dict(zip(names.split()[1:], values.split()[1:], strict=False))
            return int(row.get("ListenOverflows", 0)) + int(row.get("ListenDrops", 0))
    return 0


def count_store_bytes(namespace: str, master: str) -> None:
    """Counters of what leaves and enters rank 0's store port (IP bytes, headers included;
    ``served_rank0``: of that, to rank 0's own store client), from zero."""
    subprocess.run(["ip", "netns", "exec", namespace, "nft", "delete", "table", "inet",
                    "ddpsim"], capture_output=True, timeout=30)
    nft(namespace, f"""table inet ddpsim {{
  counter served {{ }}
  counter served_rank0 {{ }}
  counter received {{ }}
  chain out {{ type filter hook output priority 0;
    tcp sport {PORT} ip daddr {master} counter name served_rank0;
    tcp sport {PORT} counter name served; }}
  chain in {{ type filter hook input priority 0; tcp dport {PORT} counter name received; }}
}}
""")


def store_bytes(namespace: str) -> dict[str, int]:
    out = subprocess.run(["ip", "netns", "exec", namespace, "nft", "-j", "list", "counters",
                          "table", "inet", "ddpsim"], capture_output=True, text=True,
                         timeout=30)
    found: dict[str, int] = {}
    with contextlib.suppress(ValueError, KeyError):
        for item in json.loads(out.stdout)["nftables"]:
            c = item.get("counter")
            if c:
                found[c["name"]] = int(c["bytes"])
    return found


def faulty_rank(ranks: int) -> int:
    return ranks * 2 // 3 + 1


def apply_fault(namespace: str, fault: str | None, ranks: int) -> str | None:
    """One faulty simulated node (its address): filtered ephemeral ports, or a slow link
    (10 Mbit/s both ways)."""
    if fault is None:
        return None
    address = sim_address(faulty_rank(ranks))
    if fault == "filtered-port":
        # its firewall lets the master port and established flows through, drops new
        # connections to any other port (what a host firewall allowing fixed ports does)
        nft(namespace, f"""table inet ddpsimfault {{
  chain in {{ type filter hook input priority 0;
    ip daddr {address} ip saddr != {address} tcp dport != {PORT} ct state new drop;
  }}
}}
""")
    elif fault == "slow-link":
        # 10 Mbit/s to and from that address (an HTB class; this kernel has no netem), on
        # loopback (node 1's ranks talk over it) and on the lab interface toward rank 0
        for dev in ("lo", "eth0"):
            subprocess.run(["ip", "netns", "exec", namespace, "sh", "-c", f"""
tc qdisc add dev {dev} root handle 1: htb default 1 &&
tc class add dev {dev} parent 1: classid 1:1 htb rate 10gbit &&
tc class add dev {dev} parent 1: classid 1:2 htb rate 10mbit &&
tc filter add dev {dev} parent 1: protocol ip u32 match ip dst {address}/32 flowid 1:2 &&
tc filter add dev {dev} parent 1: protocol ip u32 match ip src {address}/32 flowid 1:2
"""], check=True, capture_output=True, text=True, timeout=30)
    return f"{sim_host(faulty_rank(ranks))} ({address})"


def clear_fault(namespace: str) -> None:
    """Whatever ``apply_fault`` set up there, gone (best effort)."""
    for argv in (["nft", "delete", "table", "inet", "ddpsimfault"],
                 ["tc", "qdisc", "del", "dev", "lo", "root"],
                 ["tc", "qdisc", "del", "dev", "eth0", "root"]):
        subprocess.run(["ip", "netns", "exec", namespace, *argv], capture_output=True,
                       timeout=30)


def parse_results(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[len("SIMRESULT "):]) for line in text.splitlines()
            if line.startswith("SIMRESULT ")]


def machine() -> dict[str, Any]:
    import psutil

    t = psutil.cpu_times()
    return {"load": list(os.getloadavg()), "busy_cpu_s": t.user + t.system + t.nice,
            "idle_cpu_s": t.idle}


@contextlib.contextmanager
def sim_lab(ranks: int) -> Iterator[Any]:
    """Two lab nodes; node 1 carries every simulated rank's address."""
    from ddpnet.lab import Lab

    with Lab(name=f"sim{os.getpid() % 100000}", nodes=2, subnet=SUBNET) as lab:
        n0, n1 = lab.node(0), lab.node(1)
        prefix = SUBNET.split("/")[1]
        # one address per rank (enough for any --per-node), as many as the route holds
        ip_batch(n1.namespace, [f"addr add {SIM_BASE + r}/{prefix} dev {n1.ifname}"
                                for r in range(1, min(ranks, MAX_NODES + 1))])
        ip_batch(n0.namespace, [f"route add {SIM_ROUTE} via {n1.address}"])
        for ns in (n0.namespace, n1.namespace):
            subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw",
                            "net.core.somaxconn=8192", "net.ipv4.tcp_max_syn_backlog=8192"],
                           capture_output=True, timeout=10)
        yield lab


#: ``--hub-share``: the watch hub held to this share of a core (None: what it takes)
HUB_SHARE: float | None = None
#: ... from this long after the launch (the ranks have joined), in 0.5 s cycles
HUB_SHARE_AFTER_S, HUB_CYCLE_S = 10.0, 0.5


def throttle_hub(share: float, stop: threading.Event) -> None:
    """Hold the watch hub to ``share`` of a core (edge): stopped for (1 - share) of every
    cycle (SIGSTOP/SIGCONT), as a rank 0 host short of CPU would starve it."""
    import psutil

    if stop.wait(HUB_SHARE_AFTER_S):
        return
    hubs = [p for p in psutil.process_iter(["cmdline"])
            if "ddpnet.watch.hub" in " ".join(p.info["cmdline"] or [])]
    try:
        while not stop.is_set():
            for hub in hubs:
                with contextlib.suppress(psutil.Error):
                    hub.suspend()
            stop.wait(HUB_CYCLE_S * (1 - share))
            for hub in hubs:
                with contextlib.suppress(psutil.Error):
                    hub.resume()
            stop.wait(HUB_CYCLE_S * share)
    finally:
        for hub in hubs:
            with contextlib.suppress(psutil.Error):
                hub.resume()


def run_point(command: str, ranks: int, fault: str | None, timeout: float,
              full_mesh: bool = False, per_node: int = DEFAULT_PER_NODE) -> dict[str, Any]:
    """One point: rank 0 and the client processes in a fresh lab; one JSON object."""
    with sim_lab(ranks) as lab:
        return run_in(lab, command, ranks, fault, timeout, full_mesh, per_node)


def quiet(most: int = 3, seconds: float = 1.0, timeout: float = 180.0) -> None:
    """Wait until this machine runs at most ``most`` tasks for ``seconds`` in a row (the
    last point's thousands of threads and its lab's teardown take a while to go)."""
    deadline, calm = time.monotonic() + timeout, 0.0
    while calm < seconds and time.monotonic() < deadline:
        with open("/proc/loadavg") as f:
            running = int(f.read().split()[3].split("/")[0])
        calm = calm + 0.5 if running <= most else 0.0
        time.sleep(0.5)


def run_in(lab: Any, command: str, ranks: int, fault: str | None, timeout: float,
           full_mesh: bool = False, per_node: int = DEFAULT_PER_NODE) -> dict[str, Any]:
    """One point in ``sim_lab(ranks)`` (which may serve several: the fault goes after)."""
    global PER_NODE
    PER_NODE = per_node
    quiet()
    before = machine()
    n0, n1 = lab.node(0), lab.node(1)
    count_store_bytes(n0.namespace, n0.address)
    drops0 = listen_drops(n0.namespace)
    host = apply_fault(n1.namespace, fault, ranks) if command == "check" else None
    if command == "watch":  # the hang: one rank never calls the collective
        host = f"{sim_host(faulty_rank(ranks))} ({sim_address(faulty_rank(ranks))})"
    stop = threading.Event()
    if command == "watch" and HUB_SHARE is not None:
        threading.Thread(target=throttle_hub, args=(HUB_SHARE, stop), daemon=True).start()
    try:
        t0, got0, err0, outs = _launch(lab, command, ranks, timeout, full_mesh)
        served = store_bytes(n0.namespace)
        served["listen_drops"] = listen_drops(n0.namespace) - drops0
    finally:
        stop.set()
        clear_fault(n1.namespace)
    after = machine()
    r0 = (parse_results(got0) or [{}])[-1]
    sims = [x for out, _ in outs for x in parse_results(out)]
    point = summarize(command, ranks, fault, host, t0, r0, sims, served, before, after)
    if command == "watch" and HUB_SHARE is not None:
        point["hub_share"] = HUB_SHARE
    if not r0 or r0.get("cut_off"):
        point["error"] = (err0 or got0)[-2000:]
        point["rank0_progress"] = [line for line in err0.splitlines()
                                   if line.startswith("[check]")][-4:]
    return point


def _launch(lab: Any, command: str, ranks: int, timeout: float, full_mesh: bool
            ) -> tuple[float, str, str, list[tuple[str, str]]]:
    """Start rank 0 on node 0 and the client processes on node 1; their outputs."""
    n0 = lab.node(0)
    me = [sys.executable, str(Path(__file__).resolve())]
    t0 = time.time()
    common = ["--command", command, "--ranks", str(ranks), "--timeout", str(timeout),
              "--master", n0.address, "--t0", str(t0), "--per-node", str(PER_NODE)] \
        + (["--full-mesh"] if full_mesh else [])
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": str(ranks),
           "MASTER_ADDR": n0.address, "MASTER_PORT": str(PORT),
           "DDPNET_CHECK_NO_FAST_EXIT": "1"}
    rank0 = lab.popen(0, [*me, "--role", "rank0", *common], env=env,
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    clients = [lab.popen(1, [*me, "--role", "clients", "--first", "1",
                             "--count", str(ranks - 1), *common],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
    watched = Watched(rank0.pid)
    got0, err0 = _collect(rank0, timeout, watched)
    outs = [_collect(c, 20.0) for c in clients]
    if not parse_results(got0):  # killed at the point's timeout: what was seen from outside
        got0 += "\nSIMRESULT " + json.dumps(watched.summary()) + "\n"
    return t0, got0, err0, outs


class Watched:
    """Rank 0's process seen from outside (psutil): its peak RSS and CPU so far, so a point
    cut off at its timeout still says what rank 0 used."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.rss_mib = 0.0
        self.cpu_s = 0.0

    def sample(self) -> None:
        import psutil

        with contextlib.suppress(psutil.Error):
            top = psutil.Process(self.pid)  # the lab's wrapper may exec the rank itself
            for proc in (top, *top.children(recursive=True)):
                if "--role" in proc.cmdline():
                    t = proc.cpu_times()
                    self.cpu_s = max(self.cpu_s, t.user + t.system)
                    self.rss_mib = max(self.rss_mib, proc.memory_info().rss / 2**20)

    def summary(self) -> dict[str, Any]:
        return {"verdict": None, "cpu_s": self.cpu_s, "max_rss_mib": self.rss_mib,
                "cut_off": True}


def _collect(proc: subprocess.Popen[str], timeout: float,
             watched: Watched | None = None) -> tuple[str, str]:
    deadline = time.monotonic() + timeout
    try:
        while watched is not None and proc.poll() is None and time.monotonic() < deadline:
            watched.sample()
            time.sleep(0.5)
        return proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        # SIGTERM first: a client process reports what its ranks did so far
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        return out, err + "\n(timed out)"


def _seconds(command: str, r0: dict[str, Any], t0: float) -> float | None:
    """From the launch to rank 0's verdict (the watch: from the stall to the verdict)."""
    if command == "watch":
        took = (r0.get("timings") or {}).get("stall_to_verdict")
        return round(float(took), 2) if took is not None else None
    return round(float(r0["verdict_at"]) - t0, 2) if r0.get("verdict_at") else None


def summarize(command: str, ranks: int, fault: str | None, host: str | None, t0: float,
              r0: dict[str, Any], sims: list[dict[str, Any]], served: dict[str, int],
              before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The point's JSON object (pure)."""
    verdict_at = r0.get("verdict_at")
    after_store = round(verdict_at - float(r0["started"]) - float(
        (r0.get("timings") or {}).get("connect", 0.0)), 2) if verdict_at and command != "watch" \
        else None
    causes = r0.get("causes") or []
    named = [c for c in causes if host is not None and any(
        host.split(" ")[0] in h for h in c.get("hosts", []))]
    point: dict[str, Any] = {
        "command": command, "ranks": ranks, "ranks_per_node": PER_NODE, "fault": fault,
        # a merged sweep's points come from several runs (--commands/--sizes)
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t0)),
        "faulty_host": host,
        "verdict": r0.get("verdict"), "causes": causes,
        "faulty_host_named": bool(named) if host else None,
        "seconds_to_verdict": _seconds(command, r0, t0),
        # the same, from rank 0's store being up (its torch import done: ~1 s on a quiet core)
        "seconds_after_store": after_store,
        "rank0_max_rss_mib": round(float(r0.get("max_rss_mib", 0.0)), 1),
        "cut_off_at_timeout": bool(r0.get("cut_off")),
        "rank0_cpu_s": round(float(r0.get("cpu_s", 0.0)), 2),
        "store_bytes_served": served.get("served"),
        "store_bytes_received": served.get("received"),
        "store_bytes_to_rank0": served.get("served_rank0"),
        # connections rank 0's node dropped at a full accept queue (each costs its rank 1 s+)
        "rank0_listen_drops": served.get("listen_drops"),
        "rank0_timings": r0.get("timings"),
        # watch: rank 0's figures are the hub process's; init: rank 0's CPU per second
        # while every rank's GroupGuard checks the store
        **{k: r0[k] for k in ("hub_cores_steady", "guard_cpu_per_s") if k in r0},
        "report_json_bytes": r0.get("report_json_bytes"),
        "notes": r0.get("notes"),
        "clients": {"processes": sum(bool(s["count"]) for s in sims),
                    "finished": sum(s["finished"] for s in sims),
                    "ok_lines": sum(s["ok"] for s in sims),
                    "cpu_s": round(sum(s["cpu_s"] for s in sims), 2),
                    # each process's kinds of outcome, what went wrong first
                    "sample": sorted((line for s in sims for line in s["sample"]),
                                     key=passed)[:6],
                    # [ranks, p50, p90, max] seconds from the launch to each step
                    "milestones": percentiles({m: [t for s in sims for t in (
                        s.get("milestones") or {}).get(m, ())] for m in MILESTONES})},
        "machine": {"cpus": os.cpu_count(), "load_before": before["load"],
                    "load_after": after["load"],
                    "busy_cpu_s": round(after["busy_cpu_s"] - before["busy_cpu_s"], 1)},
    }
    goal = GOALS.get((command, ranks, fault))
    if goal is not None:
        secs = point["seconds_to_verdict"]
        point["goal"] = {"seconds": goal, "rss_mib": RSS_GOAL_MIB,
                         "met": bool(secs is not None and secs < goal
                                     and point["rank0_max_rss_mib"] < RSS_GOAL_MIB
                                     and (fault is None or point["faulty_host_named"]))}
    return point


# ============================================================== the sweep

#: the sweep's layouts for `check`: every simulated rank its own node, and 8 ranks a node
#: (a GPU node's ranks share its address: one of them probes MTU and loss for the host)
LAYOUTS = (1, 8)


def sweep_points(commands: Sequence[str], sizes: Sequence[int]
                 ) -> list[tuple[str, int, str | None, int]]:
    """(command, ranks, fault, ranks per node) of the sweep (pure): faults up to
    FAULTS_UP_TO ranks, the 8-per-node layout from 256 ranks (check only)."""
    out = []
    for command in commands:
        for ranks in sizes:
            for per_node in LAYOUTS if command == "check" else (1,):
                if per_node > 1 and ranks < 256:
                    continue
                faults = (None, *FAULTS) if command == "check" and ranks <= FAULTS_UP_TO \
                    and (per_node == 1 or ranks == FAULTS_UP_TO) else (None,)
                out += [(command, ranks, fault, per_node) for fault in faults]
    return out


def _key(p: dict[str, Any]) -> tuple[int, int, int, int]:
    return (COMMANDS.index(p["command"]), p.get("ranks_per_node", 1), p["ranks"],
            (None, *FAULTS).index(p["fault"]))


def sweep(args: argparse.Namespace) -> int:
    points = []
    for command, ranks, fault, per_node in sweep_points(
            args.commands.split(","), [int(n) for n in args.sizes.split(",")]):
        try:
            point = run_point(command, ranks, fault, point_timeout(ranks), per_node=per_node)
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            point = summarize(command, ranks, fault, None, time.time(), {}, [], {},
                              machine(), machine())
            point["error"] = f"{type(exc).__name__}: {exc}"[-2000:]
        points.append(point)
        print(json.dumps({k: point[k] for k in ("command", "ranks", "ranks_per_node", "fault",
                                               "verdict", "seconds_to_verdict",
                                               "rank0_max_rss_mib", "rank0_cpu_s",
                                               "store_bytes_served")}), flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "scale_sim.json"
    rerun = {_key(p) for p in points}  # --commands/--sizes: the other points stay
    kept = [p for p in json.loads(path.read_text())["points"] if _key(p) not in rerun] \
        if path.exists() and not args.fresh else []
    points = sorted(kept + points, key=_key)
    out = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "points": points}
    path.write_text(json.dumps(out, indent=1) + "\n")
    plot(points, RESULTS / "scale_sim.png")
    return 0


def point_timeout(ranks: int) -> float:
    """A point's bound: the sweep stays within ~15 minutes on the 2-core VM."""
    return min(240.0, 60.0 + ranks * 0.06)


PLOTTED = ("seconds_to_verdict", "rank0_cpu_s", "rank0_max_rss_mib", "store_mb_served")


def _value(point: dict[str, Any], key: str) -> float:
    if key == "store_mb_served":
        served = point.get("store_bytes_served")
        return served / 1e6 if served and point["command"] != "watch" else float("nan")
    value = point.get(key)
    return float(value) if value is not None else float("nan")


def plot(points: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(18, 4))
    series: dict[str, list[dict[str, Any]]] = {}
    for p in points:
        per_node = p.get("ranks_per_node", 1)
        series.setdefault(f"{p['command']}" + (f" {p['fault']}" if p["fault"] else "")
                          + (f" ({per_node}/node)" if per_node > 1 else ""), []).append(p)
    for name, ps in series.items():
        xs = [p["ranks"] for p in ps]
        for ax, key in zip(axes, PLOTTED, strict=True):
            ax.plot(xs, [_value(p, key) for p in ps], marker="o", label=name)
    for ax, title in zip(axes, ("seconds to verdict (watch: from the stall)",
                                "rank 0 CPU seconds (watch: the hub's)",
                                "rank 0 max RSS, MiB (watch: the hub's)",
                                "MB served by rank 0's store"), strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ranks")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--command", choices=COMMANDS, default="check")
    ap.add_argument("--commands", default=",".join(COMMANDS), help="the sweep's commands")
    ap.add_argument("--ranks", type=int)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="the sweep's sizes")
    ap.add_argument("--fault", choices=FAULTS)
    ap.add_argument("--json", action="store_true", help="print the point as one JSON object")
    ap.add_argument("--fresh", action="store_true",
                    help="the sweep replaces results/scale_sim.json instead of merging")
    ap.add_argument("--full-mesh", action="store_true", help="check: every pair (--full-mesh)")
    ap.add_argument("--per-node", type=int, default=DEFAULT_PER_NODE,
                    help="simulated ranks per node (sharing its address, as a GPU node's do; "
                         f"default {DEFAULT_PER_NODE}; 1: every rank a host of its own)")
    ap.add_argument("--timeout", type=float, help="the point's bound (seconds)")
    ap.add_argument("--hub-share", type=float,
                    help="watch: hold the hub to this share of a core from 10 s after the "
                         "launch (a rank 0 host short of CPU)")
    ap.add_argument("--role", choices=("rank0", "clients"), help=argparse.SUPPRESS)
    ap.add_argument("--first", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--master", default="", help=argparse.SUPPRESS)
    ap.add_argument("--t0", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    why = bad_input(args.ranks, args.per_node)
    if why is None and args.hub_share is not None and not (
            args.command == "watch" and 0 < args.hub_share <= 1):
        why = (f"--hub-share {args.hub_share}: a share of a core (0 < share <= 1) for the "
               "watch's hub; hint: --command watch --hub-share 0.25")
    if why is None and args.fault and args.command != "check":
        why = (f"--fault {args.fault} is a check fault (a node's ports, its link); init "
               "simulates no gloo listeners to filter, and the watch's point has its fault "
               "built in (one rank stops calling the collective); hint: drop --fault, or "
               "--command check")
    if why is None and args.role is None and os.geteuid() != 0:
        why = "needs root: it builds a lab of network namespaces; hint: run it as root (sudo)"
    if why is not None:
        print(f"scale_sim: {why}", file=sys.stderr)
        return 2
    global PER_NODE, HUB_SHARE
    PER_NODE, HUB_SHARE = args.per_node, args.hub_share
    if args.role is not None:
        args.timeout = args.timeout or point_timeout(args.ranks)
        ROLES[(args.command, args.role)](args)
        return 0
    if args.ranks is None:
        try:
            sizes = [int(n) for n in args.sizes.split(",")]
        except ValueError:
            sizes = []
        why = next((w for n in sizes for k in LAYOUTS if (w := bad_input(n, k))), None) \
            if sizes else f"--sizes {args.sizes!r}: not a list of rank counts; " \
                          "hint: --sizes 64,256,1024,4096"
        if why is not None:
            print(f"scale_sim: {why}", file=sys.stderr)
            return 2
        return sweep(args)
    point = run_point(args.command, args.ranks, args.fault,
                      args.timeout or point_timeout(args.ranks), args.full_mesh, PER_NODE)
    print(json.dumps(point, indent=None if args.json else 1))
    return 0 if point.get("verdict") else 1


ROLES: dict[tuple[str, str], Callable[[argparse.Namespace], None]] = {
    ("check", "rank0"): rank0_check, ("check", "clients"): check_clients,
    ("init", "rank0"): rank0_init, ("init", "clients"): init_clients,
    ("watch", "rank0"): rank0_watch, ("watch", "clients"): watch_clients,
}

if __name__ == "__main__":
    sys.exit(main())

"""The watch's cost and speed (issue 20): recorder + heartbeat overhead on ``ddpnet train``
steps, and the time from a fault to the named cause for each kind.

Overhead: ``ddpnet train --local 2`` (gloo, loopback) with the watch off (``DDPNET_WATCH=0``)
and on, interleaved over rounds so that load on a shared machine hits both alike; the
figure is the median of each side's mean step time (the summary's ``step_time_s``, warm-up
steps excluded). Two models: the default tiny MLP (a ~3 ms step: the worst case, the Flight
Recorder and the phase marks are a fixed cost per step) and a wider one (~20-40 ms).
Target: < 2 % on the wider model.

Attached (issue 38): two ranks of tests/watch/tutorial.py, a script with no ddpnet import,
plain and under ``python -m ddpnet.attach`` (the watch, steps and phases inferred, the
activity sampler), interleaved: rank 0's median step at the tutorial's own ~ms step and at a
50 ms step, and the seconds from spawn to both ranks' group. Targets: <= 1 % of a realistic
step, <= 0.5 s added to start-up.

Fault to cause: the real-process scenarios of tests/watch (two gloo ranks, one fault at step
5, watch_timeout 4 s): seconds from the fault to the hub writing report.json (the cause
named). Pieces in isolation (``micro``): the Flight Recorder's cost per collective (a
world-1 gloo all_reduce with TORCH_FR_BUFFER_SIZE 64 vs 0), the phase/step marks of one
``ddpnet train`` step, one heartbeat (recorder dump, state, JSON), and ``ddpnet train``'s
timed comm hook on gloo (a tiny MLP's DDP forward+backward, one bucket: DDP's built-in
all-reduce vs torch's allreduce_hook wrapped by ``train.comm.timed_hook``), and the hooks
that infer an unmarked script's steps and phases (``watch.infer``: a tiny MLP's step from a
DataLoader, with SGD, without and with them).

    .venv/bin/python benchmarks/watch_overhead.py [--rounds N] [--quick] [--out FILE]
        [--micro-only | --attached-only]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
MODELS = {"tiny": ["--width", "64", "--depth", "2"],
          "wide": ["--width", "1024", "--depth", "4"]}
KINDS = {"kill": "rank-gone", "stop": "rank-gone", "skip": "collective-mismatch",
         "shape": "collective-mismatch", "sleepdata": "rank-not-arriving"}


def train_step(model: list[str], watch: bool, steps: int) -> float:
    env = {**os.environ, "DDPNET_WATCH": "1" if watch else "0",
           "DDPNET_WATCH_DIR": tempfile.mkdtemp(prefix="watch-bench-")}
    proc = subprocess.run([sys.executable, "-m", "ddpnet", "train", "--local", "2", "--json",
                           "--max-steps", str(steps), "--log-every", str(steps), *model],
                          capture_output=True, text=True, env=env, timeout=600, check=True)
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["step_time_s"])


def overhead(rounds: int, steps: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, model in MODELS.items():
        off, on = [], []
        for _ in range(rounds):
            off.append(train_step(model, False, steps))
            on.append(train_step(model, True, steps))
        m_off, m_on = statistics.median(off), statistics.median(on)
        out[name] = {"step_s_off": off, "step_s_on": on, "median_off_s": m_off,
                     "median_on_s": m_on, "overhead_pct": 100 * (m_on - m_off) / m_off,
                     "overhead_pct_of_min": 100 * (min(on) - min(off)) / min(off)}
        print(f"{name}: off {m_off * 1e3:.2f} ms  on {m_on * 1e3:.2f} ms  "
              f"{out[name]['overhead_pct']:+.2f} % (medians), "
              f"{out[name]['overhead_pct_of_min']:+.2f} % (minima)", flush=True)
    return out


#: one process, a world-1 gloo group: the cost of each piece of the watch, in isolation
MICRO = r"""
import json, os, sys, time
import torch, torch.distributed as dist
from ddpnet.net.ports import free_port
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                        world_size=1)
t = torch.ones(16)
for _ in range(200):
    dist.all_reduce(t)
best = float("inf")
for _ in range(5):
    start = time.perf_counter()
    for _ in range(2000):
        dist.all_reduce(t)
    best = min(best, (time.perf_counter() - start) / 2000)
out = {"allreduce_s": best}
if sys.argv[1] == "pieces":
    from ddpnet.watch.heartbeat import Beacon
    from ddpnet.watch.session import phase, recorder, step
    from ddpnet.watch.state import RankState
    from ddpnet.watch.wire import encode
    from pathlib import Path
    beacon = Beacon(recorder(), RankState(rank=0, world_size=1), Path("."))
    def per_call(fn, n):
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            for i in range(n):
                fn(i)
            best = min(best, (time.perf_counter() - start) / n)
        return best
    def marks(i):
        step(i)
        for name in ("data", "forward", "backward", "step"):
            with phase(name):
                pass
    out["marks_per_step_s"] = per_call(marks, 2000)
    out["heartbeat_s"] = per_call(lambda i: encode({"t": "state", "state":
                                                   beacon.state().to_dict()}), 200)
    out["records"] = len(beacon.state().recent)
    out.update(hook_cost())
    out.update(infer_cost())
print(json.dumps(out))
"""

#: ddpnet train's timed comm hook on gloo: DDP steps of two tiny MLPs (one bucket each), the
#: built-in all-reduce vs torch's allreduce_hook wrapped by timed_hook, interleaved blocks; and
#: an unmarked step without and with watch.infer's hooks
HOOK = r"""
def hook_cost():
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from ddpnet.train.comm import timed_hook
    from ddpnet.train.model import build_model
    from ddpnet.watch.session import recorder
    def make(timed):
        torch.manual_seed(0)
        ddp = DDP(build_model("mlp", 64, 2, 10))
        if timed is None:  # the hook alone: what replacing the built-in costs
            ddp.register_comm_hook(None, allreduce_hook)
        elif timed:
            ddp.register_comm_hook(None, timed_hook(allreduce_hook, recorder().add_wait))
        return ddp
    from ddpnet.train.model import IN_FEATURES
    x, y = torch.randn(32, IN_FEATURES), torch.randint(0, 10, (32,))
    nets = {"builtin": make(False), "hook": make(None), "timed": make(True)}
    def block(net, n):
        start = time.perf_counter()
        for _ in range(n):
            torch.nn.functional.cross_entropy(net(x), y).backward()
        return (time.perf_counter() - start) / n
    for net in nets.values():
        block(net, 50)
    best = {k: float("inf") for k in nets}
    for _ in range(10):
        for k, net in nets.items():
            best[k] = min(best[k], block(net, 300))
    return {"ddp_step_builtin_s": best["builtin"], "ddp_step_allreduce_hook_s": best["hook"],
            "ddp_step_timed_hook_s": best["timed"]}


def infer_cost():
    # an unmarked step (a DataLoader's batch, DDP forward + backward, SGD) without and with
    # watch.infer's hooks (optimizer, forward, data): interleaved blocks, best of each
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, TensorDataset
    from ddpnet.train.model import IN_FEATURES, build_model
    from ddpnet.watch import infer
    from ddpnet.watch.recorder import Recorder
    data = TensorDataset(torch.randn(32 * 400, IN_FEATURES), torch.randint(0, 10, (32 * 400,)))
    def block(n):
        torch.manual_seed(0)
        net = DDP(build_model("mlp", 64, 2, 10))
        opt = torch.optim.SGD(net.parameters(), lr=0.01)
        batches = iter(DataLoader(data, batch_size=32))
        start = time.perf_counter()
        for _ in range(n):
            x, y = next(batches)
            torch.nn.functional.cross_entropy(net(x), y).backward()
            opt.step()
            opt.zero_grad()
        return (time.perf_counter() - start) / n
    best = {"off": float("inf"), "on": float("inf")}
    for _ in range(10):
        for k in best:
            undo = infer.install(Recorder()) if k == "on" else (lambda: None)
            best[k] = min(best[k], block(300))
            undo()
    return {"ddp_step_unmarked_s": best["off"], "ddp_step_inferred_s": best["on"]}
"""


def _micro_run(size: str, tries: int = 3) -> dict[str, Any]:
    """One MICRO process; retried, because gloo on a busy host now and then aborts at exit
    (seen once in ~30 runs, SIGABRT after the figures were printed)."""
    for _ in range(tries):
        proc = subprocess.run([sys.executable, "-c", HOOK + MICRO, "pieces" if size != "0"
                               else "bare"], capture_output=True, text=True, timeout=900,
                              env={**os.environ, "TORCH_FR_BUFFER_SIZE": size})
        lines = proc.stdout.strip().splitlines()
        if lines and lines[-1].startswith("{"):
            return dict(json.loads(lines[-1]))
    raise RuntimeError(f"micro benchmark failed {tries} times: {proc.stderr[-500:]}")


def micro(rounds: int) -> dict[str, Any]:
    """Per-collective cost of the Flight Recorder (FR on vs off, min over rounds), the
    phase/step marks of one ``ddpnet train`` step, one heartbeat (dump, state, JSON), and the
    inferred steps and phases of one unmarked step (``watch.infer``)."""
    fr_on, fr_off, pieces = [], [], {}
    for _ in range(rounds):
        for size, sink in (("64", fr_on), ("0", fr_off)):
            data = _micro_run(size)
            sink.append(data["allreduce_s"])
            if size != "0":
                pieces = {k: min(v, pieces.get(k, v)) for k, v in data.items()}
    out = {"allreduce_fr_on_s": min(fr_on), "allreduce_fr_off_s": min(fr_off),
           "fr_cost_per_collective_s": min(fr_on) - min(fr_off),
           "marks_per_step_s": pieces["marks_per_step_s"],
           "heartbeat_s": pieces["heartbeat_s"], "heartbeat_records": pieces["records"],
           "heartbeat_share_of_a_core": pieces["heartbeat_s"] / 1.0,
           "ddp_step_builtin_s": pieces["ddp_step_builtin_s"],
           "ddp_step_allreduce_hook_s": pieces["ddp_step_allreduce_hook_s"],
           "ddp_step_timed_hook_s": pieces["ddp_step_timed_hook_s"],
           "timed_hook_cost_per_step_s": pieces["ddp_step_timed_hook_s"]
           - pieces["ddp_step_builtin_s"],
           "ddp_step_unmarked_s": pieces["ddp_step_unmarked_s"],
           "ddp_step_inferred_s": pieces["ddp_step_inferred_s"],
           "inferred_cost_per_step_s": pieces["ddp_step_inferred_s"]
           - pieces["ddp_step_unmarked_s"]}
    print(f"FR per collective {out['fr_cost_per_collective_s'] * 1e6:.1f} us, marks per step "
          f"{out['marks_per_step_s'] * 1e6:.1f} us, heartbeat {out['heartbeat_s'] * 1e3:.2f} "
          f"ms/s; DDP step {out['ddp_step_builtin_s'] * 1e6:.0f} us built-in, "
          f"{out['ddp_step_timed_hook_s'] * 1e6:.0f} us with the timed hook; unmarked step "
          f"{out['ddp_step_unmarked_s'] * 1e6:.0f} us, +{out['inferred_cost_per_step_s'] * 1e6:.1f}"
          f" us with steps and phases inferred", flush=True)
    return out


def fault_to_cause(watch_timeout: float) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from tests.watch.scenario import run_job

    out: dict[str, Any] = {}
    for mode, kind in KINDS.items():
        with tempfile.TemporaryDirectory() as directory:
            job = run_job(mode, directory, watch_timeout=watch_timeout)
        named = f"ddpnet watch: {kind}" in job.stderr[0]
        seconds = (job.report_at - job.fault_at
                   if job.fault_at is not None and job.report_at is not None else None)
        out[mode] = {"kind": kind, "named": named, "fault_to_report_s": seconds,
                     "codes": job.codes, "left_running": job.left}
        shown = f"{seconds:.1f} s" if seconds is not None else "?"
        print(f"{mode}: {kind} named={named} in {shown}", flush=True)
    return out


TUTORIAL = ROOT / "tests" / "watch" / "tutorial.py"
#: an attached script's step: the tutorial's own (a ~1-2 ms DDP step) and a realistic one
ATTACHED_STEP_S = {"bare": 0.0, "50ms": 0.05}


def _reader(watch: bool, start: float, seen: dict[int, float], timing: dict[int, float]
            ) -> Any:
    """A rank's stdout read as it prints: when its group came up (``watched``), its step."""
    def read(rank: int, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("watched "):
                seen[rank] = time.monotonic() - start
                if (line.split()[1] == "True") != watch:
                    raise RuntimeError(f"rank {rank}: {line.strip()} (watch={watch})")
            if line.startswith("timing "):
                timing[rank] = float(json.loads(line.split(" ", 1)[1])["step_s"])

    return read


def attached_run(watch: bool, step_s: float, steps: int) -> tuple[float, float]:
    """Two ranks of tests/watch/tutorial.py (no ddpnet import) on loopback, plain or under
    ``python -m ddpnet.attach``: (seconds from spawn to the slower rank's group, median step
    seconds of rank 0)."""
    from ddpnet.net.ports import free_port

    port, start, procs = free_port(), time.monotonic(), []
    for rank in (0, 1):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
               "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "STEPS": str(steps), "STEP_S": str(step_s), "OMP_NUM_THREADS": "1",
               "DDPNET_WATCH_DIR": tempfile.mkdtemp(prefix="watch-bench-")}
        argv = [sys.executable, *(["-m", "ddpnet.attach"] if watch else []), str(TUTORIAL)]
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True))
    seen: dict[int, float] = {}
    timing: dict[int, float] = {}
    read = _reader(watch, start, seen, timing)
    readers = [threading.Thread(target=read, args=(rank, proc)) for rank, proc in
               enumerate(procs)]
    for reader in readers:
        reader.start()
    for rank, proc in enumerate(procs):
        if proc.wait(timeout=600) != 0:
            raise RuntimeError(f"rank {rank} exited {proc.returncode}")
    for reader in readers:
        reader.join(60)
    grouped, step = max(seen.values(), default=float("nan")), timing.get(0, float("nan"))
    return grouped, step


def attached(rounds: int, steps: int) -> dict[str, Any]:
    """An unchanged script with the watch attached vs plain, interleaved rounds (medians):
    the step time at each ATTACHED_STEP_S and what attaching adds to start-up (spawn to the
    group, both ranks). A second plain run in each round is the A/A control: what two plain
    sides differ by on this machine, the noise floor the overhead is read against."""
    out: dict[str, Any] = {}
    sides = {"off": False, "on": True, "off_again": False}
    for name, step_s in ATTACHED_STEP_S.items():
        runs: dict[str, list[tuple[float, float]]] = {side: [] for side in sides}
        for _ in range(rounds):
            for side, watch in sides.items():
                runs[side].append(attached_run(watch, step_s, steps))
        step = {side: statistics.median(s for _, s in runs[side]) for side in sides}
        up = {side: statistics.median(g for g, _ in runs[side]) for side in sides}
        off, on = step["off"], step["on"]
        out[name] = {"step_s_off": off, "step_s_on": on,
                     "overhead_pct": 100 * (on - off) / off,
                     "aa_control_pct": 100 * (step["off_again"] - off) / off,
                     "startup_s_off": up["off"], "startup_s_on": up["on"],
                     "startup_added_s": up["on"] - up["off"],
                     "aa_startup_s": up["off_again"] - up["off"],
                     "runs": runs}
        print(f"attached {name}: step {off * 1e3:.2f} -> {on * 1e3:.2f} ms "
              f"({out[name]['overhead_pct']:+.2f} %; A/A {out[name]['aa_control_pct']:+.2f} %),"
              f" start-up {up['off']:.2f} -> {up['on']:.2f} s ({up['on'] - up['off']:+.2f} s;"
              f" A/A {out[name]['aa_startup_s']:+.2f} s)", flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="2 rounds of 60 steps")
    parser.add_argument("--micro-only", action="store_true",
                        help="only the pieces in isolation (updates 'micro' in --out)")
    parser.add_argument("--attached-only", action="store_true",
                        help="only the attached script (updates 'attached' in --out)")
    parser.add_argument("--out", type=Path, default=RESULTS / "watch_overhead.json")
    args = parser.parse_args()
    rounds, steps = (2, 60) if args.quick else (args.rounds, args.steps)
    load_before = os.getloadavg()
    if args.micro_only:
        kept = json.loads(args.out.read_text()) if args.out.exists() else {}
        kept["micro"] = {**micro(3), "loadavg": [load_before, os.getloadavg()],
                         "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        args.out.write_text(json.dumps(kept, indent=1) + "\n")
        return 0
    if args.attached_only:
        kept = json.loads(args.out.read_text()) if args.out.exists() else {}
        kept["attached"] = {**attached(rounds, steps), "rounds": rounds, "steps": steps,
                            "loadavg": [load_before, os.getloadavg()],
                            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        args.out.write_text(json.dumps(kept, indent=1) + "\n")
        return 0
    result = {
        "host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "rounds": rounds, "steps": steps, "loadavg_before": load_before,
        "micro": micro(3),
        "overhead": overhead(rounds, steps),
        "attached": attached(rounds, steps),
        "watch_timeout_s": 4.0, "fault_to_cause": fault_to_cause(4.0),
        "loadavg_after": os.getloadavg(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

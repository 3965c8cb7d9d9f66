"""What the metrics' link probe rounds put on the link (issue 58: "the first probe round soon
after every rank publishes, at a bounded share of the link, measured").

A lab of ``--nodes`` nodes whose links are shaped to ``--rate`` runs a watched ``ddpnet train``
(the default model, a slow loop: ``--step-sleep``, so that training itself hardly loads the
link) with ``DDPNET_METRICS_PORT`` and ``DDPNET_METRICS_PROBE_S=--every``. Each node's eth0
byte counters (``/proc/PID/net/dev`` of a process in the node, read from here every
``--sample`` s) give its transmit rate; the samples well above the loop's own rate are the
probe rounds. Per round and node: the bytes sent above the loop's rate, how long the link was
busy, and the share of the link that is per round at ``--every`` and at the default
(``watch.session``: 300 s) and per minute. Each round streams ``watch.probe.STREAM_SECONDS``
to every peer at once from every rank, then waits for the acknowledgements: so a node sends
about that long at the link's rate, plus what its send buffers held. The job's own probe
figures (``ddpnet_probe_bandwidth_bytes_per_second``, scraped every 2 s: each round's) are kept
beside the rate, with what ``DdpnetLinkSlow`` (below half the pair's best) makes of them.

    sudo .venv/bin/python benchmarks/probe_share.py [--nodes 3] [--rate 100mbit]
        [--every 15] [--seconds 70] [--out benchmarks/results/probe_share.json]

Needs root (network namespaces). Writes JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
#: the default seconds between probe rounds with metrics on (DDPNET_METRICS_PROBE_S)
DEFAULT_EVERY_S = 300.0
#: a sample is in a round when the node sends this share of the link above its loop's rate
BURST_SHARE = 0.2
#: samples of a round closer than this are one round; a round's window is widened by it on
#: each side (its ramp up and down, below the bar, are its bytes too)
JOIN_S = 0.5
PORT = 9477
GET = ("import sys, urllib.request\n"
       "with urllib.request.urlopen(sys.argv[1], timeout=10) as r:\n"
       "    sys.stdout.write(r.read().decode())\n")


@dataclass(frozen=True)
class Round:
    """One probe round on one node's link: when it sent at the bar or above, and the bytes it
    sent above the loop's rate (its ramp up and down included)."""

    start: float
    end: float
    bytes: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


def rate_bits(text: str) -> float:
    """``tc``'s rate (``100mbit``, ``1gbit``, ``500kbit``) in bits per second (pure)."""
    match = re.fullmatch(r"\s*([\d.]+)\s*([kmg]?)bit\s*", text.lower())
    if match is None:
        raise ValueError(f"not a rate: {text!r} (e.g. 100mbit)")
    return float(match[1]) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[match[2]]


def rates(samples: Sequence[tuple[float, float]]) -> list[tuple[float, float, float]]:
    """``(start, end, bytes per second)`` of each interval between two samples (pure)."""
    return [(t0, t1, (b1 - b0) / (t1 - t0)) for (t0, b0), (t1, b1) in pairwise(samples)
            if t1 > t0]


def rounds_in(samples: Sequence[tuple[float, float]], link_bytes_s: float) -> list[Round]:
    """The probe rounds in one node's ``(time, bytes sent so far)`` samples (pure): runs of
    intervals sending ``BURST_SHARE`` of the link above the median interval's rate, joined
    across gaps under ``JOIN_S``; each round's bytes are what it sent above that median rate
    (the training loop's own traffic) within ``JOIN_S`` of them."""
    steps = rates(samples)
    if not steps:
        return []
    base = statistics.median(r for _t0, _t1, r in steps)
    windows: list[list[float]] = []
    for t0, t1, r in steps:
        if r < base + BURST_SHARE * link_bytes_s:
            continue
        if windows and t0 - windows[-1][1] < JOIN_S:
            windows[-1][1] = t1
        else:
            windows.append([t0, t1])
    out = []
    for start, end in windows:
        lo, hi = start - JOIN_S, end + JOIN_S
        sent = sum((r - base) * (t1 - t0) for t0, t1, r in steps if t0 >= lo and t1 <= hi)
        out.append(Round(start, end, max(0.0, sent)))
    return out


def share(rounds: Sequence[Round], link_bytes_s: float, every_s: float) -> dict[str, float]:
    """A node's rounds as figures (pure): bytes and busy seconds per round (median and
    largest), the share of the link that is at one round every ``every_s`` and at the
    default, and the rate while a round runs."""
    sent = [r.bytes for r in rounds]
    busy = [r.seconds for r in rounds]
    per_round = statistics.median(sent)
    return {"rounds": len(rounds), "bytes_per_round_median": round(per_round),
            "bytes_per_round_max": round(max(sent)),
            "busy_s_per_round_median": round(statistics.median(busy), 3),
            "link_share_in_round": round(per_round / link_bytes_s /
                                         statistics.median(busy), 3),
            "link_s_per_round": round(per_round / link_bytes_s, 3),
            "share_at_every": round(per_round / (link_bytes_s * every_s), 5),
            "share_at_default": round(per_round / (link_bytes_s * DEFAULT_EVERY_S), 5),
            "bytes_per_minute_at_every": round(per_round * 60 / every_s),
            "bytes_per_minute_at_default": round(per_round * 60 / DEFAULT_EVERY_S)}


def tx_bytes(pid: int, ifname: str) -> float:
    """Bytes ``ifname`` sent, in the network namespace of process ``pid`` (edge)."""
    for line in Path(f"/proc/{pid}/net/dev").read_text().splitlines():
        name, _, fields = line.partition(":")
        if name.strip() == ifname:
            return float(fields.split()[8])
    raise LookupError(f"no {ifname} in process {pid}'s namespace")


def sample(pids: Sequence[int], ifname: str, every: float, seconds: float
           ) -> list[list[tuple[float, float]]]:
    """Each node's ``(monotonic time, tx bytes)`` every ``every`` s for ``seconds`` (edge)."""
    out: list[list[tuple[float, float]]] = [[] for _ in pids]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for series, pid in zip(out, pids, strict=True):
            series.append((time.monotonic(), tx_bytes(pid, ifname)))
        time.sleep(every)
    return out


def probe_lines(text: str) -> dict[str, tuple[float, float]]:
    """``{"host -> peer_host": (probe timestamp, bytes/s)}`` from a scrape of the job (pure)."""
    found: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        name = line.partition("{")[0]
        if name in ("ddpnet_probe_bandwidth_bytes_per_second", "ddpnet_probe_timestamp_seconds"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            pair = f"{labels['host']} -> {labels['peer_host']}"
            found.setdefault(pair, {})[name] = float(line.split()[-1])
    return {pair: (got["ddpnet_probe_timestamp_seconds"],
                   got["ddpnet_probe_bandwidth_bytes_per_second"])
            for pair, got in found.items() if len(got) == 2}


def slow_alerts(figures: dict[str, list[float]]) -> dict[str, Any]:
    """What ``DdpnetLinkSlow`` (a pair's probe below half its best so far) makes of a healthy
    link's rounds (pure): per pair its spread, and the rounds it would fire on."""
    fired, rounds = 0, 0
    spread = {}
    for pair, values in figures.items():
        best = 0.0
        for value in values:
            rounds += 1
            fired += best > 0 and value < 0.5 * best
            best = max(best, value)
        spread[pair] = {"min": min(values), "median": statistics.median(values),
                        "max": max(values)}
    return {"pair_rounds": rounds, "would_fire": fired, "per_pair": spread}


def job_figures(lab: Any, stop: threading.Event, every: float
                ) -> dict[str, dict[float, float]]:
    """The job's own probe figures, each round's once (``{pair: {timestamp: bytes/s}}``),
    scraped every ``every`` s until ``stop`` (edge)."""
    url = f"http://{lab.nodes[0].address}:{PORT}/metrics"
    seen: dict[str, dict[float, float]] = {}
    while not stop.wait(every):
        out = lab.exec(0, [sys.executable, "-c", GET, url], timeout=30)
        for pair, (at, value) in probe_lines(out.stdout).items():
            seen.setdefault(pair, {})[at] = value
    return seen


def wait_for_ranks(lab: Any, nodes: int, timeout: float) -> None:
    """Until the job's metrics say every rank reports (edge)."""
    url = f"http://{lab.nodes[0].address}:{PORT}/metrics"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = lab.exec(0, [sys.executable, "-c", GET, url], timeout=30)
        if re.search(rf"^ddpnet_ranks_reporting{{.*}} {nodes}\.0$", out.stdout, re.M):
            return
        time.sleep(1.0)
    raise TimeoutError(f"the job's {nodes} ranks did not all report in {timeout:g} s")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """The run (edge): lab up, job and samplers, rounds found, lab down."""
    sys.path.insert(0, str(ROOT))
    from tests.lab_util import fresh_lab

    link = rate_bits(args.rate) / 8
    with tempfile.TemporaryDirectory() as tmp, \
            fresh_lab("psh", nodes=args.nodes, rate=args.rate) as lab:
        holders = [lab.popen(n.index, ["sleep", str(args.seconds + 300)])
                   for n in lab.nodes]
        env = {"PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1",
               "DDPNET_METRICS_PORT": str(PORT), "DDPNET_METRICS_PROBE_S": f"{args.every:g}",
               "DDPNET_WATCH_DIR": str(Path(tmp) / "watch")}
        train = [sys.executable, "-m", "ddpnet", "train", "--epochs", "100000",
                 "--log-every", "1000000", "--step-sleep", f"{args.step_sleep:g}"]
        job = threading.Thread(target=lab.run, args=(train,), daemon=True,
                               kwargs={"env": env, "timeout": args.seconds + 300})
        job.start()
        wait_for_ranks(lab, args.nodes, 240)
        stop, figures = threading.Event(), {}
        scraper = threading.Thread(target=lambda: figures.update(job_figures(lab, stop, 2.0)),
                                   daemon=True)
        scraper.start()
        series = sample([h.pid for h in holders], lab.nodes[0].ifname, args.sample,
                        args.seconds)
        stop.set()
        scraper.join(60)
    found = {n.hostname: rounds_in(s, link) for n, s in zip(lab.nodes, series, strict=True)}
    per_round = {pair: [v for _at, v in sorted(got.items())] for pair, got in figures.items()}
    return {"link_bytes_per_second": link, "found": found, "probe_figures": per_round,
            "loop_tx_bytes_per_second": {
                n.hostname: round(statistics.median(r for _a, _b, r in rates(s)))
                for n, s in zip(lab.nodes, series, strict=True)}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--rate", default="100mbit", help="each node's link (tc rate)")
    ap.add_argument("--every", type=float, default=15.0, help="DDPNET_METRICS_PROBE_S")
    ap.add_argument("--seconds", type=float, default=70.0,
                    help="sampled once every rank reports")
    ap.add_argument("--sample", type=float, default=0.05, help="seconds between samples")
    ap.add_argument("--step-sleep", type=float, default=0.2)
    ap.add_argument("--out", type=Path, default=RESULTS / "probe_share.json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("probe_share: needs root (network namespaces)", file=sys.stderr)
        return 2
    load = os.getloadavg()
    got = measure(args)
    link = got["link_bytes_per_second"]
    nodes: dict[str, dict[str, Any]] = {
        host: {**share(rounds, link, args.every),
               "rounds_at": [round(r.start - rounds[0].start, 2) for r in rounds],
               "bytes_each": [round(r.bytes) for r in rounds]}
        for host, rounds in got["found"].items() if rounds}
    result = {
        "benchmark": "probe_share", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "loadavg_before": load, "loadavg_after": os.getloadavg()},
        "config": {**{k: v for k, v in vars(args).items() if k != "out"},
                   "burst_share": BURST_SHARE,
                   "join_s": JOIN_S, "default_every_s": DEFAULT_EVERY_S},
        "link_bytes_per_second": link,
        "loop_tx_bytes_per_second": got["loop_tx_bytes_per_second"],
        "nodes": nodes,
        "probe_figures_bytes_per_second": got["probe_figures"],
        "link_slow_alert": slow_alerts(got["probe_figures"]),
        "rounds": {h: [asdict(r) for r in rs] for h, rs in got["found"].items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for host, fig in nodes.items():
        print(f"{host}: {fig['rounds']} rounds, {fig['bytes_per_round_median'] / 1e6:.2f} MB "
              f"a round ({fig['link_s_per_round']:.2f} s of the link, busy "
              f"{fig['busy_s_per_round_median']:.2f} s): {100 * fig['share_at_every']:.2f} % "
              f"of the link at one round every {args.every:g} s, "
              f"{100 * fig['share_at_default']:.3f} % at {DEFAULT_EVERY_S:g} s")
    slow = result["link_slow_alert"]
    print(f"the job's probe figures: DdpnetLinkSlow would fire on {slow['would_fire']} of "
          f"{slow['pair_rounds']} pair-rounds of this healthy link")
    print(f"wrote {args.out}")
    return 0 if nodes else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""The job's and the nodes' metrics in a real Prometheus (issues 41 and 58), one lab for the
module.

Three lab nodes run ``ddpnet train`` as the issue ran it: the default model, nothing but
``DDPNET_METRICS_PORT`` and ``DDPNET_METRICS_PROBE_S=15`` (rank 0's hub serves the job; the
watch at its defaults: ``exit``, a random job id; ``DDPNET_WATCH_DIR`` only keeps its files
here), a loop of over 50 steps a second; and ``ddpnet monitor --metrics-port`` each with no
other option and no job environment (the nodes: each serves its cluster address by itself);
Debian's ``prometheus``, started here in node 0's namespace (the one place that reaches every
lab address) with the shipped ``prometheus/alerts.yml``, scrapes them every second at the
nodes' addresses. Its HTTP API then has every rank's step time with its ``rank`` and ``host``
labels, the step counts equal at every scrape, one phase series per phase that never vanishes,
each host pair's probed bandwidth within a minute of the job's start, each node's traffic, every
series the shipped dashboard and rules read (but the GPU's, a verdict's and a warning's), and once
a rank is frozen (SIGSTOP) the DdpnetHang alert fires naming that rank and host while the hub
waits for the verdict's scrape. ``promtool check metrics`` is clean on both endpoints."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ddpnet.lab import Lab, LabNode
from tests.lab_util import fresh_lab, requires_netns
from tests.test_prometheus_files import NAME, dashboard_exprs, rules

pytestmark = [requires_netns, pytest.mark.skipif(
    shutil.which("prometheus") is None or shutil.which("promtool") is None,
    reason="needs Debian's prometheus package (scripts/install-system-deps.sh)")]

ROOT = Path(__file__).resolve().parents[2]
SRC = str(ROOT / "src")
JOB_PORT, NODE_PORT, PROM = 9464, 9465, "127.0.0.1:9090"
MASTER_PORT = 29741
#: how long a condition may take to show in Prometheus on a loaded 2-core machine
PATIENCE_S = 120.0
#: the link figures of every host pair are there this long after the job's hub started
LINKS_WITHIN_S = 60.0
#: series served only once the watch gave a verdict or a warning (a counter's first sample)
VERDICT_SERIES = frozenset({"ddpnet_verdict", "ddpnet_verdicts_total", "ddpnet_warnings_total"})
#: a job's variables, empty: the monitors run outside any job
NO_JOB = dict.fromkeys(("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                        "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME"), "")

#: run inside node 0 (stdlib only): GET a URL, print the body
GET = ("import sys, urllib.request\n"
       "with urllib.request.urlopen(sys.argv[1], timeout=10) as r:\n"
       "    sys.stdout.write(r.read().decode())\n")


@dataclass
class Cluster:
    lab: Lab
    directory: Path
    job: threading.Thread | None = None
    results: list[Any] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    def get(self, url: str) -> str:
        out = self.lab.exec(0, [sys.executable, "-c", GET, url], timeout=30)
        return out.stdout if out.returncode == 0 else ""

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Prometheus's instant vector for ``expr`` (its HTTP API)."""
        import urllib.parse

        text = self.get(f"http://{PROM}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        data = json.loads(text) if text else {}
        result: list[dict[str, Any]] = data.get("data", {}).get("result", [])
        return result

    def on_line(self, node: LabNode, stream: str, line: str) -> None:
        self.lines.append(f"{node.index} {stream} {line}")

    def rank_process(self, rank: int) -> psutil.Process:
        """The ``ddpnet train`` process of ``rank`` in this job (by its environment)."""
        for proc in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error):
                cmd = proc.info["cmdline"] or []
                env = proc.environ()
                if "train" in cmd and env.get("RANK") == str(rank) and \
                        env.get("MASTER_PORT") == str(MASTER_PORT):
                    return proc
        raise LookupError(f"rank {rank}'s process is not running: {self.lines[-20:]}")


def until(what: str, check: Callable[[], Any], cluster: Cluster) -> Any:
    """``check()``'s first truthy answer, polled once a second for PATIENCE_S."""
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(1.0)
    raise AssertionError(f"{what}: not in Prometheus after {PATIENCE_S:g} s; "
                         f"{cluster.lines[-30:]}")


def prometheus_config(lab: Lab) -> str:
    job = lab.nodes[0].address
    nodes = ", ".join(f"'{n.address}:{NODE_PORT}'" for n in lab.nodes)
    return (f"global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n"
            f"rule_files: ['{ROOT / 'prometheus' / 'alerts.yml'}']\n"
            f"scrape_configs:\n"
            f"  - job_name: ddpnet-job\n"
            f"    static_configs: [{{targets: ['{job}:{JOB_PORT}']}}]\n"
            f"  - job_name: ddpnet-node\n"
            f"    static_configs: [{{targets: [{nodes}]}}]\n")


def start(cluster: Cluster) -> None:
    lab, directory = cluster.lab, cluster.directory
    env = {"PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}
    (directory / "prometheus.yml").write_text(prometheus_config(lab))
    lab.popen(0, ["prometheus", f"--config.file={directory / 'prometheus.yml'}",
                  f"--storage.tsdb.path={directory / 'data'}", f"--web.listen-address={PROM}",
                  "--log.level=warn"],
              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
              stderr=(directory / "prometheus.log").open("w"))
    for node in lab.nodes:  # no option but the port, no job: its own cluster address
        lab.popen(node.index, [sys.executable, "-m", "ddpnet", "monitor", "--metrics-port",
                               str(NODE_PORT)],
                  env={**env, **NO_JOB}, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                  stderr=(directory / f"monitor{node.index}.log").open("w"))
    # the default model, long enough (its one epoch is 42 steps) and quiet (each log line
    # evaluates): well over the 50-step window between two heartbeats
    train = [sys.executable, "-m", "ddpnet", "train", "--epochs", "100000",
             "--log-every", "1000000"]
    job_env = {**env, "DDPNET_WATCH_DIR": str(directory / "watch"),
               "DDPNET_METRICS_PORT": str(JOB_PORT), "DDPNET_METRICS_PROBE_S": "15"}

    def run() -> None:
        cluster.results = lab.run(train, env=job_env, timeout=600, master_port=MASTER_PORT,
                                  on_line=cluster.on_line)

    cluster.job = threading.Thread(target=run, daemon=True)
    cluster.job.start()


def stop(cluster: Cluster) -> None:
    """Kill every rank (SIGKILL: a SIGTERM stops each rank at its own point, and the hung
    job's ranks then part at mismatched collectives until gloo's 30-minute timeout), then wait
    for the job: its hub leaves by itself once every rank is gone and Prometheus scraped its
    last verdict (``Hub.verdict_seen``)."""
    for rank in range(len(cluster.lab.nodes)):
        with contextlib.suppress(LookupError, psutil.Error):
            cluster.rank_process(rank).kill()
    if cluster.job is not None:
        cluster.job.join(timeout=120)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("metrics-lab")
    with fresh_lab("wpm", nodes=3) as lab:
        running = Cluster(lab, directory)
        try:
            start(running)
            yield running
        finally:
            stop(running)


def hosts(cluster: Cluster) -> set[str]:
    return {n.hostname for n in cluster.lab.nodes}


def test_every_ranks_step_time_is_in_prometheus_with_its_rank_and_host(
        cluster: Cluster) -> None:
    expected = {(str(n.index), n.hostname) for n in cluster.lab.nodes}

    def step_times() -> set[tuple[str, str]] | None:
        found = cluster.query('ddpnet_step_seconds_count > 0')
        got = {(r["metric"]["rank"], r["metric"]["host"]) for r in found}
        return got if got == expected else None

    assert until("every rank's step time", step_times, cluster) == expected
    # the histogram answers quantiles per rank, and the job says who it is; a rate needs two
    # scrapes of a series in its window, and the first count above may be the first scrape
    # (a loaded run asked a second too early: no series)

    def quantiles() -> set[str] | None:
        p50 = cluster.query("histogram_quantile(0.5, sum by (le, rank) "
                            "(rate(ddpnet_step_seconds_bucket[30s])))")
        got = {str(r["metric"]["rank"]) for r in p50}
        return got if got == ranks else None

    ranks = {rank for rank, _host in expected}
    assert ranks == {"0", "1", "2"}
    assert until("every rank's step-time quantile", quantiles, cluster) == ranks
    [info] = cluster.query("ddpnet_job_info")
    # no DDPNET_JOB_ID: a random one (watch.session)
    assert info["metric"]["world_size"] == "3" and len(info["metric"]["job_id"]) == 8


def test_each_host_pairs_probed_bandwidth_is_in_prometheus(cluster: Cluster) -> None:
    names = hosts(cluster)
    expected = {(a, b) for a in names for b in names if a != b}

    def pairs() -> set[tuple[str, str]] | None:
        found = cluster.query("ddpnet_probe_bandwidth_bytes_per_second > 0")
        got = {(r["metric"]["host"], r["metric"]["peer_host"]) for r in found}
        return got if got == expected else None

    assert until("every host pair's bandwidth", pairs, cluster) == expected
    rtts = cluster.query("ddpnet_probe_rtt_seconds > 0")
    assert {(r["metric"]["host"], r["metric"]["peer_host"]) for r in rtts} == expected
    # the first round came within a minute of the job's start (its hub's clock), not after
    # DDPNET_METRICS_PROBE_S (30 s here; 300 by default)
    first = cluster.query("min_over_time(ddpnet_probe_timestamp_seconds[10m])"
                          " - on(job_id) group_left ddpnet_job_start_time_seconds")
    late = {(r["metric"]["host"], r["metric"]["peer_host"]): float(r["value"][1]) for r in first}
    assert set(late) == expected and max(late.values()) < LINKS_WITHIN_S, late


def test_step_counts_are_exact_and_no_phase_series_disappears(cluster: Cluster) -> None:
    """A rank stepping more than the 50-step window between two heartbeats lost steps from
    the histogram (its count fell behind ddpnet_steps_total); a phase change made the old
    phase's series vanish."""
    fast = until("a loop of over 50 steps a second on every rank", lambda: len(
        cluster.query('rate(ddpnet_steps_total[15s]) > 50')) == 3, cluster)
    assert fast
    time.sleep(10.0)  # more scrapes of the fast loop
    drift = cluster.query('max_over_time((abs(ddpnet_step_seconds_count - '
                          'ddpnet_steps_total))[10m:1s])')
    assert len(drift) == 3 and all(float(r["value"][1]) == 0 for r in drift), drift
    waits = cluster.query('ddpnet_collective_wait_seconds_count - '
                          'ddpnet_steps_total')
    assert len(waits) == 3 and all(float(r["value"][1]) == 0 for r in waits), waits
    # every rank has one series per phase, each in every scrape since the rank's first (a
    # phase series that vanished in between has fewer samples than the rank's step count)
    phases = cluster.query('count_over_time(ddpnet_rank_phase[10m])'
                           ' - on(job_id, rank, host) group_left '
                           'count_over_time(ddpnet_steps_total[10m])')
    from ddpnet.watch.state import PHASES

    assert len(phases) == 3 * len(PHASES), phases
    assert all(float(r["value"][1]) == 0 for r in phases), phases
    moving = cluster.query('changes(ddpnet_rank_phase[10m]) > 0')
    assert moving, "no rank changed its phase: the check above could not fail"


def test_each_nodes_traffic_is_in_prometheus_and_both_endpoints_pass_promtool(
        cluster: Cluster) -> None:
    names = hosts(cluster)

    def nodes() -> set[str] | None:
        found = cluster.query("ddpnet_node_network_receive_bytes_per_second > 0")
        got = {r["metric"]["host"] for r in found}
        return got if got == names else None

    assert until("every node's traffic", nodes, cluster) == names
    for node in cluster.lab.nodes:  # each exporter said where it serves, and why
        said = (cluster.directory / f"monitor{node.index}.log").read_text()
        assert f"http://{node.address}:{NODE_PORT}/metrics ({node.address}: {node.ifname}'s " \
            f"address; selected {node.ifname}: " in said, said
    served: set[str] = set()
    for node in cluster.lab.nodes:
        ports = (JOB_PORT, NODE_PORT) if node.index == 0 else (NODE_PORT,)
        for port in ports:
            text = cluster.get(f"http://{node.address}:{port}/metrics")
            assert "ddpnet_" in text, (node.hostname, port)
            out = subprocess.run(["promtool", "check", "metrics"], input=text, text=True,
                                 capture_output=True, timeout=60)
            assert out.returncode == 0 and not (out.stdout + out.stderr).strip(), \
                (node.hostname, port, out)
            served |= {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    # the shipped dashboard and rules read only what the defaults serve: all of it but a
    # GPU's (none here) and a verdict's or a warning's (none yet)
    used = {m for rule in rules() for m in NAME.findall(rule["expr"])} | \
        {m for expr, _legend in dashboard_exprs() for m in NAME.findall(expr)}
    absent = {m for m in used - served
              if not m.startswith("ddpnet_node_gpu_") and m not in VERDICT_SERIES}
    assert not absent, absent
    # nothing secret: no job token (MASTER_ADDR:MASTER_PORT), no environment
    job = cluster.get(f"http://{cluster.lab.nodes[0].address}:{JOB_PORT}/metrics")
    assert f":{MASTER_PORT}" not in job and "PYTHONPATH" not in job


def test_a_frozen_rank_fires_the_hang_alert_naming_it(cluster: Cluster) -> None:
    """Last in the module: it ends the job (the watch's default action, ``exit``: the others
    exit, the frozen one is killed by the fixture). The hub stays until a scrape rendered the
    verdict, so the alert fires for those seconds and resolves once the hub is gone: what
    fired is read from Prometheus's ``ALERTS`` history, not the alerts firing now (the
    annotations' text is ``promtool test rules``' part, tests/test_prometheus_files.py)."""
    frozen = cluster.lab.nodes[2]
    cluster.rank_process(2).send_signal(signal.SIGSTOP)

    def fired() -> list[dict[str, Any]]:
        return cluster.query('last_over_time(ALERTS{alertname="DdpnetHang", '
                             'alertstate="firing"}[10m])')

    alerts = until("the DdpnetHang alert", fired, cluster)
    assert [(a["metric"]["rank"], a["metric"]["host"]) for a in alerts] == \
        [("2", frozen.hostname)], alerts

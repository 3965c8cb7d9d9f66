"""Ray Train's ``TorchTrainer`` under the watch, unchanged: a Ray cluster over two lab nodes
(``ray start`` on each, run with the environment form's variables, ``python -m ddpnet.attach
--env``: Ray's workers are started by the raylets, with the raylets' environment), the driver
on node 0, one worker a node. As the other trainers (``trainers_lab``): healthy with
validation and rank-0 checkpoints, the same loss unwatched (``DDPNET_WATCH=0`` in the job's
runtime_env); a stopped rank and the link of rank 1's node cut are named by the watch with
rank and host, and every rank is out. A killed worker is Ray's own to name: its controller
tears the worker group down within a second, rank 0's process tree (the hub's) with it, and
its error names the rank and the node."""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from ddpnet.lab import Lab
from ddpnet.watch.attach import ranks_env
from tests.lab_util import fresh_lab, requires_netns
from tests.watch import trainers_lab
from tests.watch.lab_watch import Watcher, report

pytestmark = requires_netns
RAY = str(Path(sys.executable).with_name("ray"))
SCRIPT = str(trainers_lab.TRAINERS / "ray_train.py")
PORT = 6379
#: Ray's prefix on a worker's lines in the driver's output (no colour: RAY_COLOR_PREFIX=0)
WORKER = re.compile(r"^\(RayTrainWorker pid=(\d+)(?:, ip=[\d.]+)?\) ")
QUIET = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_COLOR_PREFIX": "0", "RAY_DEDUP_LOGS": "0",
         "RAY_AUTH_MODE": "disabled", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with fresh_lab("tr", nodes=2) as lab:
        head = f"{lab.nodes[0].address}:{PORT}"
        env = {**ranks_env(os.environ, True), **QUIET,
               "PYTHONPATH": os.pathsep.join([ranks_env(os.environ, True)["PYTHONPATH"],
                                              trainers_lab.SRC, str(trainers_lab.TRAINERS)])}
        common = ["--num-cpus", "1", "--disable-usage-stats", "--block"]
        procs = [lab.popen(0, [RAY, "start", "--head", "--port", str(PORT),
                               "--node-ip-address", lab.nodes[0].address,
                               "--include-dashboard", "false", *common], env=env)]
        _until_nodes(lab, head, 1)
        procs.append(lab.popen(1, [RAY, "start", "--address", head, "--node-ip-address",
                                   lab.nodes[1].address, *common], env=env))
        _until_nodes(lab, head, 2)
        yield lab
        for proc in procs:
            proc.terminate()


def _until_nodes(lab: Lab, head: str, count: int) -> None:
    """Until the cluster has ``count`` live nodes (fixed bound: 120 s)."""
    probe = (f"import ray; ray.init(address={head!r}, log_to_driver=False); "
             "print(sum(n['Alive'] for n in ray.nodes()))")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done = lab.exec(0, [sys.executable, "-c", probe], env=QUIET, timeout=60)
        if done.returncode == 0 and done.stdout.strip().endswith(str(count)):
            return
        time.sleep(1)
    raise AssertionError(f"the Ray cluster did not reach {count} nodes: {done.stderr[-2000:]}")


@dataclass
class RayWatcher(trainers_lab.Cutter):
    """Reads the workers' lines from the driver's output (Ray's prefix off), by their rank;
    each rank's host from its ``watched`` line: a cut is of rank 1's node, wherever Ray put
    it."""

    #: Ray worker pid -> rank, rank -> host
    ranks: dict[int, int] = field(default_factory=dict)
    hosts: dict[int, str] = field(default_factory=dict)

    def cut_node(self) -> int:
        return _node_of(self.lab, self.hosts[1])

    def on_line(self, node: Any, stream: str, raw: str) -> None:
        found = WORKER.match(raw)
        line = WORKER.sub("", raw)
        if found and line.startswith(("step ", "watched ")):  # ... rank R [host H]
            words = line.split()
            self.ranks[int(found.group(1))] = int(words[3])
            if words[0] == "watched":
                self.hosts[int(words[3])] = words[5]
        rank = self.ranks.get(int(found.group(1)), node.index) if found else node.index
        super().on_line(self.lab.nodes[rank] if rank < len(self.lab.nodes) else node,
                        stream, line)


def _run(lab: Lab, tmp: Path, watcher: Watcher, **env: str) -> Any:
    results = lab.run([sys.executable, SCRIPT], nodes=[0], timeout=300,
                      on_line=watcher.on_line,
                      env={**QUIET, "RAY_ADDRESS": f"{lab.nodes[0].address}:{PORT}",
                           "PYTHONPATH": trainers_lab.SRC, "CKPT_DIR": str(tmp / "ckpt"),
                           "DDPNET_WATCH_DIR": str(tmp), **env})
    return results[0]


def _lines(result: Any) -> list[str]:
    return [WORKER.sub("", line) for line in result.stdout.splitlines()]


def test_healthy_with_validation_and_checkpoints_same_loss_unwatched(lab: Lab,
                                                                     tmp_path: Path) -> None:
    losses = []
    for watch in ("1", "0"):
        result = _run(lab, tmp_path / f"watch{watch}", RayWatcher(lab), FAULT="none",
                      DDPNET_WATCH=watch)
        out = _lines(result)
        assert result.returncode == 0, (out[-30:], result.stderr[-3000:])
        for rank in (0, 1):
            assert any(line.startswith(f"watched {watch == '1'} rank {rank} ") for line in out)
        assert sum(line.startswith("validated ") for line in out) >= 2, out[-30:]
        assert any(line.startswith("saved ") for line in out), out[-30:]
        assert not (tmp_path / f"watch{watch}" / "report.json").exists()
        # Ray may print a worker's line twice (its log monitor and the driver's echo)
        by_worker = {found.group(1): WORKER.sub("", line).split()[1]
                     for line in result.stdout.splitlines()
                     if (found := WORKER.match(line)) and " loss " in f" {line}"}
        assert len(by_worker) == 2, result.stdout[-2000:]
        losses += by_worker.values()
    assert len(losses) == 4 and len(set(losses)) == 1, losses


@pytest.mark.parametrize("fault", ["stop", "kill", "link-down"])
def test_a_fault_is_named_with_rank_and_host_and_every_rank_is_out(
        lab: Lab, tmp_path: Path, fault: str) -> None:
    watcher = RayWatcher(lab, resume_after=frozenset({0}))
    timer = threading.Timer(150, watcher.resume_if_never_named)
    timer.start()
    cut = fault == "link-down"
    try:
        result = _run(lab, tmp_path, watcher, STEPS="2000", STEP_S="0.01", FAULT_STEP="40",
                      FAULT_AFTER_S=str(trainers_lab.FAULT_AFTER_S),
                      FAULT="cut" if cut else fault, FAULT_RANK="0" if cut else "1")
    finally:
        timer.cancel()
        if cut and watcher.link_down is not None:
            lab.clear(watcher.link_down)
    hosts = watcher.hosts
    assert result.returncode == 1 and "failed " in result.stdout, result.stdout[-2000:]
    if fault == "kill":
        _named_by_ray(lab, result, hosts[1], tmp_path)
    else:
        _named_by_the_watch(tmp_path, watcher, hosts[1], cut)
    # every rank out: no Ray Train worker of this job left
    deadline = time.monotonic() + trainers_lab.OUT_S
    while time.monotonic() < deadline and _workers():
        time.sleep(0.5)
    assert not _workers(), _workers()


def _named_by_ray(lab: Lab, result: Any, host: str, tmp: Path) -> None:
    """A killed worker is Ray's to name: its controller tears the worker group down within a
    second (rank 0's process tree with the hub in it) and its error names the rank and node.
    Whatever the watch said before that must not contradict it."""
    address = lab.nodes[_node_of(lab, host)].address
    assert "world_rank=1" in result.stderr and f"node_ip='{address}'" in result.stderr, \
        result.stderr[-3000:]
    if (tmp / "report.json").exists():
        assert f"rank 1 ({host})" in (tmp / "report.json").read_text()


def _named_by_the_watch(tmp: Path, watcher: Watcher, host: str, cut: bool) -> None:
    found = report(tmp, watcher)
    text = "\n".join([found["diagnosis"]["summary"], *found["diagnosis"]["evidence"]])
    if cut:
        assert found["kind"] == "network" and f"link down: rank 1 ({host}, " in text, \
            (text, watcher.tail())
    else:
        assert found["kind"] == "rank-gone" and f"rank 1 ({host}) is gone" in text, \
            (text, watcher.tail())
    assert watcher.fault_at is not None
    assert (tmp / "report.json").stat().st_mtime - watcher.fault_at < trainers_lab.NAMED_S


def _node_of(lab: Lab, host: str) -> int:
    return next(n.index for n in lab.nodes if n.hostname == host)


def _workers() -> list[str]:
    out = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if cmd.startswith("ray::RayTrainWorker") and "IDLE" not in cmd:
            out.append(f"{proc.pid} {cmd}")
    return out

"""The init container's preflight: the rank from the pod index, the bounded wait for
MASTER_ADDR, then ``ddpnet check``; pure parts, a real process, and (root) the rendered init
containers of two pods run in a lab whose master name appears only later, as a pod's DNS record
does."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import pytest

from ddpnet.errors import ConfigError, RendezvousError
from ddpnet.k8s.options import K8sOptions
from ddpnet.k8s.preflight import check_environ, wait_for
from ddpnet.k8s.render import render
from ddpnet.launch.command import Target
from ddpnet.net.names import HostResolution
from tests.conftest import clean_environ
from tests.k8s.kubelet import pods
from tests.lab_util import fresh_lab, requires_netns


@pytest.mark.parametrize(("index", "offset", "rank"), [("0", None, "0"), ("0", "1", "1"),
                                                       ("6", "1", "7"), ("12", "0", "12")])
def test_rank_is_index_plus_offset(index: str, offset: str | None, rank: str) -> None:
    environ = {"DDPNET_POD_INDEX": index, "X": "y"}
    if offset is not None:
        environ["DDPNET_RANK_OFFSET"] = offset
    assert check_environ(environ) == {**environ, "RANK": rank}


@pytest.mark.parametrize("environ", [{}, {"DDPNET_POD_INDEX": "x"},
                                     {"DDPNET_POD_INDEX": "-1"},
                                     {"DDPNET_POD_INDEX": "0", "DDPNET_RANK_OFFSET": "one"}])
def test_a_missing_or_bad_index_is_a_config_error(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        check_environ(environ)


class FakeDns:
    """Resolves after ``after`` seconds of a fake clock that sleeping advances."""

    def __init__(self, after: float) -> None:
        self.now = 0.0
        self.after = after
        self.said: list[str] = []

    def resolve(self, host: str, timeout: float) -> HostResolution:
        assert 0.5 <= timeout <= 5.0
        if self.now >= self.after:
            return HostResolution(("10.0.0.1",), False, False, host)
        return HostResolution((), False, False, host, error="Name or service not known")

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def kw(self) -> dict[str, Any]:
        return {"resolve": self.resolve, "clock": lambda: self.now, "sleep": self.sleep,
                "say": self.said.append}


def test_wait_returns_once_the_name_resolves_and_says_it_waits() -> None:
    dns = FakeDns(after=25.0)
    assert wait_for("job-rdzv", 300, **dns.kw()) == pytest.approx(26.0)
    assert len(dns.said) == 2 and "waiting for MASTER_ADDR job-rdzv" in dns.said[0]


def test_wait_gives_up_after_its_bound_with_the_cause() -> None:
    dns = FakeDns(after=1e9)
    with pytest.raises(RendezvousError) as err:
        wait_for("job-rdzv", 30, **dns.kw())
    assert err.value.cause == "master-unresolvable"
    assert "did not resolve within 30 s (Name or service not known)" in str(err.value)
    assert 30 <= dns.now <= 32


def _preflight(env: dict[str, str], *args: str, timeout: float = 60
               ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ddpnet.k8s.preflight", *args],
                          env=clean_environ(env), capture_output=True, text=True,
                          timeout=timeout)


def test_an_unresolvable_master_fails_the_init_container_in_its_bound() -> None:
    start = time.monotonic()
    proc = _preflight({"DDPNET_POD_INDEX": "1", "MASTER_ADDR": "no-such-pod.invalid",
                       "MASTER_PORT": "29500", "WORLD_SIZE": "2"}, "2")
    assert proc.returncode == 1, proc.stderr
    assert "ddpnet: error: MASTER_ADDR no-such-pod.invalid did not resolve within 2 s" in \
        proc.stderr
    assert "hint: is the master pod scheduled" in proc.stderr
    assert time.monotonic() - start < 30


def test_outside_a_rendered_pod_it_says_so() -> None:
    proc = _preflight({}, "5")
    assert proc.returncode == 2
    assert "DDPNET_POD_INDEX is not set" in proc.stderr and "Traceback" not in proc.stderr
    assert _preflight({"DDPNET_POD_INDEX": "0"}).returncode == 2  # no WAIT_S


@requires_netns
@pytest.mark.slow
def test_rendered_init_containers_wait_for_the_master_then_check_passes() -> None:
    """Two lab nodes run the two pods' rendered init containers (their env and command, the
    kubelet's expansion, sys.executable for python3). The worker starts first, while the
    service name resolves nowhere; the name then appears on both nodes (the master pod got its
    address) and the master starts: the check runs across the pods and passes."""
    opts = K8sOptions(Target.parse(["train.py"]), 2, 0, "img:1", name="k8s", iface="eth0",
                      check_timeout=60)
    master_pod, worker_pod = pods(render(opts))
    with fresh_lab("k8i", nodes=2) as lab:
        def start(node: int, pod: Any) -> subprocess.Popen[str]:
            argv = pod.command(pod.init, init=True)
            return lab.popen(node, [sys.executable, *argv[1:], "--no-matrix"],
                             env=clean_environ(pod.environ(pod.init, init=True)),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        worker = start(1, worker_pod)
        first = worker.stdout.readline()  # blocks until the first "waiting" line (10 s)
        assert "waiting for MASTER_ADDR k8s-rdzv to resolve" in first, first
        assert worker.poll() is None
        for node in (0, 1):
            lab.fault("hosts-entry", node, host="k8s-rdzv", address=lab.nodes[0].address)
        master = start(0, master_pod)
        out_master, _ = master.communicate(timeout=120)
        out_worker, _ = worker.communicate(timeout=60)
    assert "rank 1: MASTER_ADDR k8s-rdzv resolved" in out_worker
    assert master.returncode == 0, out_master
    assert worker.returncode == 0, out_worker
    assert "ddpnet check: PASS" in out_master, out_master

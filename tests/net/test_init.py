"""ddpnet.init() with real gloo process groups across real processes on this host, and its
fail-fast causes (each checked before torch would start waiting)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import ddpnet
from ddpnet.errors import ConfigError, RendezvousError
from ddpnet.net.ports import free_port
from ddpnet.process_group import init_url, pick_backend
from tests import zygote
from tests.conftest import clean_environ
from tests.net.fixtures import cfg

WORKER = str(Path(__file__).with_name("init_worker.py"))
ROOT = str(Path(__file__).resolve().parents[2])


def _run_ranks(world: int, args: list[str], extra: dict[str, str] | None = None,
               timeout: float = 120) -> list[list[dict[str, object]]]:
    port = free_port()
    procs = []
    for rank in range(world):
        env = clean_environ({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                             "WORLD_SIZE": str(world), "RANK": str(rank),
                             "PYTHONPATH": f"{ROOT}/src:{ROOT}", **(extra or {})})
        procs.append(zygote.popen([WORKER, *args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    results = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        assert "Traceback" not in err, err
        results.append([json.loads(line) for line in out.splitlines() if line.startswith("{")])
    return results


def test_two_ranks_env_tcp_file_in_one_run(tmp_path: Path) -> None:
    """env://, tcp:// and file:// one after the other in the same processes (init, all_reduce,
    shutdown, init again): checks the sum, and that only the reported variables changed and
    were restored."""
    tcp = f"tcp://127.0.0.1:{free_port()}"
    file = f"file://{tmp_path}/rendezvous"
    results = _run_ranks(2, ["env", tcp, file])
    for rank, rounds in enumerate(results):
        assert [r["method"] for r in rounds] == ["env", tcp, file], rounds
        for r in rounds:
            assert r["rank"] == rank and r["world_size"] == 2 and r["sum"] == 3.0
            assert r["backend"] == "gloo" and r["device"] == "cpu" and r["interface"] == "lo"
            # the interface pins, and the watch's Flight Recorder size (docs/watch.md)
            assert r["environ_set"] == {"GLOO_SOCKET_IFNAME": "lo",
                                        "NCCL_SOCKET_IFNAME": "=lo", "TP_SOCKET_IFNAME": "lo",
                                        "TORCH_FR_BUFFER_SIZE": "64"}
            assert r["changed"] == sorted(r["environ_set"])  # nothing else touched
            assert r["restored"] and not r["initialized"]


def test_rank0_missing_gives_refused_within_connect_timeout() -> None:
    import time

    t0 = time.monotonic()
    port = free_port()
    env = clean_environ({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                         "WORLD_SIZE": "2", "RANK": "1", "PYTHONPATH": f"{ROOT}/src:{ROOT}",
                         "NT_CONNECT_TIMEOUT": "2"})
    proc = zygote.run([WORKER], env=env, capture_output=True, text=True,
                          timeout=60)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 1, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["cause"] == "master-port-refused" and out["rank"] == 1
    assert elapsed < 2 + 15  # the preflight's 2 s plus importing torch on a loaded machine


@pytest.fixture
def solo(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GLOO_SOCKET_IFNAME",
                "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "NNODES", "NODE_RANK",
                "TORCHELASTIC_USE_AGENT_STORE"):
        monkeypatch.delenv(key, raising=False)
    for key in list(__import__("os").environ):
        if key.startswith(("SLURM_", "OMPI_", "PMI_", "PMIX_", "LSB_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    return monkeypatch


@pytest.mark.parametrize(
    ("env", "overrides", "cause", "hint"),
    [
        ({"GLOO_SOCKET_IFNAME": "^lo"}, {}, "ifname-syntax", "GLOO_SOCKET_IFNAME"),
        ({"GLOO_SOCKET_IFNAME": "nt-nosuch0"}, {}, "ifname-missing", "ddpnet.init() picks"),
        ({"MASTER_ADDR": "no-such-host.invalid"}, {"rank": 1, "world_size": 2},
         "master-unresolvable", "/etc/hosts"),
        ({}, {"rank": 1, "world_size": 2}, "master-port-refused", "start rank 0"),
    ],
)
def test_fail_fast_causes(solo: pytest.MonkeyPatch, env: dict[str, str],
                          overrides: dict[str, int], cause: str, hint: str) -> None:
    import os

    for k, v in env.items():
        solo.setenv(k, v)
    before = dict(os.environ)
    with pytest.raises(RendezvousError) as info:
        ddpnet.init(connect_timeout=1, **overrides)
    assert info.value.cause == cause, info.value.message
    assert hint in info.value.hint
    assert dict(os.environ) == before


def test_port_in_use_on_rank0(solo: pytest.MonkeyPatch) -> None:
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen(1)
        solo.setenv("MASTER_PORT", str(holder.getsockname()[1]))
        with pytest.raises(RendezvousError) as info:
            ddpnet.init(connect_timeout=2)
    assert info.value.cause == "port-in-use" and info.value.rank == 0


def test_world_of_one_in_process_and_context_manager(solo: pytest.MonkeyPatch) -> None:
    import torch.distributed as dist

    with ddpnet.init(connect_timeout=5) as h:
        assert dist.is_initialized() and h.rank == 0 and h.world_size == 1
        assert h.interface == "lo" and h.config.master_addr == "127.0.0.1"
        with pytest.raises(ConfigError, match="already exists"):
            ddpnet.init()
    assert not dist.is_initialized()
    ddpnet.shutdown()  # idempotent


def test_pick_backend() -> None:
    assert pick_backend("auto", 0, True).backend == "gloo"
    assert pick_backend("auto", 2, True).backend == "nccl"
    assert pick_backend("auto", 2, False).backend == "gloo"
    chosen = pick_backend("gloo", 8, True)
    assert (chosen.backend, chosen.reason) == ("gloo", "argument backend")
    with pytest.raises(ConfigError, match="no CUDA device"):
        pick_backend("nccl", 0, True)
    with pytest.raises(ConfigError, match="not one of"):
        pick_backend("mpi", 0, True)


def test_init_url() -> None:
    assert init_url(cfg("198.18.0.1", port=29501)) == "tcp://198.18.0.1:29501"
    assert init_url(cfg("fd00::1")) == "tcp://[fd00::1]:29500"
    assert init_url(cfg(init_method="file:///s/x")) == "file:///s/x"


def test_import_ddpnet_stays_torch_free() -> None:
    code = "import sys, ddpnet; ddpnet.init; ddpnet.shutdown; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=clean_environ({"PYTHONPATH": f"{ROOT}/src:{ROOT}"}))
    assert out.stdout.strip() == "False"


def test_under_torchrun_rank0_uses_the_agent_store() -> None:
    """torchrun's agent already holds MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE): rank 0 must
    connect to it like the others instead of reporting port-in-use."""
    port = free_port()
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--master-port", str(port), WORKER, "env"],
        env=clean_environ({"PYTHONPATH": f"{ROOT}/src:{ROOT}"}), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rounds = sorted((json.loads(line) for line in proc.stdout.splitlines()
                     if line.startswith("{")), key=lambda o: o["rank"])
    assert [(o["rank"], o["sum"]) for o in rounds] == [(0, 3.0), (1, 3.0)]


@pytest.mark.parametrize("kwargs", [{"connect_timeout": float("nan")},
                                    {"connect_timeout": -1}, {"timeout": -5},
                                    {"timeout": float("nan")}, {"timeout": "soon"},
                                    {"connect_timeout": None}])
def test_bad_timeouts_are_config_errors(kwargs: dict[str, object]) -> None:
    # nan passed the old ``<= 0`` check; a negative timeout went on to torch
    with pytest.raises(ConfigError, match="timeout"):
        ddpnet.init(**kwargs)


def test_a_script_traceback_shows_the_hint() -> None:
    # a user's script that calls init() gets Python's traceback, not the CLI's report: the
    # hint rides along as an exception note
    proc = subprocess.run([sys.executable, "-c", "import ddpnet; ddpnet.init()"],
                          env=clean_environ({"RANK": "1"}), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    if sys.version_info >= (3, 11):
        assert lines[-2].endswith("RANK is set but WORLD_SIZE is not")
        assert lines[-1].startswith("hint: export both")


def test_another_service_on_master_port_is_named_by_a_worker() -> None:
    """Something that is not a TCPStore answers on MASTER_PORT: master-port-foreign at once
    (torch's client would wait for its timeout on it)."""
    import threading
    import time

    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)

        def serve() -> None:
            conn, _ = srv.accept()
            with conn:
                conn.recv(64)
                conn.sendall(b"-ERR unknown command\r\n")  # a redis-like line service

        threading.Thread(target=serve, daemon=True).start()
        env = clean_environ({"MASTER_ADDR": "127.0.0.1",
                             "MASTER_PORT": str(srv.getsockname()[1]), "WORLD_SIZE": "2",
                             "RANK": "1", "NT_CONNECT_TIMEOUT": "5",
                             # this checkout's sources, not an installed ddpnet
                             "PYTHONPATH": f"{ROOT}/src:{ROOT}"})
        t0 = time.monotonic()
        proc = zygote.run([WORKER], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["cause"] == "master-port-foreign" and out["rank"] == 1, out
    assert time.monotonic() - t0 < 15


def test_single_node_config_copied_to_a_cluster_fails_at_once() -> None:
    """MASTER_ADDR=localhost while LOCAL_WORLD_SIZE < WORLD_SIZE: master-loopback before
    anything waits, on every node that has it (here a node-1 rank)."""
    import time

    env = clean_environ({"MASTER_ADDR": "localhost", "MASTER_PORT": str(free_port()),
                         "WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1",
                         "LOCAL_WORLD_SIZE": "2", "NT_CONNECT_TIMEOUT": "30",
                         "PYTHONPATH": f"{ROOT}/src:{ROOT}"})
    t0 = time.monotonic()
    proc = zygote.run([WORKER], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["cause"] == "master-loopback" and out["rank"] == 3, out
    assert "LOCAL_WORLD_SIZE=2" in str(out["message"])
    assert str(out["hint"]).startswith("export MASTER_ADDR=")
    assert time.monotonic() - t0 < 10  # not the 30 s connect timeout

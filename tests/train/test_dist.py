"""Training joins the group through ddpnet.init() and puts its tensors where the one
backend/device choice says: on cuda, ``cuda:<local_rank>`` (issue 19 bug 1: the device stayed
cpu under an nccl group, "No backend type associated with device type cpu")."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.distributed as dist

from ddpnet.config import DistConfig
from ddpnet.net.ports import free_port
from ddpnet.process_group import shutdown
from ddpnet.train.dist import init_distributed, lone_overrides
from tests.conftest import clean_environ


@pytest.fixture
def fake_gpus(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Two visible GPUs and NCCL, as torch would report them; records what init() asks."""
    calls: dict[str, Any] = {}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: calls.setdefault("set_device", i))
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    monkeypatch.setattr(dist, "init_process_group",
                        lambda backend, **kw: calls.setdefault("backend", backend))
    monkeypatch.setattr("ddpnet.net.probe.preflight", lambda *a, **kw: None)
    monkeypatch.setattr("ddpnet.rendezvous.open_store", lambda *a, **kw: None)  # no peer
    kept = clean_environ()
    for key in [k for k in os.environ if k not in kept]:
        monkeypatch.delenv(key)  # no launcher variables of the test's own
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    yield calls
    shutdown()  # puts back the variables init() set


@pytest.mark.parametrize("device", ["cuda", "auto"])
def test_cuda_choice_puts_the_rank_on_its_gpu(fake_gpus: dict[str, Any], device: str) -> None:
    d = init_distributed(device, timeout_s=30)
    assert (d.backend, d.device, d.local_rank) == ("nccl", "cuda:1", 1)
    assert fake_gpus == {"set_device": 1, "backend": "nccl"}
    assert "ddpnet.init" in d.via and "CUDA" in d.via  # the choice's reason rides along


def test_cpu_choice_stays_on_cpu_with_gloo(fake_gpus: dict[str, Any]) -> None:
    d = init_distributed("cpu", timeout_s=30)
    assert (d.backend, d.device) == ("gloo", "cpu")
    assert fake_gpus == {"backend": "gloo"}


def _cfg(world: int) -> DistConfig:
    from ddpnet.env.resolve import resolve_config

    return resolve_config({"RANK": "0", "WORLD_SIZE": str(world), "MASTER_ADDR": "10.0.0.1",
                           "MASTER_PORT": "29500"}, {})


def test_a_lone_process_gets_a_loopback_port_and_a_group_keeps_its_launcher() -> None:
    assert lone_overrides(_cfg(1), port=lambda: 4242) == {"master_addr": "127.0.0.1",
                                                         "master_port": 4242}
    assert lone_overrides(_cfg(2), port=lambda: 4242) == {}

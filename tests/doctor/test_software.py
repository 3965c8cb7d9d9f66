"""software family: canned torch probe answers (CPU build, CUDA build, broken torch), the
per-install cache, NVML facts, /dev/shm and ulimits; and the real probe on this host."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from ddpnet.doctor import software
from ddpnet.doctor.base import Host
from tests.doctor.helpers import Tree, inputs, ok

PROBE_KEY = (sys.executable, "-c")
CPU = {"torch": "2.13.0+cpu", "cuda_build": None, "gloo": True, "nccl_backend": False,
       "mpi": False}
CUDA = {"torch": "2.13.0+cu126", "cuda_build": "12.6", "gloo": True, "nccl_backend": True,
        "mpi": False, "nccl": "2.26.2"}
GPUS = {"driver": "560.35.03", "gpus": ["NVIDIA H100 80GB HBM3"] * 8, "libnccl": "2.26.2",
        "libnccl_name": "libnccl.so.2"}


def host_for(tmp_path: Path, probe: dict[str, Any] | None, native: dict[str, Any] | None = None,
             cache: bool = False) -> Host:
    tree = Tree(tmp_path)
    out = ok(json.dumps(probe)) if probe is not None else None
    return tree.host(commands={PROBE_KEY: out}, native=native or {"nvml": "absent"},
                     cache=cache)


def run_all(host: Host, **kw: Any) -> dict[str, Any]:
    return {c.id: c.run(host, inputs(**kw)) for c in software.CHECKS}


def test_cpu_node(tmp_path: Path) -> None:
    r = run_all(host_for(tmp_path, CPU))
    assert r["software.torch"].summary == "torch 2.13.0+cpu (CPU build)"
    assert r["software.torch"].facts == {"torch": "2.13.0+cpu", "cuda": None}
    assert r["software.backends"].status == "pass"
    assert r["software.nccl"].status == "skip"
    assert r["software.gpus"].status == "skip" and "nvidia-ml-py" in r["software.gpus"].summary
    assert r["software.python"].facts["python"].count(".") == 2


def test_gpu_node(tmp_path: Path) -> None:
    r = run_all(host_for(tmp_path, CUDA, GPUS))
    assert r["software.torch"].summary == "torch 2.13.0+cu126 (CUDA 12.6)"
    assert r["software.nccl"].summary == "NCCL 2.26.2, libnccl 2.26.2"
    assert r["software.nccl"].facts["nccl"] == "2.26.2"
    assert r["software.gpus"].summary == "driver 560.35.03: 8 x NVIDIA H100 80GB HBM3"
    assert r["software.backends"].summary == "backends: gloo, nccl"


def test_gpu_node_with_cpu_torch_and_nccl_mismatch(tmp_path: Path) -> None:
    r = run_all(host_for(tmp_path, CPU, GPUS))
    assert r["software.torch"].status == "warn" and "8 GPU(s)" in r["software.torch"].summary
    assert r["software.backends"].status == "fail"
    r = run_all(host_for(tmp_path / "b", CUDA, dict(GPUS, libnccl="2.18.1")))
    assert r["software.nccl"].status == "warn" and "libnccl 2.18.1" in r["software.nccl"].summary


def test_broken_or_hung_torch_fails(tmp_path: Path) -> None:
    r = run_all(host_for(tmp_path, {"torch_error": "ImportError: libcudart.so.12"}))
    assert r["software.torch"].status == "fail" and "libcudart" in r["software.torch"].detail
    assert r["software.backends"].status == "skip"
    r = run_all(host_for(tmp_path / "b", None))  # runner timed out
    assert r["software.torch"].status == "fail" and "did not finish" in r["software.torch"].detail


def test_probe_is_cached_per_install(tmp_path: Path) -> None:
    host = host_for(tmp_path, CPU, cache=True)
    assert software.torch_facts(host)["torch"] == "2.13.0+cpu"
    assert len(host.calls) == 1  # type: ignore[attr-defined]
    again = Tree(tmp_path).host(commands={}, cache=True)  # no runner answer: must hit cache
    assert software.torch_facts(again)["torch"] == "2.13.0+cpu"
    assert again.calls == []  # type: ignore[attr-defined]
    assert list((tmp_path / "cache").glob("torch-*.json"))


def test_probe_in_process_replaces_the_child(tmp_path: Path) -> None:
    """``ddpnet check`` imports torch anyway: the doctor asks it, starts no second
    interpreter, and caches the answer like the child's."""
    from dataclasses import replace

    ran: list[Any] = []
    host = replace(Tree(tmp_path).host(commands={}, cache=True), torch_probe=lambda: CPU,
                   run=lambda argv, timeout: ran.append(argv))
    assert software.torch_facts(host)["torch"] == "2.13.0+cpu"
    assert ran == []
    again = Tree(tmp_path).host(commands={}, cache=True)
    assert software.torch_facts(again) == CPU


def test_in_process_summary_is_the_childs() -> None:
    import torch

    mine = software.torch_summary()
    assert mine["torch"] == torch.__version__ and mine["gloo"] is True
    assert "def summary" in software.TORCH_PROBE and "json.dumps(summary())" in software.TORCH_PROBE


def test_nccl_version_code() -> None:
    assert software.nccl_version_string(22605) == "2.26.5"
    assert software.nccl_version_string(2708) == "2.7.8"


MOUNTS = "tmpfs /dev/shm tmpfs rw,nosuid,nodev,size={} 0 0\nproc /proc proc rw 0 0\n"
LIMITS = """\
Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max open files            {}                 1048576              files
Max locked memory         unlimited            unlimited            bytes
"""


@pytest.mark.parametrize(("size", "status"), [("65536k", "warn"), ("16g", "pass"),
                                               (None, "fail")])
def test_shm(tmp_path: Path, size: str | None, status: str) -> None:
    tree = Tree(tmp_path)
    tree.write("proc/self/mounts", MOUNTS.format(size) if size else "proc /proc proc rw 0 0\n")
    r = software.Shm().run(tree.host(), inputs())
    assert r.status == status, r
    if size == "65536k":
        assert r.summary == "/dev/shm is only 64 MiB" and "--shm-size" in r.fix


def test_nofile_scales_with_world_size(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    tree.write("proc/self/limits", LIMITS.format(65536))
    host = tree.host()
    r = software.OpenFiles().run(host, inputs(world_size=64))
    assert r.status == "pass" and r.facts == {"ulimit_n": "65536", "ulimit_l": "unlimited"}
    r = software.OpenFiles().run(host, inputs(world_size=64000))
    assert r.status == "warn" and "want at least 129024" in r.summary
    tree.write("proc/self/limits", LIMITS.format(1024))
    assert software.OpenFiles().run(tree.host(), inputs()).status == "warn"


@pytest.mark.slow
def test_real_probe_on_this_host(tmp_path: Path) -> None:
    """The real child process, real torch (CPU wheel here), real loader and NVML lookups."""
    from ddpnet.doctor.base import run_command

    host = Host(run=run_command, native=software.native_facts)
    facts = software.probe(host)
    from importlib.metadata import version

    assert facts["torch"] == version("torch")
    assert "cuda_build" in facts and facts["gloo"] is True
    r = software.Torch().run(host, inputs())
    assert r.status == "pass" and version("torch") in r.summary


def test_gpus_with_persistence_mode_off_are_a_warning(tmp_path: Path) -> None:
    native = {**GPUS, "gpu_persistence": ["on", "off", None, "off"],
              "gpu_capabilities": ["9.0"] * 4}
    r = run_all(host_for(tmp_path, CUDA, native))["software.gpus"]
    assert r.status == "warn" and r.summary.endswith("persistence mode off on GPU 1,3")
    assert "nvidia-smi -pm 1" in r.fix and r.facts["gpu_capabilities"] == ["9.0"] * 4
    on = {**GPUS, "gpu_persistence": ["on"] * 8}
    assert run_all(host_for(tmp_path, CUDA, on))["software.gpus"].status == "pass"

"""ddpnet.watch.attach: the pure parts (a call's arguments to the job's overrides, the ranks'
PYTHONPATH and variables), the wrapper and where it is installed; installing imports no
torch, and torch.distributed is patched the moment it is imported."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from typing import Any

import pytest

from ddpnet.env.resolve import resolve_config
from ddpnet.watch import attach
from ddpnet.watch.attach import ATTACH_VAR, BOOT_DIR, call_overrides, python_path, ranks_env


def test_call_overrides_take_what_the_call_names() -> None:
    assert call_overrides({"backend": "gloo"}) == {}
    assert call_overrides({"rank": -1, "world_size": -1}) == {}  # torch's "not given"
    assert call_overrides({"rank": 1, "world_size": 4, "init_method": "tcp://10.0.0.1:23456"}
                          ) == {"rank": 1, "world_size": 4,
                                "init_method": "tcp://10.0.0.1:23456"}
    assert call_overrides({"init_method": "env://"}) == {"init_method": "env://"}
    # with a store of its own the init method is not torch's rendezvous either
    assert call_overrides({"init_method": "tcp://h:1", "store": object(), "rank": 0,
                           "world_size": 2}) == {"rank": 0, "world_size": 2}


@pytest.mark.parametrize("arguments,environ,expected", [
    ({"init_method": "tcp://10.1.2.3:23456", "rank": 1, "world_size": 2}, {},
     (1, 2, "10.1.2.3", 23456)),
    ({}, {"RANK": "3", "WORLD_SIZE": "4", "MASTER_ADDR": "n0", "MASTER_PORT": "29400"},
     (3, 4, "n0", 29400)),
    ({"init_method": "env://"}, {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.9",
                                 "MASTER_PORT": "1234"}, (0, 2, "10.0.0.9", 1234)),
    ({"rank": 1, "world_size": 2},
     {"MASTER_ADDR": "n1", "MASTER_PORT": "4000", "RANK": "0", "WORLD_SIZE": "2"},
     (1, 2, "n1", 4000)),
])
def test_the_job_resolves_from_the_call_and_the_environment(
        arguments: dict[str, Any], environ: dict[str, str],
        expected: tuple[int, int, str, int]) -> None:
    given = {k: (v, f"argument {k}") for k, v in call_overrides(arguments).items()}
    cfg = resolve_config(environ, given)
    assert (cfg.rank, cfg.world_size, cfg.master_addr, cfg.master_port) == expected


def test_python_path_puts_the_boot_dir_first_once() -> None:
    assert python_path({}, "/b") == "/b"
    assert python_path({"PYTHONPATH": "/u1:/u2"}, "/b") == "/b:/u1:/u2"
    assert python_path({"PYTHONPATH": "/b:/u1::"}, "/b") == "/b:/u1"  # composed twice


def test_ranks_env_turns_it_on_or_off() -> None:
    assert ranks_env({"PYTHONPATH": "/u"}, True, boot="/b") == {ATTACH_VAR: "1",
                                                                "PYTHONPATH": "/b:/u"}
    assert ranks_env({}, True, 9464, boot="/b")["DDPNET_METRICS_PORT"] == "9464"
    assert ranks_env({"PYTHONPATH": "/u"}, False, boot="/b") == {"DDPNET_WATCH": "0"}
    assert os.path.isfile(os.path.join(BOOT_DIR, "sitecustomize.py"))


def test_enabled_reads_the_variable() -> None:
    assert attach.enabled({ATTACH_VAR: "1"}) and attach.enabled({ATTACH_VAR: "yes"})
    assert not attach.enabled({}) and not attach.enabled({ATTACH_VAR: "0"})


def _fake_torch() -> tuple[dict[str, types.ModuleType], Any]:
    def init_process_group(backend: str | None = None) -> str:
        return f"group {backend}"

    mods = {name: types.ModuleType(name) for name in (
        "torch.distributed", "torch.distributed.distributed_c10d",
        "torch.distributed.device_mesh", "torch.distributed.other")}
    for name in ("torch.distributed", "torch.distributed.distributed_c10d",
                 "torch.distributed.device_mesh"):
        mods[name].init_process_group = init_process_group  # type: ignore[attr-defined]
    return mods, init_process_group


def test_patch_wraps_every_holder_once() -> None:
    mods, original = _fake_torch()
    assert attach.patch(mods)
    wrapped = mods["torch.distributed"].init_process_group  # type: ignore[attr-defined]
    assert wrapped is not original and wrapped.__wrapped__ is original
    for name in ("torch.distributed.distributed_c10d", "torch.distributed.device_mesh"):
        assert mods[name].init_process_group is wrapped  # type: ignore[attr-defined]
    assert not hasattr(mods["torch.distributed.other"], "init_process_group")
    assert attach.patch(mods)  # again: still one wrapper around the original
    assert mods["torch.distributed"].init_process_group is wrapped  # type: ignore[attr-defined]
    assert attach.wrap(wrapped) is wrapped
    assert not attach.patch({})  # torch without distributed support


def test_the_wrapper_keeps_the_call_when_there_is_nothing_to_watch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A world of one: the user's call and its result, untouched."""
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    mods, _original = _fake_torch()
    attach.patch(mods)
    wrapped = mods["torch.distributed"].init_process_group  # type: ignore[attr-defined]
    assert wrapped("gloo") == "group gloo"
    monkeypatch.setenv("DDPNET_WATCH", "0")
    assert wrapped(backend="nccl") == "group nccl"


def _python(code: str, **env: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, check=True, timeout=120).stdout


@pytest.mark.slow  # a Python that imports torch
def test_install_imports_no_torch_and_patches_on_first_import() -> None:
    out = _python(
        "import sys\n"
        "from ddpnet.watch import attach\n"
        "attach.install()\n"
        "from ddpnet.watch import dying\n"
        "print('torch' in sys.modules, dying._registered == [True])\n"
        "import torch.distributed as dist\n"
        "c10d = dist.distributed_c10d\n"
        "from ddpnet.watch.patches import is_patched\n"
        "print(is_patched(dist.init_process_group),\n"
        "      dist.init_process_group is c10d.init_process_group,\n"
        "      type(dist.__spec__.loader).__name__ != '_PatchingLoader',\n"
        "      any(type(f).__name__ == '_Finder' for f in sys.meta_path))\n")
    assert out.split() == ["False", "True", "True", "True", "True", "False"]


@pytest.mark.slow  # a Python that imports torch
def test_install_patches_at_once_when_torch_is_loaded() -> None:
    out = _python("import torch.distributed as dist\n"
                  "from ddpnet.watch import attach\n"
                  "attach.install()\n"
                  "from ddpnet.watch.patches import is_patched\n"
                  "print(is_patched(dist.init_process_group))\n")
    assert out.split() == ["True"]


def test_a_broken_watch_setting_warns_and_the_call_goes_on(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DDPNET_WATCH_TIMEOUT", "soon")
    mods, _original = _fake_torch()
    attach.patch(mods)
    wrapped = mods["torch.distributed"].init_process_group  # type: ignore[attr-defined]
    assert wrapped("gloo") == "group gloo"
    err = capsys.readouterr().err
    assert err.startswith("ddpnet: warning: the watch is off: watch_timeout='soon'")
    assert err.count("\n") == 1


# -- a framework whose own launcher starts the ranks with another environment: one note --

def test_ray_train_is_noted_in_a_driver_not_in_rays_workers() -> None:
    note = attach.due("ray.train", ["train.py"])
    assert note is not None and "raylet" in note.says and "ddpnet.attach --env" in note.says
    assert attach.due("ray.train", ["/x/ray/_private/workers/default_worker.py"]) is None
    assert attach.due("ray.train", ["train.py"], frozenset({"ray.train"})) is None
    assert attach.due("ray", ["train.py"]) is None


@pytest.mark.slow  # a Python that imports Ray Train
def test_a_watched_script_importing_ray_train_gets_the_note_once() -> None:
    env = {**os.environ, **ranks_env(os.environ, True)}
    done = subprocess.run([sys.executable, "-c", "import ray.train, ray.train.torch"],
                          capture_output=True, text=True, env=env, timeout=120)
    notes = [line for line in done.stderr.splitlines() if line.startswith("ddpnet: watch: note")]
    assert done.returncode == 0 and len(notes) == 1 and "Ray Train" in notes[0], done.stderr


def test_an_unwatched_script_gets_no_note() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DDPNET_WATCH")}
    done = subprocess.run([sys.executable, "-c", "import sys; from ddpnet.watch import attach;"
                           " print(any(type(f).__name__ == '_NoteFinder' for f in sys.meta_path))"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout.strip() == "False", done.stderr

"""watch.dying's settle: a watched process hands the GIL to torch's backend threads at exit, after
the script's own exit handlers, so a job that ends right after a collective exits 0."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

from ddpnet.watch import dying

#: two ranks over a file:// store (no network), the settle registered first as the boot does,
#: then the script's own exit handler runs a last collective and the script ends
SCRIPT = """
import atexit, sys, torch, torch.distributed as dist
from ddpnet.watch import dying
dying.register_settle()
t = torch.ones(4)
atexit.register(lambda: dist.all_reduce(t))
dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=int(sys.argv[1]),
                        world_size=2)
for _ in range(3):
    dist.all_reduce(t)
"""
#: pairs run: without the settle, 3 of 20 pairs (6 of 40 processes) aborted here (exit 134),
#: so four pass by chance one time in two: a guard kept cheap (each pair is two Pythons
#: importing torch, ~5 CPU-s); the rates themselves are in docs/watch.md
PAIRS = 4


def _group(initialized: bool) -> types.ModuleType:
    module = types.ModuleType("torch.distributed")
    module.is_available = lambda: True  # type: ignore[attr-defined]
    module.is_initialized = lambda: initialized  # type: ignore[attr-defined]
    return module


@pytest.mark.parametrize("initialized", [True, False])
def test_settle_sleeps_only_while_a_group_is_alive(monkeypatch: pytest.MonkeyPatch,
                                                  initialized: bool) -> None:
    slept: list[float] = []
    monkeypatch.setitem(sys.modules, "torch.distributed", _group(initialized))
    monkeypatch.setattr(dying.time, "sleep", slept.append)
    dying.settle()
    assert slept == ([dying.SETTLE_S] if initialized else [])


def test_settle_imports_no_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch.distributed", raising=False)
    dying.settle()
    assert "torch.distributed" not in sys.modules


def test_register_once_a_process(monkeypatch: pytest.MonkeyPatch) -> None:
    registered: list[object] = []
    monkeypatch.setattr(dying, "_registered", [])
    monkeypatch.setattr(dying.atexit, "register", registered.append)
    dying.register_settle()
    dying.register_settle()
    assert registered == [dying.settle]


@pytest.mark.slow  # pairs of Pythons that import torch
def test_a_job_that_ends_right_after_its_last_collective_exits_0(tmp_path: Path) -> None:
    script = tmp_path / "ends.py"
    script.write_text(SCRIPT)
    for pair in range(PAIRS):
        store = str(tmp_path / f"store{pair}")
        ranks = [subprocess.Popen([sys.executable, str(script), str(rank), store],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for rank in (0, 1)]
        outs = [rank.communicate(timeout=120)[0] for rank in ranks]
        assert [rank.returncode for rank in ranks] == [0, 0], (pair, outs)

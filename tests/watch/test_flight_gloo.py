"""CPU stand-ins for NCCL's asynchronous collectives, on real gloo ranks: "inside a
collective" comes from the Flight Recorder, not from the Python call, which returned long
before (tests/watch/flight_standin.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ddpnet.net.ports import free_port

SCRIPT = str(Path(__file__).with_name("flight_standin.py"))
SRC = str(Path(__file__).resolve().parents[2] / "src")


def run(mode: str) -> list[dict[str, Any]]:
    """Both ranks; rank 1's JSON lines."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, SCRIPT, mode, str(r), str(port)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in (0, 1)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-1500:] for _out, err in outs]
    return [json.loads(line) for line in outs[1][0].splitlines() if line.startswith("{")]


def window(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rank 1's samples from 0.5 s after its call returned until its wait ended."""
    returned = next(x["returned"] for x in lines if "returned" in x)
    waited = next(x["waited"] for x in lines if "waited" in x)
    return [x for x in lines if "t" in x and returned + 0.5 < x["t"] < waited - 0.1]


@pytest.mark.parametrize("mode", ["async", "ddp"])
def test_a_rank_past_its_call_is_inside_the_collective_until_it_completes(mode: str) -> None:
    lines = run(mode)
    inside = window(lines)
    assert len(inside) >= 5, lines[-5:]
    flights = [x["flight"] for x in inside]
    assert all(f is not None for f in flights), inside[:3]
    op, shape = flights[0]["op"], flights[0]["shape"]
    assert op in ("all_reduce", "allreduce")
    assert shape == ([5] if mode == "async" else [68])  # ddp: Linear(16, 4)'s one bucket
    if mode == "ddp":
        assert {x["phase"] for x in inside} == {"backward"}
        assert flights[0]["site"] == ""  # the C++ Reducer's call: no Python site
    assert lines[-1]["flight"] is None and lines[-1]["last_seq"] >= flights[0]["seq"]

"""benchmarks/scale_sim.py's inputs: what cannot be simulated is said in one line with a hint
(exit 2) before any lab is built, and a node's last ranks get a LOCAL_WORLD_SIZE the real
``init()`` accepts (pure: no lab, no root)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "scale_sim.py"


@pytest.fixture(scope="module")
def sim() -> ModuleType:
    spec = importlib.util.spec_from_file_location("scale_sim_inputs", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("argv", "said"), [
    (["--ranks", "0"], "--ranks 0: rank 0 and at least one simulated rank"),
    (["--ranks", "-3"], "--ranks -3:"),
    (["--ranks", "1"], "--ranks 1:"),
    (["--ranks", "70000", "--per-node", "1"], "needs 69999 simulated nodes"),
    (["--ranks", "64", "--per-node", "0"], "--per-node 0: a node has at least one rank"),
    (["--sizes", "64,x"], "not a list of rank counts"),
    (["--sizes", "64,1"], "--ranks 1:"),
    (["--command", "init", "--ranks", "64", "--fault", "slow-link"], "is a check fault"),
    (["--command", "watch", "--ranks", "64", "--hub-share", "0"], "--hub-share 0.0:"),
    (["--command", "check", "--ranks", "64", "--hub-share", "0.5"], "for the watch's hub"),
    (["--command", "watch", "--ranks", "64", "--fault", "filtered-port"], "is a check fault"),
])
def test_what_cannot_be_simulated_is_one_line_with_a_hint(
        sim: ModuleType, capsys: pytest.CaptureFixture[str], argv: list[str], said: str) -> None:
    assert sim.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("scale_sim: ") and said in err and "hint: " in err, err
    assert err.count("\n") == 1, err


def test_the_largest_point_at_each_layout_fits_the_route(sim: ModuleType) -> None:
    assert sim.bad_input(4096, 1) is None and sim.bad_input(4097, 1) is not None
    assert sim.bad_input(sim.MAX_NODES * 8 + 1, 8) is None
    assert sim.bad_input(sim.MAX_NODES * 8 + 2, 8) is not None


def test_a_short_last_node_has_its_own_local_world_size(sim: ModuleType) -> None:
    sim.PER_NODE = 8
    try:
        # 10 ranks: rank 0 alone, ranks 1-8 on node 1, rank 9 alone on node 2
        assert [sim.node_ranks(r, 10) for r in range(10)] == [1] + [8] * 8 + [1]
        assert [sim.node_ranks(r, 2) for r in range(2)] == [1, 1]  # was 8: init() refused
    finally:
        sim.PER_NODE = sim.DEFAULT_PER_NODE

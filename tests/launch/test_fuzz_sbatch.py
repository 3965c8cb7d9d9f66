"""Property-based: sbatch options are validated into a script or refused with one clean
ConfigError (exit 2), never another exception; an accepted script keeps each value on its line."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ddpnet.launch.command import Target
from ddpnet.launch.sbatch import SbatchConfig, render
from tests.fuzzing import FUZZ, clean, text

_count = st.one_of(st.none(), st.integers(-2, 8), st.integers(-2, 10**9))
_time = st.one_of(st.none(), st.sampled_from(["10", "1:00:00", "2-00:00", "UNLIMITED", ""]),
                  text)


@FUZZ
@given(st.integers(-2, 10**9), _count, _count, _count, _time,
       st.one_of(st.none(), text), st.one_of(st.just("ddpnet-%j.out"), text),
       st.sampled_from(["torchrun", "srun", "mpirun", ""]))
def test_sbatch_options_render_or_fail_cleanly(nodes: int, per_node: int | None,
                                               ntasks: int | None, gpus: int | None,
                                               time: str | None, partition: str | None,
                                               output: str, engine: str) -> None:
    cfg = clean(SbatchConfig, Target("train.py"), nodes, ntasks_per_node=per_node,
                ntasks=ntasks, gpus_per_node=gpus, time=time, partition=partition,
                output=output, engine=engine)
    if cfg is None:
        return
    assert 1 <= cfg.nodes <= 100_000 and 1 <= cfg.tasks_per_node <= 1024
    script = render(cfg)
    directives = [line for line in script.split("\n") if line.startswith("#SBATCH")]
    assert any(line.startswith("#SBATCH --nodes") for line in directives), script


def test_absurd_node_and_task_counts_are_refused() -> None:
    # accepted before: a script asking SLURM for 10**9 nodes or tasks per node
    for kwargs in ({"nodes": 100_001}, {"nodes": 1, "ntasks_per_node": 10**9},
                   {"nodes": 1, "ntasks": 10**9}):
        assert clean(SbatchConfig, Target("train.py"), **kwargs) is None, kwargs
    assert SbatchConfig(Target("train.py"), 100_000, ntasks_per_node=1024).nodes == 100_000

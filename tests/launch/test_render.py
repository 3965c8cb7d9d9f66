"""``ddpnet launch --dry-run``'s human output and the rank-0 warnings."""

from __future__ import annotations

import io

from rich.console import Console

from ddpnet.launch.render import plan_lines, print_warnings, render
from ddpnet.launch.run import LaunchPlan, Ran

TORCHRUN = LaunchPlan(
    "torchrun", True,
    nodes=({"node_rank": 0, "command": "torchrun --node-rank 0 t.py", "ranks": [0, 1]},
           {"node_rank": 1, "command": "torchrun --node-rank 1 t.py", "ranks": [2, 3]}),
    notes=("interface: --ifname",))
MPIRUN = LaunchPlan("mpirun", True, nodes=(
    {"node_rank": None, "command": "mpirun -np 8 python t.py", "ranks": list(range(8))},))


def test_torchrun_plan_names_each_node_and_its_ranks() -> None:
    assert plan_lines(TORCHRUN) == [
        "# node 0 (ranks 0-1)", "torchrun --node-rank 0 t.py",
        "# node 1 (ranks 2-3)", "torchrun --node-rank 1 t.py",
        "# note: interface: --ifname"]


def test_mpirun_plan_runs_from_the_launching_host() -> None:
    assert plan_lines(MPIRUN) == ["# the launching host (mpirun starts every rank) (ranks 0-7)",
                                  "mpirun -np 8 python t.py"]


def test_c10d_node_without_ranks_is_this_node() -> None:
    plan = LaunchPlan("torchrun", True, nodes=({"node_rank": None, "command": "x",
                                                "ranks": None},))
    assert plan_lines(plan) == ["# this node", "x"]


def test_render_prints_plans_verbatim_and_nothing_after_a_run() -> None:
    buf = io.StringIO()
    out = Console(file=buf, width=20, color_system=None, soft_wrap=True)
    plan = LaunchPlan("mpirun", True, nodes=(
        {"node_rank": None, "command": "A=[b] mpirun :smile: --hosts n0:4,n1:4 " + "x" * 40,
         "ranks": [0]},))
    render(plan, out)
    assert buf.getvalue().splitlines()[1] == plan.nodes[0]["command"]
    buf.truncate(0)
    render(Ran(3), out)
    assert buf.getvalue().strip("\0") == ""


def test_warnings_go_one_per_line() -> None:
    err = io.StringIO()
    print_warnings(("rank 0 elsewhere", "second"), err)
    assert err.getvalue() == "ddpnet: warning: rank 0 elsewhere\nddpnet: warning: second\n"


def test_sbatch_prints_the_script_the_job_id_or_nothing() -> None:
    from ddpnet.launch.render import render_sbatch
    from ddpnet.launch.submit import SbatchResult

    def shown(result: SbatchResult) -> str:
        buf = io.StringIO()
        render_sbatch(result, Console(file=buf, width=20, color_system=None, soft_wrap=True))
        return buf.getvalue()

    script = "#!/bin/bash\n#SBATCH --nodes=2 [x] :smile:\nsrun ${A} " + "y" * 40 + "\n"
    assert shown(SbatchResult(script)) == script
    assert shown(SbatchResult(script, "job.sh")) == ""
    assert shown(SbatchResult(script, "job.sh", "1234")) == "1234\n"

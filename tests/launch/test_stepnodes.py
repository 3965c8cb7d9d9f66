"""``python -m ddpnet.launch.stepnodes``, run as the spare-node batch script runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ddpnet.launch.recover import append, record_path
from ddpnet.launch.recovery import Event


def _nodes(job_dir: Path, nodes: int, nodelist: str = "n[0-3]"
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ddpnet.launch.stepnodes", "--job-dir",
                           str(job_dir), "--nodes", str(nodes)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "SLURM_JOB_NODELIST": nodelist,
                                           "PYTHONPATH": os.pathsep.join(sys.path)})


def test_the_first_nodes_of_the_allocation_not_taken_out(tmp_path: Path) -> None:
    assert _nodes(tmp_path, 3).stdout == "n0,n1,n2\n"  # no record yet: the first three
    append(record_path(tmp_path), Event("drain", 0, 1.0, "n0", "ddpnet: x"))
    assert _nodes(tmp_path, 3).stdout == "n1,n2,n3\n"


def test_too_few_left_is_one_line_with_a_hint(tmp_path: Path) -> None:
    append(record_path(tmp_path), Event("drain", 0, 1.0, "n1"), Event("exclude", 0, 2.0, "n2"))
    p = _nodes(tmp_path, 3)
    assert p.returncode == 1 and p.stdout == ""
    lines = p.stderr.splitlines()
    assert lines[0] == ("ddpnet: stepnodes: error: the allocation (n[0-3]) has fewer than 3 "
                        "nodes left without n1, n2")
    assert lines[1].startswith("hint: resubmit the job; `ddpnet diagnose --job-dir") \
        and len(lines) == 2


def test_an_unreadable_record_or_nodelist_is_a_usage_error(tmp_path: Path) -> None:
    record_path(tmp_path).write_text("{not json")
    p = _nodes(tmp_path, 3)
    assert p.returncode == 2 and "is not a ddpnet recovery record" in p.stderr
    assert "Traceback" not in p.stderr

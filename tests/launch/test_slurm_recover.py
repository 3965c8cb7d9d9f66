"""A hang costs a minute, not the job, on a real SLURM: a 4-node lab with munged, slurmctld
and a slurmd per node namespace; a 3-node ``ddpnet sbatch --requeue`` job of ``ddpnet train
--checkpoint-every``. Node 1's link cut mid-training: the watch names it, the job's script
drains it with the verdict as its reason and requeues; the next run starts on the three other
nodes, resumes from the checkpoint and completes. A collective mismatch (the program's bug)
drains nothing and does not restart. With a spare node, the torchrun engine's step starts on
the step's three nodes (the srun engine's does in the spare test)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ddpnet.lab import Lab
from ddpnet.lab import slurm as labslurm
from ddpnet.launch.scontrol import parse_node_line
from tests.lab_util import fresh_lab, requires_netns
from tests.slurm_util import slurm_missing

#: above the sum of a test's own waits (_all_idle, each _until: each fails with the job's state
#: and log; at most 900 s, the requeue test's), so that a failure says what the job did, not
#: only pytest-timeout's stacks
pytestmark = [requires_netns, pytest.mark.timeout(960)]
ROOT = Path(__file__).resolve().parents[2]
SCENARIO = str(ROOT / "tests" / "watch" / "scenario.py")
#: a requeued job starts again once its revoked credential expired (120 s by default)
CRED_EXPIRE_S = 5
STEPS = 60


@pytest.fixture(scope="module")
def slurm_lab() -> Iterator[Lab]:
    reason = slurm_missing()
    if reason:
        pytest.skip(reason)
    with fresh_lab("lr", nodes=4) as lab:
        labslurm.start(lab, cred_expire_s=CRED_EXPIRE_S)
        try:
            yield lab
        finally:
            labslurm.stop(lab.name)


def _client(lab: Lab, *argv: str, timeout: float = 60, cwd: Path | None = None
            ) -> subprocess.CompletedProcess[str]:
    """A SLURM client (or ddpnet sbatch) in node 0, with this checkout on the path; ``cwd``
    the job's submit directory (its DDPNET_JOB_DIR lies there)."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    return subprocess.run([str(labslurm.client_wrapper(lab.name)), *argv], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=cwd)


def _job(lab: Lab, job: str) -> dict[str, str]:
    out = _client(lab, "scontrol", "show", "job", job, "-o").stdout
    return {f.split("=", 1)[0]: f.split("=", 1)[1] for f in out.split() if "=" in f}


def _all_idle(lab: Lab, timeout: float = 120) -> None:
    """Every node back in service before a job is submitted: the module's tests share the
    cluster, and a node an earlier test drained and set DOWN returns only once its slurmd
    registers again after the RESUME (ReturnToService); a job submitted before that ran on
    the other nodes."""
    deadline = time.monotonic() + timeout
    states: list[str] = []
    while time.monotonic() < deadline:
        out = _client(lab, "sinfo", "-h", "-N", "-o", "%N %T").stdout.split("\n")
        states = [line for line in out if line.strip()]
        if len(states) == len(lab.nodes) and all(line.split()[1] == "idle" for line in states):
            return
        time.sleep(0.5)
    pytest.fail(f"the cluster's nodes not idle within {timeout} s: {states}")


def _submit(lab: Lab, work: Path, *program: str, spares: int = 0,
            engine: str = "srun") -> tuple[str, Path]:
    _all_idle(lab)
    p = _client(lab, sys.executable, "-m", "ddpnet", "sbatch", "--nodes", "3", "--engine",
                engine, "--iface", lab.nodes[0].ifname, "--requeue", "--spare-nodes",
                str(spares), "--output",
                str(work / "job-%j.out"), "--script", str(work / "job.sh"), "--submit",
                "--", *program, cwd=work)
    assert p.returncode == 0, p.stderr
    job = p.stdout.strip()
    assert job.isdigit(), p.stdout
    return job, work / f"job-{job}.out"


def _read(log: Path) -> str:
    return log.read_text(errors="replace") if log.exists() else ""


def _until(what: str, ready: Any, timeout: float, lab: Lab, job: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.5)
    pytest.fail(f"{what} within {timeout} s; job: {_job(lab, job)}\nlog:\n{_read(log)[-6000:]}")


def _ended(lab: Lab, job: str) -> bool:
    return _job(lab, job).get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT",
                                               "NODE_FAIL")


def _record(work: Path, job: str) -> list[dict[str, Any]]:
    path = work / f"ddpnet-job-{job}" / "recovery.json"
    return list(json.loads(path.read_text())["events"]) if path.exists() else []


def test_a_collective_mismatch_drains_nothing_and_does_not_restart(
        slurm_lab: Lab, tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    job, log = _submit(slurm_lab, tmp_path, SCENARIO, "shape")
    try:
        _until("the job ended", lambda: _ended(slurm_lab, job), 240, slurm_lab, job, log)
        fields, text = _job(slurm_lab, job), _read(log)
        assert fields["JobState"] == "FAILED" and fields["Restarts"] == "0", fields
        # the watch's 4, or gloo's abort of a rank sent the wrong size (SIGABRT: 134)
        assert fields["ExitCode"].split(":")[0] in ("4", "134"), fields
        assert "ddpnet: recover: no restart: a collective-mismatch is the program's bug" \
            in text, text[-4000:]
        assert [e["what"] for e in _record(tmp_path, job)] == ["verdict", "stop"]
        assert _client(slurm_lab, "sinfo", "-h", "-R").stdout.strip() == ""  # none drained
    finally:
        _client(slurm_lab, "scancel", job)


def _assert_drained(lab: Lab, cut: str, text: str) -> dict[str, str]:
    """The cut node drained by ddpnet with the verdict naming rank 1 on it as its reason (a
    link down, or, probes unanswered on a loaded host, rank 1 gone), as the job's log says."""
    node = parse_node_line(_client(lab, "scontrol", "show", "node", cut, "-o").stdout)
    assert "DRAIN" in node["State"], node
    assert node["Reason"].startswith("ddpnet: ") and f"rank 1 ({cut}" in node["Reason"], node
    assert f"ddpnet: recover: drained {cut}: {node['Reason']}" in text
    return node


def _restore(lab: Lab, job: str, cut: str) -> None:
    """The job cancelled, the cut node's link back and the node resumed (the next test waits
    for it idle: _all_idle)."""
    _client(lab, "scancel", job)
    lab.clear(1)
    _client(lab, "scontrol", "update", f"NodeName={cut}", "State=RESUME")


def _train(work: Path) -> tuple[str, ...]:
    return ("-m", "ddpnet", "train", "--max-steps", str(STEPS), "--samples", "4096",
            "--batch-size", "16", "--log-every", "5", "--step-sleep", "0.1",
            "--checkpoint-every", "10", "--checkpoint-dir", str(work / "ckpt"))


def test_with_a_spare_node_a_cut_link_drains_it_and_the_step_restarts_in_the_allocation(
        slurm_lab: Lab, tmp_path: Path) -> None:
    """3 training nodes + 1 spare: node 1 drained with the verdict as its reason (and set
    DOWN: it answers on nothing), the step started again on nodes 0, 2, 3 inside the same
    allocation from the checkpoint; no requeue; the job completes."""
    tmp_path.chmod(0o755)
    cut = slurm_lab.nodes[1].hostname
    job, log = _submit(slurm_lab, tmp_path, *_train(tmp_path), spares=1)
    try:
        _until("step 20", lambda: re.search(r"^step 20/", _read(log), re.M), 180, slurm_lab,
               job, log)
        assert _job(slurm_lab, job)["NodeList"].endswith("n[0-3]")  # the spare allocated too
        slurm_lab.fault("link-down", 1)
        _until("the job completed", lambda: _ended(slurm_lab, job), 300, slurm_lab, job, log)
        fields, text = _job(slurm_lab, job), _read(log)
        assert fields["JobState"] == "COMPLETED" and fields["Restarts"] == "0", \
            (fields, text[-4000:])
        _assert_drained(slurm_lab, cut, text)
        others = ",".join(n.hostname for n in slurm_lab.nodes if n.hostname != cut)
        assert f"ddpnet: step 1 on {others}," in text, text[-4000:]
        m = re.search(r"resumed from step (\d+)", text)
        assert m and int(m.group(1)) >= 10, text[-4000:]
        assert f"trained {STEPS} steps on 3 rank(s)" in text, text[-4000:]
        events = _record(tmp_path, job)
        assert [e["what"] for e in events] == ["verdict", "drain", "down", "restart",
                                               "resumed"], events
        assert events[0]["verdict"]["host"] == cut and events[3]["node"] == cut
        assert events[4]["step"] == int(m.group(1)) and events[4]["run"] == 0
        history = _client(slurm_lab, sys.executable, "-m", "ddpnet", "diagnose", "--job-dir",
                          str(tmp_path / f"ddpnet-job-{job}")).stdout
        assert f"run 0: restart {cut}: step restarted in the allocation on {others} " \
            f"without {cut}" in history, history
    finally:
        _restore(slurm_lab, job, cut)


def test_a_cut_link_drains_the_node_and_the_requeued_job_resumes_without_it(
        slurm_lab: Lab, tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    cut = slurm_lab.nodes[1].hostname
    job, log = _submit(slurm_lab, tmp_path, *_train(tmp_path))
    try:
        _until("step 20", lambda: re.search(r"^step 20/", _read(log), re.M), 180, slurm_lab,
               job, log)
        assert _job(slurm_lab, job)["NodeList"].endswith("n[0-2]")  # the cut node among them
        slurm_lab.fault("link-down", 1)
        cut_at = time.monotonic()
        _until("the job requeued and running again", lambda: _job(slurm_lab, job).get(
            "Restarts") == "1" and _job(slurm_lab, job).get("JobState") == "RUNNING", 300,
            slurm_lab, job, log)
        print(f"running again {time.monotonic() - cut_at:.0f} s after the cut")  # in the log
        _until("the requeued job completed", lambda: _job(slurm_lab, job).get("JobState") ==
               "COMPLETED", 300, slurm_lab, job, log)
        fields, text = _job(slurm_lab, job), _read(log)
        assert fields["Restarts"] == "1", fields
        assert fields["NodeList"].endswith("n[0,2-3]"), fields  # without the cut node
        node = _assert_drained(slurm_lab, cut, text)
        m = re.search(r"resumed from step (\d+) \(restart 1\)", text)
        assert m and int(m.group(1)) >= 10, text[-4000:]
        assert f"trained {STEPS} steps on 3 rank(s)" in text, text[-4000:]
        events = _record(tmp_path, job)
        # a link down: the node also set DOWN, so the requeued job need not wait for it
        assert [e["what"] for e in events] == ["verdict", "drain", "requeue", "down",
                                               "resumed"], events
        assert events[0]["verdict"]["host"] == cut and events[1]["node"] == cut
        assert events[4]["step"] == int(m.group(1))
        history = _client(slurm_lab, sys.executable, "-m", "ddpnet", "diagnose", "--job-dir",
                          str(tmp_path / f"ddpnet-job-{job}"))
        assert f"run 0: drain {cut}: {node['Reason']}" in history.stdout, history
    finally:
        _restore(slurm_lab, job, cut)


#: a rank that needs no torch: where it ran
HELLO = "import os, socket; print(f'hello rank {os.environ[\"RANK\"]} on {socket.gethostname()}')\n"


def test_with_a_spare_node_the_torchrun_engines_step_starts(slurm_lab: Lab,
                                                            tmp_path: Path) -> None:
    """3 nodes + 1 spare with the default engine: the step's srun names its own task count,
    else it inherits the allocation's SLURM_NTASKS=4 for 3 nodes at one task each and SLURM
    refuses it ("More processors requested than permitted")."""
    tmp_path.chmod(0o755)
    script = tmp_path / "hello.py"
    script.write_text(HELLO)
    job, log = _submit(slurm_lab, tmp_path, str(script), spares=1, engine="torchrun")
    try:
        _until("the job ended", lambda: _ended(slurm_lab, job), 180, slurm_lab, job, log)
        fields, text = _job(slurm_lab, job), _read(log)
        assert fields["JobState"] == "COMPLETED", (fields, text[-4000:])
        assert "More processors requested" not in text, text[-4000:]
        hosts = set(re.findall(r"hello rank (\d) on (\S+)", text))
        assert {rank for rank, _ in hosts} == {"0", "1", "2"}, text[-4000:]
        assert len({host for _, host in hosts}) == 3, hosts
    finally:
        _client(slurm_lab, "scancel", job)

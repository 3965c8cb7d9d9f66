"""The batch script's recovery, run as rendered (bash, the real ``python -m
ddpnet.launch.recover`` beside a step that hangs after the verdict as srun does with a dead
node) against stand-ins for ``scontrol``/``sinfo`` that log their calls. The real SLURM
runs are in tests/launch/test_slurm_recover.py."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ddpnet.launch.recover import note_resumed, read_record, record_path
from ddpnet.launch.requeue import PreemptSignal, Spare, recover_command, step_lines
from ddpnet.watch.report import report_dict
from ddpnet.watch.state import LINK_DOWN, CollectiveRecord, Diagnosis, RankState, Snapshot

SCONTROL = r"""#!/bin/bash
echo "$*" >> "$FAKE_LOG"
case "$1 $2" in
  "update NodeName="*) if [ -n "${FAKE_DRAIN_REFUSED:-}" ]; then
      echo "slurm_update error: Invalid user id" >&2; exit 1; fi ;;
esac
"""
SINFO = ("#!/bin/sh\nprintf \"${FAKE_SINFO:-n0 alloc\\nn1 alloc\\nn2 alloc\\nn3 idle\\n"
         "n4 drain\\n}\"\n")

#: the step: the verdict appears, then it hangs as srun does with a task on a cut-off node
#: (through the requeue's SIGTERM too: srun waits KillWait + 2 s, then cancels step 0 by id,
#: by then maybe the next run's), so only the watcher's SIGKILL ends it soon (exit 137); or
#: it ends at once with the watch's code (every rank exits 4)
STEP = """import os, shutil, sys, time
if os.environ.get("DDPNET_STEP_RESTART", "0") != "0":  # a spare's restart: it completes
    print("ddpnet-test: step on", sys.argv[3], os.environ["MASTER_ADDR"],
          os.environ["MASTER_PORT"], os.environ["DDPNET_WATCH_DIR"], flush=True)
    sys.exit(0)
shutil.copy(sys.argv[1], os.path.join(os.environ["DDPNET_WATCH_DIR"], "report.json"))
time.sleep(60 if sys.argv[2] == "hang" else 0)
sys.exit(4)
"""


def _report(diagnosis: Diagnosis, path: Path) -> Path:
    flight = (CollectiveRecord(seq=9, op="all_reduce", started=90.0),)
    states = {r: RankState(rank=r, world_size=3, host=f"n{r}", step=45, recent=flight)
              for r in range(3)}
    path.write_text(json.dumps(report_dict(diagnosis, Snapshot(3, 100.0, states), "t")))
    return path


LINK = Diagnosis("network", "link down: rank 1 (n1, eth0 198.18.0.3) sent no heartbeat for "
                 "13 s and answers on no port", (1,), ("n1",), ("rank 0 -> rank 1: timeout",),
                 sub_kind=LINK_DOWN, witnesses=(0,))
MISMATCH = Diagnosis("collective-mismatch", "collective mismatch at seq 9", (0, 1, 2),
                     ("n0", "n1", "n2"))


def _run(tmp_path: Path, diagnosis: Diagnosis, how: str, spare: bool = False, **env: str
         ) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("scontrol", SCONTROL), ("sinfo", SINFO)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "step.py").write_text(STEP)
    report = _report(diagnosis, tmp_path / "verdict.json")
    step = f'{shlex.quote(sys.executable)} {tmp_path / "step.py"} {report} {how} "${{STEP_NODES:-}}"'
    python = shlex.quote(sys.executable)
    lines = step_lines(step, PreemptSignal("USR1", 90), True,
                       recover_command(python, 2, spare), Spare(3, python) if spare else None)
    script = tmp_path / "job.sh"
    script.write_text("\n".join(["set -euo pipefail", *lines]) + "\n")
    log = tmp_path / "scontrol.log"
    p = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path, env={
                           **os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
                           "FAKE_LOG": str(log),
                           "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[0-2]",
                           "SLURM_JOB_NUM_NODES": "3", "SLURM_SUBMIT_DIR": str(tmp_path),
                           "SLURM_JOB_PARTITION": "lab", "MASTER_PORT": "29500",
                           "PYTHONPATH": os.pathsep.join(sys.path), **env})
    calls = log.read_text().splitlines() if log.exists() else []
    return p, calls


def test_a_hang_blaming_a_node_drains_it_and_requeues_without_waiting_for_the_step(
        tmp_path: Path) -> None:
    p, calls = _run(tmp_path, LINK, "hang")
    assert p.returncode == 128 + 9, p.stderr  # the old srun ended once the job was requeued
    assert calls[0].startswith("update NodeName=n1 State=DRAIN Reason=ddpnet: network: link "
                               "down: rank 1 (n1, eth0 198.18.0.3) sent no heartbeat"), calls
    # the node answers on nothing: DOWN too, so SLURM ends the old run without waiting for it
    assert calls[1] == "requeue 7" and calls[2] == calls[0].replace("DRAIN", "DOWN"), calls
    assert len(calls) == 3
    assert "ddpnet: recover: drained n1: ddpnet: network: link down" in p.stdout
    assert "ddpnet: recover: ended the old run's srun (pid " in p.stdout
    record = read_record(record_path(tmp_path / "ddpnet-job-7"))
    assert [e.what for e in record.events] == ["verdict", "drain", "requeue", "down"]
    assert record.events[0].verdict is not None and record.events[0].step == 45
    assert (tmp_path / "ddpnet-job-7" / "watch-run0" / "report.json").is_file()


def test_without_operator_rights_the_node_is_excluded_from_the_requeued_job(
        tmp_path: Path) -> None:
    p, calls = _run(tmp_path, LINK, "hang", FAKE_DRAIN_REFUSED="1")
    assert p.returncode == 128 + 9, p.stderr
    assert calls[1:] == ["requeuehold 7", "update JobId=7 ExcNodeList=n1", "release 7"], calls
    # (no DOWN either: without operator rights it would be refused too)
    assert "cannot drain n1 (slurm_update error: Invalid user id)" in p.stdout
    record = read_record(record_path(tmp_path / "ddpnet-job-7"))
    assert [e.what for e in record.events] == ["verdict", "exclude", "requeue"]
    assert record.taken_out == ("n1",)


def test_a_killed_rank_drains_its_node_but_leaves_it_up(tmp_path: Path) -> None:
    """A rank's process died: the node still answers, so SLURM ends the old run by itself;
    drained and requeued, not set DOWN."""
    gone = Diagnosis("rank-gone", "rank 1 (n1) is gone: its process exited or was killed",
                     (1,), ("n1",))
    p, calls = _run(tmp_path, gone, "hang")
    assert [c.split(" Reason=")[0] for c in calls] == [
        "update NodeName=n1 State=DRAIN", "requeue 7"], (calls, p.stdout)


def test_with_the_watch_only_warning_nothing_is_drained_or_requeued(tmp_path: Path) -> None:
    p, calls = _run(tmp_path, LINK, "exit", DDPNET_WATCH_ACTION="warn")
    assert calls == [] and "DDPNET_WATCH_ACTION=warn: a verdict does not end the job" in p.stdout


def test_a_collective_mismatch_stops_with_its_verdict_and_no_restart(tmp_path: Path) -> None:
    p, calls = _run(tmp_path, MISMATCH, "exit")
    assert p.returncode == 4 and calls == [], (calls, p.stdout)
    assert "ddpnet: recover: no restart: a collective-mismatch is the program's bug" in p.stdout
    record = read_record(record_path(tmp_path / "ddpnet-job-7"))
    assert [e.what for e in record.events] == ["verdict", "stop"]


def test_a_restarted_run_records_where_it_resumed(tmp_path: Path) -> None:
    _run(tmp_path, LINK, "hang")
    job_dir = tmp_path / "ddpnet-job-7"
    note_resumed({"DDPNET_JOB_DIR": str(job_dir), "SLURM_RESTART_COUNT": "1"}, 40)
    note_resumed({"DDPNET_JOB_DIR": str(job_dir), "SLURM_RESTART_COUNT": "0"}, 0)  # first run
    events = read_record(record_path(job_dir)).events
    assert [(e.what, e.run, e.step) for e in events][-1] == ("resumed", 1, 40)
    assert len(events) == 5


def test_an_unreadable_record_takes_no_action(tmp_path: Path) -> None:
    job_dir = tmp_path / "ddpnet-job-7"
    job_dir.mkdir()
    record_path(job_dir).write_text("{not json")
    p, calls = _run(tmp_path, LINK, "exit")
    assert calls == [] and "is not a ddpnet recovery record" in p.stderr
    assert "hint: no node was drained and nothing requeued" in p.stderr


@pytest.mark.parametrize("line, want", [
    ("NodeName=n1 Arch=x86_64 State=IDLE+DRAIN Reason=ddpnet: network: link down: rank 1 "
     "(n1, eth0 198.18.0.3) [root@2026-11-29T08:15:40]",
     {"State": "IDLE+DRAIN", "Reason": "ddpnet: network: link down: rank 1 (n1, eth0 "
                                       "198.18.0.3)"}),
    ("NodeName=n2 State=IDLE", {"State": "IDLE"}),
    # as SLURM 22.05 writes it: Comment and Extra after the reason, spaces in each
    ("NodeName=n2 State=IDLE+DRAIN Reason=maintenance by hand: disk swap "
     "[root@2026-11-29T11:32:00] Comment=a b Extra=ddpnet-mtu=1500",
     {"Reason": "maintenance by hand: disk swap", "Comment": "a b",
      "Extra": "ddpnet-mtu=1500"}),
    ("NodeName=n3 State=IDLE Extra=ddpnet-mtu=9000", {"State": "IDLE",
                                                      "Extra": "ddpnet-mtu=9000"}),
])
def test_node_fields_keep_the_reason_whole(line: str, want: dict[str, str]) -> None:
    from ddpnet.launch.scontrol import parse_node_line

    fields = parse_node_line(line)
    assert {k: fields[k] for k in want} == want and ("Reason" in fields) == ("Reason" in want)


def test_usable_nodes_leave_out_drained_down_and_unresponsive() -> None:
    from ddpnet.launch.scontrol import parse_sinfo

    text = "n0 alloc\nn1 idle*\nn2 drain\nn3 mix\nn4 down\nn5 drng\nn6 idle~\nn3 mix\n"
    assert parse_sinfo(text) == ("n0", "n3")


def test_a_record_left_by_another_job_is_kept_aside_not_continued(tmp_path: Path) -> None:
    """A DDPNET_JOB_DIR used again (or a job id a new controller hands out again): the old
    record neither blocks this run nor counts against its budget."""
    from ddpnet.launch.recover import append
    from ddpnet.launch.recovery import Event

    job_dir = tmp_path / "ddpnet-job-7"
    append(record_path(job_dir), Event("verdict", 0, 1.0, "n1"), Event("requeue", 0, 2.0))
    path = record_path(job_dir)
    path.write_text(path.read_text().replace('"job": ""', '"job": "3"'))
    p, calls = _run(tmp_path, LINK, "hang")
    assert calls[1] == "requeue 7", (calls, p.stdout)
    assert [e.what for e in read_record(path).events] == ["verdict", "drain", "requeue", "down"]
    assert (job_dir / "recovery-3.json").is_file()


SPARE = {"SLURM_JOB_NODELIST": "n[0-3]", "SLURM_JOB_NUM_NODES": "4"}


def test_with_a_spare_the_step_restarts_in_the_allocation_without_the_node(
        tmp_path: Path) -> None:
    p, calls = _run(tmp_path, LINK, "exit", spare=True, **SPARE)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert [c.split(" Reason=")[0] for c in calls] == [
        "update NodeName=n1 State=DRAIN", "update NodeName=n1 State=DOWN"], calls  # no requeue
    assert "ddpnet: step 0 on n0,n1,n2, MASTER_ADDR=n0 MASTER_PORT=29500" in p.stdout
    assert "restarting the step on n0,n2,n3 (without n1)" in p.stdout
    line = next(x for x in p.stdout.splitlines() if x.startswith("ddpnet-test: step on"))
    nodes, master, port, watch_dir = line.split()[3:]
    assert (nodes, master) == ("n0,n2,n3", "n0") and port != "29500"  # a port of its own
    assert watch_dir.endswith("watch-run0-step1")  # the last step's verdict is not read again
    record = read_record(record_path(tmp_path / "ddpnet-job-7"))
    assert [e.what for e in record.events] == ["verdict", "drain", "down", "restart"]
    assert record.recoveries == 1 and record.taken_out == ("n1",)


def test_with_no_spare_usable_the_job_requeues_instead(tmp_path: Path) -> None:
    """The spare (n3) went down meanwhile: too few in the allocation, the partition has
    enough (n4, n5): requeue."""
    p, calls = _run(tmp_path, LINK, "hang", spare=True, **SPARE, FAKE_SINFO=(
        "n0 alloc\nn1 alloc\nn2 alloc\nn3 down\nn4 idle\nn5 idle\n"))
    assert p.returncode == 128 + 9, (p.stdout, p.stderr)
    assert [c.split(" Reason=")[0] for c in calls] == [
        "update NodeName=n1 State=DRAIN", "requeue 7", "update NodeName=n1 State=DOWN"], calls
    assert "no spare node left in the allocation (too few healthy nodes left" in p.stdout
    record = read_record(record_path(tmp_path / "ddpnet-job-7"))
    assert [e.what for e in record.events] == ["verdict", "drain", "requeue", "down"]


def test_a_collective_mismatch_with_a_spare_does_not_restart(tmp_path: Path) -> None:
    p, calls = _run(tmp_path, MISMATCH, "exit", spare=True, **SPARE)
    assert p.returncode == 4 and calls == [], (calls, p.stdout)
    assert p.stdout.count("ddpnet: step ") == 1  # no second step
    record = read_record(record_path(tmp_path / "ddpnet-job-7"))
    assert [e.what for e in record.events] == ["verdict", "stop"]


def test_a_step_restart_records_where_it_resumed(tmp_path: Path) -> None:
    _run(tmp_path, LINK, "exit", spare=True, **SPARE)
    job_dir = tmp_path / "ddpnet-job-7"
    note_resumed({"DDPNET_JOB_DIR": str(job_dir), "SLURM_RESTART_COUNT": "0",
                  "DDPNET_STEP_RESTART": "1"}, 20)
    last = read_record(record_path(job_dir)).events[-1]
    assert (last.what, last.run, last.step) == ("resumed", 0, 20)
    assert last.detail.endswith("(step restart 1 in the allocation)")

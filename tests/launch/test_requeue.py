"""The preemption part of ``ddpnet sbatch`` (pure): the warning signal parsed as sbatch takes
it, the #SBATCH lines, and a script that requeues when the step says it was preempted."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ddpnet.errors import ConfigError
from ddpnet.launch.command import Target
from ddpnet.launch.requeue import PreemptSignal, parse_signal, step_lines, torchrun_lines
from ddpnet.launch.sbatch import SbatchConfig, render


@pytest.mark.parametrize("text, want", [
    ("USR1@90", PreemptSignal("USR1", 90)),
    ("B:USR1@90", PreemptSignal("USR1", 90, batch_only=True)),
    ("SIGUSR2@0", PreemptSignal("USR2", 0)),
    ("10@65535", PreemptSignal("USR1", 65535)),
    ("term", PreemptSignal("TERM", 60)),  # sbatch's default lead: 60 s
])
def test_parse_signal(text: str, want: PreemptSignal) -> None:
    assert parse_signal(text) == want


@pytest.mark.parametrize("text, err", [
    ("USR9@90", "not a signal"), ("USR1@65536", "outside 0..65535"),
    ("USR1@-5", "not \\[B:\\]SIGNAL"), ("R:USR1", "not \\[B:\\]SIGNAL"),
    ("KILL@90", "cannot be caught"), ("", "not \\[B:\\]SIGNAL"), ("999@9", "not a signal"),
])
def test_bad_signals_are_one_line_config_errors(text: str, err: str) -> None:
    with pytest.raises(ConfigError, match=err) as info:
        parse_signal(text)
    assert "\n" not in info.value.message and "--preempt-signal USR1@90" in info.value.hint


def sb(**kw: object) -> SbatchConfig:
    base: dict[str, object] = {"target": Target("-m", ("ddpnet", "train")), "nodes": 1,
                               "python": "/venv/bin/python", **kw}
    return SbatchConfig(**base)  # type: ignore[arg-type]


def test_requeue_renders_the_warning_to_every_rank_and_the_requeue() -> None:
    text = render(sb(requeue=True, engine="srun", max_recoveries=0))
    lines = text.splitlines()
    for line in ("#SBATCH --signal=USR1@90", "#SBATCH --requeue", "#SBATCH --open-mode=append",
                 'if [ "$code" -eq 75 ] || [ "$code" -eq 138 ]; then',
                 '  scontrol requeue "$SLURM_JOB_ID" || echo "ddpnet: scontrol requeue failed"',
                 'exit "$code"'):
        assert line in lines, line
    assert "trap" not in text and "TORCHELASTIC" not in text  # srun engine: no torchrun
    step = next(i for i, line in enumerate(lines) if line.startswith("srun "))
    assert lines[step - 1] == "set +e" and lines[step + 1] == "code=$?"


def test_requeue_runs_the_recovery_watcher_beside_the_step() -> None:
    """By default a requeueing job recovers from a verdict that blames a node: each run
    gets its own watch directory and the watcher gets the step's pid."""
    lines = render(sb(requeue=True, engine="srun", max_recoveries=3)).splitlines()
    step = next(i for i, line in enumerate(lines) if line.startswith("srun "))
    assert lines[step].endswith(" &") and lines[step + 1] == "step=$!"
    watcher = next(line for line in lines if "ddpnet.launch.recover" in line)
    assert watcher.startswith('"$PY" -m ddpnet.launch.recover --job-dir "$DDPNET_JOB_DIR" '
                              '--watch-dir "$DDPNET_WATCH_DIR" --max-recoveries 3 '
                              '--step-pid "$step" --since "$run_started"') and watcher.endswith(" &")
    assert 'export DDPNET_WATCH_DIR="$DDPNET_JOB_DIR/watch-run${SLURM_RESTART_COUNT:-0}"' \
        in lines
    assert lines.index('wait "$recover"; recovered=$?') < lines.index('exit "$code"')
    assert "ddpnet.launch.recover" not in render(sb(requeue=False))


def test_max_recoveries_out_of_range_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"--max-recoveries -1 is outside 0\.\.100"):
        sb(requeue=True, max_recoveries=-1)


def test_a_warning_without_requeue_checkpoints_but_does_not_requeue() -> None:
    text = render(sb(preempt_signal="USR2@300"))
    assert "#SBATCH --signal=USR2@300" in text and "#SBATCH --requeue" not in text
    assert "scontrol requeue" not in text
    assert "export TORCHELASTIC_SIGNALS_TO_HANDLE=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR2" in text


def test_torchrun_handles_the_warning_once() -> None:
    assert torchrun_lines(PreemptSignal("TERM", 90))[-1] == \
        "export TORCHELASTIC_SIGNALS_TO_HANDLE=SIGTERM,SIGINT,SIGHUP,SIGQUIT"


def test_no_requeue_no_signal_by_default() -> None:
    text = render(sb(requeue=False))
    assert "#SBATCH --signal" not in text.replace("# (#SBATCH", "")
    assert "set +e" not in text


def _bash(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "s.sh"
    path.write_text(script)
    return subprocess.run(["bash", str(path)], capture_output=True, text=True, timeout=30)


def test_batch_only_signal_is_forwarded_to_the_step_and_its_code_kept(tmp_path: Path) -> None:
    """``B:``: the shell traps the signal, passes it to the step (here a stand-in for srun
    that exits 75 on SIGUSR1) and waits for the step's own exit code."""
    step = ("python3 -c 'import signal,sys,time; "
            "signal.signal(signal.SIGUSR1, lambda *a: sys.exit(75)); "
            "print(\"up\", flush=True); time.sleep(20); sys.exit(3)'")
    lines = step_lines(step, PreemptSignal("USR1", 90, batch_only=True), requeue=False)
    script = "\n".join(["set -euo pipefail", "SLURM_JOB_ID=1",
                        "( sleep 1.5; kill -USR1 $$ ) &", *lines]) + "\n"
    p = _bash(script, tmp_path)
    assert p.returncode == 75, (p.stdout, p.stderr)
    assert "SIGUSR1: forwarding it to the step" in p.stdout


def test_the_test_cluster_can_shorten_the_requeue_wait() -> None:
    from ddpnet.launch.slurmcluster import ClusterSpec, SlurmNode, render_conf

    node = SlurmNode("n1", "127.0.0.1", "n1")
    base = ClusterSpec("c", Path("/r"), "n1", "127.0.0.1", (node,))
    assert "AuthInfo=socket=/r/munge/munge.socket\n" in render_conf(base)
    short = ClusterSpec("c", Path("/r"), "n1", "127.0.0.1", (node,), cred_expire_s=5)
    assert "AuthInfo=socket=/r/munge/munge.socket,cred_expire=5\n" in render_conf(short)


def test_spare_nodes_allocate_more_and_restart_the_step_inside_the_allocation() -> None:
    lines = render(sb(nodes=3, spare_nodes=1, requeue=True, engine="srun")).splitlines()
    assert "#SBATCH --nodes=4" in lines and "#SBATCH --no-kill" in lines
    step = next(line.strip() for line in lines if line.strip().startswith("srun "))
    assert step.startswith('srun --nodes=3 --nodelist="$STEP_NODES" --ntasks=3 '
                           "--ntasks-per-node=1 --kill-on-bad-exit=1"), step
    watcher = next(line for line in lines if "ddpnet.launch.recover " in line)
    assert '--step-nodes "$STEP_NODES"' in watcher
    loop = lines.index("while :; do")
    assert lines[loop + 1] == ('  STEP_NODES=$("$PY" -m ddpnet.launch.stepnodes --job-dir '
                               '"$DDPNET_JOB_DIR" --nodes 3) || { code=$?; break; }')
    assert '  [ "${recovered:-0}" -eq 10 ] || break' in lines


def test_torchrun_spares_run_one_task_on_each_step_node() -> None:
    """The step's own task count: without it srun inherits the allocation's SLURM_NTASKS (4)
    for 2 nodes at 1 task each and refuses the step (tests/launch/test_slurm_recover.py)."""
    text = render(sb(nodes=2, spare_nodes=2, requeue=True))
    assert "#SBATCH --nodes=4" in text
    assert 'srun --nodes=2 --nodelist="$STEP_NODES" --ntasks=2 --ntasks-per-node=1 ' in text


@pytest.mark.parametrize(("kw", "err"), [
    (dict(spare_nodes=1), "without --requeue"),
    (dict(spare_nodes=1, requeue=True, max_recoveries=0), "without --max-recoveries 1 or"),
    (dict(spare_nodes=-1, requeue=True), "--spare-nodes -1 is outside"),
])
def test_spares_that_could_not_serve_are_config_errors(kw: dict[str, object], err: str) -> None:
    with pytest.raises(ConfigError) as info:
        sb(**kw)
    assert err in str(info.value) and "\n" not in str(info.value)

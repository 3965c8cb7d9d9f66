"""The preemption part of a rendered batch script (pure): ``#SBATCH --signal`` and
``--requeue``, the step run so that its ranks get the warning, and the requeue after it.

Which processes SLURM signals (sbatch(1), ``--signal=[{R|B}:]<sig_num>[@sig_time]``):

- without ``B:`` (our default, ``USR1@90``) "all job steps will be signaled, but not the
  batch shell itself": slurmstepd delivers the signal to every process of the ``srun`` step
  on every node, so each rank hears it directly, however deep it sits under a launcher;
- with ``B:`` only the batch shell is signalled. Bash runs a trap only once the foreground
  command ends ("most shells cannot handle signals while a command is running", scancel(1)),
  so the script runs the step in the background, ``wait``s, and its trap forwards the signal
  to ``srun``, which "automatically forwards signals to the tasks it is controlling"
  (srun(1)). One hop more, and nothing reaches the ranks if the shell is busy elsewhere.

A rank that got the warning checkpoints and exits 75 (``ddpnet train --checkpoint-dir``,
``ExitCode.PREEMPTED``). The script requeues when the step exits 75, or 128+N for the warning
signal N (a program that does not handle it dies of it, and ``ddpnet launch`` reports a
forwarded signal that way): ``scontrol requeue`` puts the job back to pending and SLURM starts
the script again from the top with ``SLURM_RESTART_COUNT`` set; the program resumes from its
newest checkpoint. ``#SBATCH --requeue`` also lets SLURM requeue the job itself on
preemption (PreemptMode=REQUEUE) or node failure.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

from ddpnet.errors import ConfigError
from ddpnet.exitcodes import ExitCode

#: the warning SLURM sends before the time limit by default: USR1, 90 s ahead (time enough
#: for a step, a checkpoint and leaving the group; SLURM may send it up to 60 s earlier)
DEFAULT_SIGNAL = "USR1@90"

_SPEC = re.compile(r"(?:(?P<batch>B):)?(?P<sig>[A-Za-z0-9]+)(?:@(?P<secs>\d+))?")
_HINT = ("give [B:]SIGNAL[@SECONDS], e.g. --preempt-signal USR1@90 (every rank hears it) "
         "or B:USR1@90 (the batch script forwards it)")


@dataclass(frozen=True)
class PreemptSignal:
    """The warning signal: its name (``USR1``), seconds before the time limit, and whether
    SLURM signals only the batch shell (``B:``), which then forwards it to the step."""

    name: str
    seconds: int
    batch_only: bool = False

    @property
    def number(self) -> int:
        return int(signal.Signals[f"SIG{self.name}"])

    @property
    def directive(self) -> str:
        return f"#SBATCH --signal={'B:' if self.batch_only else ''}{self.name}@{self.seconds}"


def parse_signal(text: str) -> PreemptSignal:
    """``[B:]SIG[@SECONDS]`` as sbatch takes it (SIG a name with or without ``SIG``, or a
    number; SECONDS 0..65535, 60 when left out, as sbatch does); a ConfigError otherwise."""
    m = _SPEC.fullmatch(text.strip())
    if not m:
        raise ConfigError(f"--preempt-signal {text!r} is not [B:]SIGNAL[@SECONDS]", _HINT)
    name = _signal_name(m.group("sig"), text)
    seconds = int(m.group("secs")) if m.group("secs") is not None else 60
    if seconds > 65535:
        raise ConfigError(f"--preempt-signal {text!r}: {seconds} s is outside 0..65535",
                          _HINT)
    if name in ("KILL", "STOP"):
        raise ConfigError(f"--preempt-signal {text!r}: SIG{name} cannot be caught, so no "
                          "rank could checkpoint on it", _HINT)
    return PreemptSignal(name, seconds, m.group("batch") is not None)


def _signal_name(sig: str, text: str) -> str:
    """``USR1``, ``SIGUSR1`` or ``10`` as the name sbatch and bash both take (``USR1``)."""
    try:
        found = signal.Signals(int(sig)) if sig.isdigit() else signal.Signals[
            "SIG" + sig.upper().removeprefix("SIG")]
    except (KeyError, ValueError):
        raise ConfigError(f"--preempt-signal {text!r}: {sig!r} is not a signal", _HINT) from None
    return found.name.removeprefix("SIG")


def directives(sig: PreemptSignal | None, requeue: bool) -> list[str]:
    """The #SBATCH lines: the warning signal, ``--requeue`` and an appended log."""
    lines = [sig.directive] if sig is not None else []
    if requeue:
        # append: a requeued run keeps the log of the runs before it
        lines += ["#SBATCH --requeue", "#SBATCH --open-mode=append"]
    return lines


def step_lines(step: str, sig: PreemptSignal | None, requeue: bool, recover: str = "",
               spare: Spare | None = None) -> list[str]:
    """Run ``step`` (an srun line) so that its ranks get the warning, then requeue the job
    when the step says it was preempted. ``recover``: the command that watches for the
    watch's verdict beside the step (:func:`recover_lines`), "" for none; ``spare``: the
    step runs on fewer nodes than the allocation holds and starts again inside it when
    the watcher took a node out (:func:`spare_loop`)."""
    if sig is None:
        return [step]
    code = int(ExitCode.PREEMPTED)
    lines = [
        f"# Preemption: SIG{sig.name} {sig.seconds} s before the time limit. A rank of "
        "`ddpnet train --checkpoint-dir DIR`",
        f"# stops with every other rank after one step, checkpoints and exits {code}.",
        'echo "ddpnet: job $SLURM_JOB_ID run ${SLURM_RESTART_COUNT:-0} (restarts so far)"',
        *(recover_lines() if recover else []),
    ]
    run = ["set +e"]
    if sig.batch_only:
        run += _forwarded(step, sig, recover)
    elif recover:
        run += _beside(step, recover)
    else:
        run += [step, "code=$?"]
    run.append("set -e")
    lines += spare_loop(run, spare) if spare is not None and recover else run
    if requeue:
        lines += [
            f"# {code}: checkpoint saved; {128 + sig.number}: the step died of SIG{sig.name} "
            "(a program that does not handle it).",
            f'if [ "$code" -eq {code} ] || [ "$code" -eq {128 + sig.number} ]; then',
            '  echo "ddpnet: step preempted (exit $code): requeueing job $SLURM_JOB_ID"',
            '  scontrol requeue "$SLURM_JOB_ID" || echo "ddpnet: scontrol requeue failed"',
            "fi",
        ]
    return [*lines, 'exit "$code"']


def recover_lines() -> list[str]:
    """The job's directory (the recovery record) and this run's own watch directory (a
    verdict of an earlier run is never read as this one's)."""
    return [
        "# Recovery: the job's record (recovery.json) and each run's watch directory.",
        'export DDPNET_JOB_DIR="${DDPNET_JOB_DIR:-${SLURM_SUBMIT_DIR:-$PWD}/ddpnet-job-'
        '$SLURM_JOB_ID}"',
        'export DDPNET_WATCH_DIR="$DDPNET_JOB_DIR/watch-run${SLURM_RESTART_COUNT:-0}"',
        'mkdir -p "$DDPNET_WATCH_DIR"',
        "# a report older than this run (or step) is another's (a DDPNET_JOB_DIR used again)",
        "run_started=$(date +%s.%N)",
    ]


def recover_command(python: str, max_recoveries: int, spare: bool = False) -> str:
    """``python -m ddpnet.launch.recover ...`` for the script (``$step``: the step's pid);
    ``spare``: it is told the step's nodes (``$STEP_NODES``) and may restart the step."""
    nodes = ' --step-nodes "$STEP_NODES"' if spare else ""
    return (f'{python} -m ddpnet.launch.recover --job-dir "$DDPNET_JOB_DIR" --watch-dir '
            f'"$DDPNET_WATCH_DIR" --max-recoveries {max_recoveries} --step-pid "$step" '
            f'--since "$run_started"{nodes}')


@dataclass(frozen=True)
class Spare:
    """A step of ``nodes`` nodes in an allocation that holds spares; ``python`` runs ddpnet."""

    nodes: int
    python: str = '"$PY"'


#: the watcher's status that asks for the step again (ddpnet.launch.recover.RESTART_STEP)
RESTART_STEP = 10


def spare_loop(run: list[str], spare: Spare) -> list[str]:
    """``run`` (the step and its watcher) in a loop: each pass picks the step's nodes (the
    allocation's first ones not taken out), makes the first one MASTER_ADDR with a port of
    its own (the last pass's may linger), and passes again while the watcher says it took
    a node out and a spare is left (exit RESTART_STEP); the newest checkpoint resumes it."""
    py = spare.python
    setup = [
        f'STEP_NODES=$({py} -m ddpnet.launch.stepnodes --job-dir "$DDPNET_JOB_DIR" '
        f"--nodes {spare.nodes}) || {{ code=$?; break; }}",
        'MASTER_ADDR="${STEP_NODES%%,*}"',
        'if [ "$step_restart" -gt 0 ]; then',
        f'  MASTER_PORT=$({py} -m ddpnet.launch.port "$SLURM_JOB_ID:step$step_restart")',
        '  DDPNET_WATCH_DIR="$DDPNET_JOB_DIR/watch-run${SLURM_RESTART_COUNT:-0}-step'
        '$step_restart"',
        '  mkdir -p "$DDPNET_WATCH_DIR"',
        "  run_started=$(date +%s.%N)",
        "fi",
        "export MASTER_ADDR MASTER_PORT DDPNET_WATCH_DIR DDPNET_STEP_RESTART=$step_restart",
        'echo "ddpnet: step $step_restart on $STEP_NODES, MASTER_ADDR=$MASTER_ADDR '
        'MASTER_PORT=$MASTER_PORT"',
    ]
    return [
        f"# Spare nodes: the step runs on {spare.nodes} of the allocation's nodes; when the "
        "watcher took one out",
        f"# (it exits {RESTART_STEP}), the step starts again on the others from the newest "
        "checkpoint: no requeue.",
        "step_restart=0",
        "while :; do",
        *(f"  {line}" for line in [*setup, *run]),
        f'  [ "${{recovered:-0}}" -eq {RESTART_STEP} ] || break',
        "  step_restart=$((step_restart + 1))",
        "done",
    ]


def _watcher(recover: str) -> list[str]:
    if not recover:
        return []
    return ["# When the watch names a node (its verdict in $DDPNET_WATCH_DIR/report.json), "
            "drain it (or",
            "# exclude it) and requeue: without waiting for SLURM to declare it dead.",
            f"{recover} &", "recover=$!"]


def _beside(step: str, recover: str) -> list[str]:
    """The step in the background with the verdict's watcher beside it."""
    return [f"{step} &", "step=$!", *_watcher(recover),
            'while :; do wait "$step"; code=$?; kill -0 "$step" 2>/dev/null || break; done',
            'wait "$recover"; recovered=$?']


def _forwarded(step: str, sig: PreemptSignal, recover: str = "") -> list[str]:
    """``B:``: only this shell gets the signal; run the step in the background so the trap
    runs at once, pass the signal on to srun (which forwards it to every task), and wait
    again until the step itself has ended (``wait`` returns early when a trap runs)."""
    return [
        f"forward() {{ echo \"ddpnet: SIG{sig.name}: forwarding it to the step\"; "
        f'kill -{sig.name} "$step" 2>/dev/null; }}',
        f"trap forward {sig.name}",
        f"{step} &",
        "step=$!",
        *_watcher(recover),
        'while :; do wait "$step"; code=$?; kill -0 "$step" 2>/dev/null || break; done',
        *(['while :; do wait "$recover"; recovered=$?; kill -0 "$recover" 2>/dev/null || '
           "break; done"] if recover else []),
    ]


#: the signals torchrun's agent handles by default (TORCHELASTIC_SIGNALS_TO_HANDLE)
_TORCHRUN_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")


def torchrun_signals(sig_name: str = "USR1") -> str:
    """TORCHELASTIC_SIGNALS_TO_HANDLE with the preemption warning added: torchrun dies of a
    signal its agent does not handle (SIGUSR1's default action) and the step ends with its
    workers mid-checkpoint; handled, it passes the signal on to the workers and waits for
    them (30 s) before it exits."""
    return ",".join(dict.fromkeys((*_TORCHRUN_SIGNALS, f"SIG{sig_name}")))


def torchrun_lines(sig: PreemptSignal) -> list[str]:
    """The sbatch script's export of :func:`torchrun_signals` for its warning signal."""
    handled = torchrun_signals(sig.name)
    return ["# torchrun passes the warning on to its ranks and waits for them (not die of it)",
            f"export TORCHELASTIC_SIGNALS_TO_HANDLE={handled}"]

"""A private SLURM cluster under one directory: its own munge key and socket, its own
slurm.conf, ports, spool/state/log dirs. Used by the tests (one node on this host) and by
``ddpnet lab up --slurm`` (one slurmd per lab node namespace).

``render_conf`` is pure; :class:`SlurmCluster` starts and stops the daemons (edge). Nothing
of the host's own SLURM or munge (``/etc/slurm``, ``/run/munge``) is read or touched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ddpnet.errors import RequirementError
from ddpnet.subproc import CommandOutput, run_tool

DAEMONS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "sinfo")


@dataclass(frozen=True)
class SlurmNode:
    """One slurmd: its SLURM node name, the address slurmctld reaches it at, and ``wrap``:
    the argv prefix that enters the node (empty on this host; nsenter/unshare in a lab)."""

    name: str
    address: str
    hostname: str
    cpus: int = 4
    wrap: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClusterSpec:
    cluster: str
    root: Path
    controller_host: str
    controller_addr: str
    nodes: tuple[SlurmNode, ...]
    ctld_port: int = 6917
    slurmd_port: int = 6918
    partition: str = "ddpnet"
    controller_wrap: tuple[str, ...] = ()
    memory_mb: int = 1000
    extra: tuple[str, ...] = field(default=())
    #: munge credential lifetime (AuthInfo cred_expire, SLURM's default 120 s); it is also
    #: how long a requeued job waits before it may start again
    cred_expire_s: int | None = None
    #: how often the scheduler passes over pending jobs (SchedulerParameters sched_interval and
    #: bf_interval; SLURM's 60 s and 30 s): a requeued job whose BeginTime has come, or a job
    #: a drained node left waiting, starts only at such a pass, not at an event; a lab
    #: cluster of a few nodes and jobs can afford one every few seconds
    sched_interval_s: int = 2

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "munge.socket"


def render_conf(spec: ClusterSpec) -> str:
    """slurm.conf: no cgroups (proctrack/linuxproc, task/none), root as SlurmUser, nodes that
    may advertise more CPUs than they have (``config_overrides``), one partition."""
    r = spec.root
    lines = [
        f"ClusterName={spec.cluster}",
        f"SlurmctldHost={spec.controller_host}({spec.controller_addr})",
        f"SlurmctldPort={spec.ctld_port}",
        f"SlurmdPort={spec.slurmd_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={spec.munge_socket}"
        + (f",cred_expire={spec.cred_expire_s}" if spec.cred_expire_s else ""),
        f"StateSaveLocation={r}/state",
        f"SlurmdSpoolDir={r}/spool/%n",
        f"SlurmctldPidFile={r}/run/slurmctld.pid",
        f"SlurmdPidFile={r}/run/slurmd-%n.pid",
        f"SlurmctldLogFile={r}/log/slurmctld.log",
        f"SlurmdLogFile={r}/log/slurmd-%n.log",
        "SlurmdParameters=config_overrides",
        "MailProg=/bin/true",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "MpiDefault=none",
        "SchedulerType=sched/backfill",
        f"SchedulerParameters=sched_interval={spec.sched_interval_s},"
        f"bf_interval={spec.sched_interval_s}",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "ReturnToService=2",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
        "InactiveLimit=0",
        "KillWait=5",
        "MinJobAge=300",
        *spec.extra,
    ]
    for n in spec.nodes:
        lines.append(f"NodeName={n.name} NodeAddr={n.address} NodeHostname={n.hostname} "
                     f"CPUs={n.cpus} RealMemory={spec.memory_mb} State=UNKNOWN")
    lines.append(f"PartitionName={spec.partition} Nodes=ALL Default=YES MaxTime=INFINITE "
                 "State=UP OverSubscribe=YES")
    return "\n".join(lines) + "\n"


def require_tools() -> None:
    missing = [t for t in DAEMONS if shutil.which(t) is None
               and not Path("/usr/sbin", t).exists()]
    if missing:
        raise RequirementError(f"SLURM/munge tools missing: {', '.join(missing)}",
                               "apt-get install slurm-wlm munge (scripts/install-system-deps.sh)")


class SlurmCluster:
    """Start with :meth:`start`, stop with :meth:`stop` (kills only the daemons it started)."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self._procs: list[subprocess.Popen[bytes]] = []

    # ---- clients ----------------------------------------------------------------------------

    def client_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.spec.conf)
        env.update(extra or {})
        return env

    def client(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
               timeout: float = 60, cwd: str | None = None) -> CommandOutput:
        """Run a SLURM client (srun, sbatch, sinfo, ...) where the controller lives."""
        return run_tool([*self.spec.controller_wrap, *argv], timeout,
                        env=self.client_env(env), cwd=cwd)

    # ---- lifecycle ----------------------------------------------------------------------------

    def start(self, timeout: float = 60) -> None:
        require_tools()
        r = self.spec.root
        for d in ("state", "run", "log", "munge"):
            (r / d).mkdir(parents=True, exist_ok=True)
        for n in self.spec.nodes:
            (r / "spool" / n.name).mkdir(parents=True, exist_ok=True)
        (r / "munge").chmod(0o711)
        key = r / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.spec.conf.write_text(render_conf(self.spec))
        # cgroup.conf next to slurm.conf: slurmd reads it even with proctrack/linuxproc
        (r / "cgroup.conf").write_text("CgroupPlugin=autodetect\nIgnoreSystemd=yes\n")
        m = r / "munge"
        self._spawn([*self.munged_wrap(), "munged", "-F", "-f", f"--key-file={key}",
                     f"--socket={m}/munge.socket",
                     f"--pid-file={m}/munged.pid", f"--log-file={m}/munged.log",
                     f"--seed-file={m}/munged.seed"], "munged")
        self._wait(lambda: self.spec.munge_socket.exists(), 10, "munged socket")
        self._spawn([*self.spec.controller_wrap, "slurmctld", "-D", "-i", "-f",
                     str(self.spec.conf)], "slurmctld")
        for n in self.spec.nodes:
            self._spawn([*n.wrap, "slurmd", "-D", "-N", n.name, "-f", str(self.spec.conf)],
                        f"slurmd-{n.name}")
        want = len(self.spec.nodes)

        def all_idle() -> bool:
            try:
                p = self.client(["sinfo", "-h", "-N", "-t", "idle", "-o", "%N"], timeout=10)
            except subprocess.TimeoutExpired:
                return False
            return len(set(p.stdout.split())) == want

        try:
            self._wait(all_idle, timeout, f"{want} idle node(s)")
        except BaseException:
            self.stop()
            raise

    def munged_wrap(self) -> tuple[str, ...]:
        """Where munged runs (this host; a lab puts it in node 0)."""
        return ()

    def _spawn(self, argv: list[str], name: str) -> None:
        log = open(self.spec.root / "log" / f"{name}.out", "wb")  # noqa: SIM115
        with log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self._procs.append(proc)
        # recorded so that another process (``ddpnet lab down``) can stop the daemons
        with open(self.spec.root / "run" / "daemons.pids", "a") as f:
            f.write(f"{proc.pid}\n")

    def _wait(self, ready: object, timeout: float, what: str) -> None:
        assert callable(ready)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            dead = [p for p in self._procs if p.poll() is not None]
            if dead:
                break
            time.sleep(0.3)
        logs = "; ".join(f"{p.name}: {p.read_text(errors='replace')[-300:]!r}"
                         for p in sorted((self.spec.root / "log").glob("*")))
        raise RequirementError(f"the SLURM test cluster did not come up ({what})",
                               f"see the daemon logs under {self.spec.root / 'log'}: {logs}")

    @staticmethod
    def stop_recorded(root: Path) -> None:
        """Stop the daemons a cluster under ``root`` recorded, from any process: only pids
        whose command line still names ``root`` (a recycled pid is left alone)."""
        pids: list[int] = []
        with contextlib.suppress(OSError):
            pids = [int(x) for x in (root / "run" / "daemons.pids").read_text().split()]
        live = [p for p in pids if _names(p, str(root))]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in live:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, sig)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and any(_names(p, str(root)) for p in live):
                time.sleep(0.1)
        _kill_stepds(root)

    def stop(self) -> None:
        """Stop slurmd(s), slurmctld, munged: SIGTERM, then SIGKILL to each session."""
        for p in reversed(self._procs):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 3
        for p in reversed(self._procs):
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5)
        _kill_stepds(self.spec.root)
        self._procs.clear()


def _names(pid: int, text: str) -> bool:
    """True while ``pid`` lives and its command line mentions ``text``."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return False
    return text.encode() in cmdline


def _kill_stepds(root: Path) -> None:
    """slurmstepd processes of our cluster can outlive slurmd when a step hangs; each keeps
    our slurmd log file (under ``root``) open, which no other cluster's stepd does."""
    prefix = str(root) + "/"
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() != "slurmstepd":
                continue
            fds = os.listdir(f"/proc/{pid}/fd")
            ours = any(os.readlink(f"/proc/{pid}/fd/{fd}").startswith(prefix) for fd in fds)
        except OSError:
            continue
        if ours:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)

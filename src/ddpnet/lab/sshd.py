"""A real OpenSSH server in lab nodes, for SSH launches (``--hostfile``) over the lab network.

Each chosen node runs ``/usr/sbin/sshd -D -e -f <its config>`` inside its namespace: its own
host key, listening on the node's lab address only, keys and pid file in a directory the
caller owns. Nothing touches /etc/ssh or ~/.ssh of the real host: the client side is a key
pair and a known_hosts file in the same directory, passed to ddpnet as ``--ssh-identity`` and
``--ssh-option UserKnownHostsFile=...`` (:meth:`SshdSet.client_flags`). The one shared path is
sshd's privilege-separation directory ``/run/sshd``, compiled into the binary.

Faults for tests, per node: ``without_key`` (its authorized_keys is empty: passwordless SSH
missing), ``wrong_host_key`` (known_hosts holds another key for it: the host key changed),
``unknown_host_key`` (known_hosts lacks it).

    with Lab("sl1", nodes=3) as lab:
        sshd = start(lab, tmp_path)
        lab.exec(0, ["ssh", *sshd.ssh_args(), lab.nodes[1].address, "hostname"])
        stop(sshd)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ddpnet.errors import RequirementError
from ddpnet.lab import system
from ddpnet.lab.topology import LabNode

if TYPE_CHECKING:
    from ddpnet.lab.lab import Lab

SSHD = "/usr/sbin/sshd"
#: sshd refuses to start without its privilege-separation directory (Debian: /run/sshd)
PRIVSEP_DIR = Path("/run/sshd")
#: seconds an sshd may take to write its pid file (it listens before writing it)
START_TIMEOUT = 15.0


def sshd_config(node: LabNode, directory: Path, authorized_keys: Path) -> str:
    """The node's own sshd_config (pure): key login for root only, on the lab address."""
    own = directory / node.name
    return "\n".join([
        f"ListenAddress {node.address}",
        "Port 22",
        f"HostKey {own / 'host_key'}",
        f"PidFile {own / 'sshd.pid'}",
        f"AuthorizedKeysFile {authorized_keys}",
        "UsePAM no",
        "StrictModes no",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PrintMotd no",
        "LogLevel ERROR",
    ]) + "\n"


def known_hosts_line(node: LabNode, public_key: str) -> str:
    """``address,hostname keytype key`` (pure)."""
    keytype, key = public_key.split()[:2]
    return f"{node.address},{node.hostname} {keytype} {key}"


@dataclass
class SshdSet:
    """The running servers and the client's files."""

    directory: Path
    identity: Path
    known_hosts: Path
    nodes: tuple[LabNode, ...]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def client_flags(self) -> list[str]:
        """ddpnet's ``launch``/``check`` flags that use this lab's key and known_hosts."""
        return ["--ssh-identity", str(self.identity),
                "--ssh-option", f"UserKnownHostsFile={self.known_hosts}",
                "--ssh-option", "GlobalKnownHostsFile=/dev/null"]

    def ssh_args(self) -> list[str]:
        """The same for a plain ``ssh`` command line."""
        return ["-o", "BatchMode=yes", "-i", str(self.identity), "-o", "IdentitiesOnly=yes",
                "-o", f"UserKnownHostsFile={self.known_hosts}",
                "-o", "GlobalKnownHostsFile=/dev/null"]


def _keygen(path: Path, comment: str) -> str:
    """A fresh ed25519 key pair at ``path``; returns the public key line."""
    system.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])
    return path.with_suffix(".pub").read_text().strip()


def _write_client(directory: Path, nodes: Sequence[LabNode], host_keys: dict[str, str],
                  wrong_host_key: Iterable[int], unknown_host_key: Iterable[int]
                  ) -> tuple[Path, Path, Path]:
    """The client key pair, the shared authorized_keys, the empty one, and known_hosts."""
    identity = directory / "id_client"
    authorized = directory / "authorized_keys"
    authorized.write_text(_keygen(identity, "ddpnet-lab-client") + "\n")
    (directory / "authorized_keys.empty").write_text("")
    decoy = _keygen(directory / "decoy_host_key", "ddpnet-lab-decoy") if wrong_host_key \
        else ""
    lines = []
    for n in nodes:
        if n.index in set(unknown_host_key):
            continue
        key = decoy if n.index in set(wrong_host_key) else host_keys[n.name]
        lines.append(known_hosts_line(n, key))
    known = directory / "known_hosts"
    known.write_text("\n".join(lines) + "\n")
    return identity, authorized, known


def start(lab: Lab, directory: Path, nodes: Sequence[int] | None = None, *,
          without_key: Sequence[int] = (), wrong_host_key: Sequence[int] = (),
          unknown_host_key: Sequence[int] = ()) -> SshdSet:
    """Start sshd in the chosen nodes (None = all) and wait until each listens."""
    if not os.path.exists(SSHD) or shutil.which("ssh-keygen") is None:
        raise RequirementError(f"{SSHD} or ssh-keygen is missing",
                               "apt-get install openssh-server openssh-client")
    chosen = tuple(lab.node(i) for i in (range(len(lab.nodes)) if nodes is None else nodes))
    directory.mkdir(parents=True, exist_ok=True)
    PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
    host_keys = {}
    for n in chosen:
        (directory / n.name).mkdir(exist_ok=True)
        host_keys[n.name] = _keygen(directory / n.name / "host_key", f"ddpnet-lab-{n.name}")
    identity, authorized, known = _write_client(directory, chosen, host_keys, wrong_host_key,
                                                unknown_host_key)
    sshds = SshdSet(directory, identity, known, chosen)
    try:
        for n in chosen:
            keys = directory / "authorized_keys.empty" if n.index in without_key else authorized
            config = directory / n.name / "sshd_config"
            config.write_text(sshd_config(n, directory, keys))
            log = open(directory / n.name / "sshd.log", "wb")  # noqa: SIM115 (the child's)
            with log:
                sshds.procs.append(lab.popen(n.index, [SSHD, "-D", "-e", "-f", str(config)],
                                             stdin=subprocess.DEVNULL, stdout=log, stderr=log))
        for n, proc in zip(chosen, sshds.procs, strict=True):
            _wait_listening(n, directory, proc)
    except BaseException:
        stop(sshds)
        raise
    return sshds


def _wait_listening(node: LabNode, directory: Path, proc: subprocess.Popen[bytes]) -> None:
    """sshd writes its pid file once it listens; fail with its log when it exits first."""
    pid_file = directory / node.name / "sshd.pid"
    end = time.monotonic() + START_TIMEOUT
    while not pid_file.exists():
        if proc.poll() is not None or time.monotonic() > end:
            log = (directory / node.name / "sshd.log").read_text(errors="replace").strip()
            raise system.LabError(f"{node.name}: sshd did not start: {log[-300:] or 'no log'}",
                                  f"run {SSHD} -t -f {directory / node.name / 'sshd_config'}")
        time.sleep(0.05)


def stop(sshds: SshdSet) -> None:
    """Stop every sshd and remove the keys and configs (sessions still running are in
    sessions of their own: ``lab down`` kills them with everything else in the node)."""
    for proc in sshds.procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, 15)
    for proc in sshds.procs:
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, 9)
            proc.wait()
    shutil.rmtree(sshds.directory, ignore_errors=True)

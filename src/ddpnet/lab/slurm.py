"""SLURM on a lab: one slurmd per node namespace, slurmctld and munged in node 0.

Each daemon enters its node with ``nsenter --net`` plus ``unshare --uts --mount`` (not
``ip netns exec``, whose fresh /sys hides the cgroup mount slurmd 22.05 needs), then, in that
private mount namespace, bind-mounts the node's /etc/netns hosts file, remounts sysfs (so
/sys/class/net shows the node's NIC), re-attaches the host's cgroup tree and sets the node's
hostname. Every daemon lives in a lab namespace, so ``lab down`` (which kills what runs in
its namespaces) stops them too; :func:`stop` does it first and removes the directory.

    with Lab("ln1", nodes=3) as lab:
        cluster = start(lab)
        lab.exec(0, ["srun", "-N", "3", "hostname"], env=client_env(lab))
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from ddpnet.lab import state as statemod
from ddpnet.lab.topology import validate_name
from ddpnet.launch.slurmcluster import ClusterSpec, SlurmCluster, SlurmNode

if TYPE_CHECKING:
    from ddpnet.lab.lab import Lab

CTLD_PORT = 6917
SLURMD_PORT = 6918

#: enters the node: runs as ``sh -ec SCRIPT sh ROOT NS HOSTNAME CMD...``; everything execs,
#: so the pid of the wrapper is the daemon's pid
_ENTER = r'''
root=$1; ns=$2; hn=$3; shift 3
if [ -f /etc/netns/$ns/hosts ]; then mount --bind /etc/netns/$ns/hosts /etc/hosts; fi
mkdir -p "$root/mnt/cg-$ns"
mount --rbind /sys/fs/cgroup "$root/mnt/cg-$ns"
mount -t sysfs sysfs /sys
mount --rbind "$root/mnt/cg-$ns" /sys/fs/cgroup
umount -l "$root/mnt/cg-$ns"
hostname "$hn"
exec "$@"
'''


def root_dir(name: str) -> Path:
    """Where a lab's SLURM keeps its config, key, state, spool and logs."""
    return statemod.STATE_DIR / f"{name}-slurm"


def enter_argv(root: Path, namespace: str, hostname: str) -> tuple[str, ...]:
    """The argv prefix that runs a command as this lab node, mount-namespace-private."""
    return ("nsenter", f"--net=/run/netns/{namespace}", "unshare", "--uts", "--mount",
            "--propagation", "private", "sh", "-ec", _ENTER, "sh", str(root), namespace,
            hostname)


def spec_for(lab: Lab, cpus: int = 2, cred_expire_s: int | None = None,
             extra: tuple[str, ...] = ()) -> ClusterSpec:
    """The cluster of this lab: node i is SLURM node ``<hostname>`` at the node's address;
    ``cred_expire_s`` shortens how long a requeued job waits to start again (120 s);
    ``extra``: more slurm.conf lines (a HealthCheckProgram)."""
    root = root_dir(lab.name)
    nodes = tuple(
        SlurmNode(name=n.hostname, address=n.address, hostname=n.hostname, cpus=cpus,
                  wrap=enter_argv(root, n.namespace, n.hostname))
        for n in lab.nodes)
    first = lab.nodes[0]
    return ClusterSpec(
        cluster=("lab" + lab.name.replace("-", ""))[:30].lower(), root=root,
        controller_host=first.hostname, controller_addr=first.address,
        nodes=nodes, ctld_port=CTLD_PORT, slurmd_port=SLURMD_PORT, partition="lab",
        controller_wrap=enter_argv(root, first.namespace, first.hostname),
        cred_expire_s=cred_expire_s, extra=extra,
    )


def client_env(lab: Lab) -> dict[str, str]:
    """What a SLURM client (srun, sbatch, sinfo) in a lab node needs: the lab's config."""
    return {"SLURM_CONF": str(root_dir(lab.name) / "slurm.conf")}


def start(lab: Lab, cpus: int = 2, timeout: float = 60,
          cred_expire_s: int | None = None, extra: tuple[str, ...] = ()) -> SlurmCluster:
    """Start munged, slurmctld (node 0) and one slurmd per node; wait until all are idle.
    Writes ``<root>/slurm``: a wrapper that runs a SLURM client in node 0."""
    stop(lab.name)
    spec = spec_for(lab, cpus, cred_expire_s, extra)
    cluster = _LabCluster(spec)
    cluster.start(timeout=timeout)
    write_client_wrapper(spec)
    return cluster


def client_wrapper(name: str) -> Path:
    return root_dir(name) / "slurm"


def write_client_wrapper(spec: ClusterSpec) -> Path:
    """``<root>/slurm srun -N 3 hostname``: a client in node 0 with the lab's SLURM_CONF (and
    none of ``lab run``'s RANK/WORLD_SIZE, which srun would pass on to every task)."""
    import shlex

    path = spec.root / "slurm"
    enter = " ".join(shlex.quote(a) for a in spec.controller_wrap)
    path.write_text("#!/bin/sh\n# a SLURM client on the lab's node 0: slurm srun|sbatch|sinfo ...\n"
                    f"exec {enter} env SLURM_CONF={shlex.quote(str(spec.conf))} \"$@\"\n")
    path.chmod(0o755)
    return path


def describe(name: str) -> str:
    """One line for ``lab up --slurm``."""
    return (f"SLURM up on every node (partition lab); clients: {client_wrapper(name)} "
            "srun -N <nodes> CMD")


def stop(name: str) -> None:
    """Stop a lab's SLURM daemons (by the pids they wrote) and remove its directory."""
    validate_name(name)  # the name becomes a path we remove
    root = root_dir(name)
    if not root.exists():
        return
    SlurmCluster.stop_recorded(root)
    with contextlib.suppress(OSError):
        shutil.rmtree(root)


class _LabCluster(SlurmCluster):
    """munged runs in node 0 too, so that every daemon lives in a lab namespace."""

    def munged_wrap(self) -> tuple[str, ...]:
        return self.spec.controller_wrap

"""What a rendered job's init container runs: ``python -m ddpnet.k8s.preflight WAIT_S
[CHECK OPTIONS]``.

1. RANK is the pod's index (``DDPNET_POD_INDEX``, filled by the kubelet from the pod's
   metadata) plus ``DDPNET_RANK_OFFSET`` (1 on PyTorchJob workers: the master is rank 0).
   Neither the training operator nor the Job controller gives an init container a rank.
2. Wait, at most WAIT_S seconds, until MASTER_ADDR resolves: pods start minutes apart (image
   pulls, scheduling) and the master's DNS record exists only once its pod has an address.
3. Replace this process with ``ddpnet check [CHECK OPTIONS]``: its verdict, root cause
   first, is the init container's log, and its exit status fails the pod.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping

from ddpnet.env.base import parse_int
from ddpnet.errors import ConfigError, RendezvousError
from ddpnet.net.names import HostResolution, resolve_host

INDEX_VAR = "DDPNET_POD_INDEX"
OFFSET_VAR = "DDPNET_RANK_OFFSET"
#: seconds between two resolution attempts, and between two "waiting" lines in the log
RETRY_S = 2.0
SAY_EVERY_S = 10.0


def check_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with RANK = pod index + offset (pure)."""
    if INDEX_VAR not in environ:
        raise ConfigError(f"{INDEX_VAR} is not set: this runs in a pod rendered by ddpnet k8s",
                          "render the job again with ddpnet k8s, or run ddpnet check directly "
                          "with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT")
    index = parse_int(environ[INDEX_VAR], INDEX_VAR)
    offset = parse_int(environ.get(OFFSET_VAR, "0"), OFFSET_VAR)
    return {**environ, "RANK": str(index + offset)}


def wait_for(host: str, wait_s: float, *,
             resolve: Callable[[str, float], HostResolution] = resolve_host,
             clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep,
             say: Callable[[str], None] | None = None) -> float:
    """Seconds until ``host`` resolved; a ``master-unresolvable`` RendezvousError after
    ``wait_s``."""
    say = say or _say
    start = clock()
    said = start
    while True:
        left = wait_s - (clock() - start)
        found = resolve(host, max(0.5, min(5.0, left)))
        if found.ok:
            return clock() - start
        if clock() - start >= wait_s:
            raise RendezvousError(
                "master-unresolvable",
                f"MASTER_ADDR {host} did not resolve within {wait_s:g} s ({found.error})",
                "is the master pod scheduled and running its init container? kubectl get pods; "
                "kubectl describe pod shows why it waits (image pull, no GPU free); for a "
                "PyTorchJob the service <job>-rdzv must exist (kubectl get svc)")
        if clock() - said >= SAY_EVERY_S:
            say(f"ddpnet: waiting for MASTER_ADDR {host} to resolve "
                f"({clock() - start:.0f} of {wait_s:g} s)")
            said = clock()
        sleep(min(RETRY_S, max(0.0, wait_s - (clock() - start))))


def _say(line: str) -> None:
    """Progress on stderr, as ``ddpnet check`` prints its own (stdout stays the check's)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def main(argv: list[str]) -> int:
    from ddpnet.output import guarded

    def body() -> int:
        if not argv:
            raise ConfigError("usage: python -m ddpnet.k8s.preflight WAIT_S [CHECK OPTIONS]",
                              "render the init container with ddpnet k8s")
        wait_s = parse_int(argv[0], "WAIT_S", minimum=1)
        environ = check_environ(os.environ)
        master = environ.get("MASTER_ADDR", "")
        if not master:
            raise ConfigError("MASTER_ADDR is not set in the init container",
                              "render the job again with ddpnet k8s")
        waited = wait_for(master, float(wait_s))
        _say(f"ddpnet: rank {environ['RANK']}: MASTER_ADDR {master} resolved after "
             f"{waited:.1f} s; running ddpnet check")
        argv_check = [sys.executable, "-m", "ddpnet", "check", *argv[1:]]
        os.execve(sys.executable, argv_check, environ)
        return 0  # not reached

    return guarded(body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

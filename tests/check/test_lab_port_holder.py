"""Issue 42: MASTER_PORT inside the ephemeral range, taken as the source port of an outgoing
connection on rank 0's host. Plain torch's rank 0 is shown first to fail to bind it; then
``check`` names ``port-in-use`` for what it is (a connection, with its process, user and
peer; not "a listener" and not ``ss -ltnp``, which shows nothing) with a fix that fits (a
port outside ip_local_port_range, or the range changed), and that port is shown to work."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from ddpnet.env.jobport import read_port_range
from ddpnet.lab import Lab
from tests.check.labcheck import RankRun, run_check
from tests.check.test_lab_plain import PLAIN
from tests.lab_util import fresh_lab, requires_netns

pytestmark = [requires_netns, pytest.mark.root, pytest.mark.slow]

FAST = ["--join-timeout", "10", "--timeout", "20", "--no-matrix"]
SERVICE = 5201  # a service port on node 1 (outside the ephemeral range)

SERVE = f"""
import socket, sys
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("", {SERVICE})); srv.listen(8); print("ready", flush=True)
conns = []
while True:
    conns.append(srv.accept()[0])
"""

#: an outgoing connection whose source port is argv[2] (the kernel's pick from the range,
#: made deterministic by binding it first, as a client library with a bound port does)
DIAL = f"""
import socket, sys, time
s = socket.socket(); s.bind(("", int(sys.argv[2]))); s.connect((sys.argv[1], {SERVICE}))
print("ready", flush=True); time.sleep(600)
"""


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with fresh_lab("prt", nodes=2) as lab:
        yield lab


def _ready(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "ready", (line, proc.stderr.read() if proc.stderr else "")


def _diag(runs: dict[int, RankRun]) -> str:
    return "\n".join(f"--- node {i} rc={r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}"
                     for i, r in runs.items())


def test_master_port_held_as_an_outgoing_source_port_is_named_for_it(lab: Lab) -> None:
    low, high = read_port_range()  # a lab node shares the host's sysctl defaults
    port = low + 1234
    assert low <= port <= high
    server = lab.popen(1, [sys.executable, "-c", SERVE], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    _ready(server)
    dialer = lab.popen(0, [sys.executable, "-c", DIAL, lab.nodes[1].address, str(port)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _ready(dialer)
        # no listener holds it: what the old hint sent users to shows nothing
        ss = lab.exec(0, ["ss", "-ltnpH", f"sport = :{port}"], timeout=10)
        assert ss.stdout.strip() == "", ss.stdout
        # plain torch first: rank 0's store cannot bind MASTER_PORT
        broken = lab.run([sys.executable, "-c", PLAIN], nodes=[0], timeout=60,
                         env={"MASTER_PORT": str(port), "WORLD_SIZE": "1",
                              "PYTHONWARNINGS": "ignore"})
        assert broken[0].returncode == 1 and "EADDRINUSE" in broken[0].stdout, \
            (broken[0].stdout, broken[0].stderr[-500:])
        runs = run_check(lab, FAST, port=port, timeout=60)
        own = runs[0].json()["causes"][0]
        assert runs[0].returncode == 1 and own["id"] == "port-in-use", _diag(runs)
        detail = own["detail"]
        assert "not by a listener but as the local port of 1 connection(s)" in detail, detail
        # the connection, its process (the dialer's python) and user
        assert (f"ESTABLISHED {lab.nodes[0].address}:{port} -> {lab.nodes[1].address}:"
                f"{SERVICE}, pid ") in detail and "python -c \\nimport socket" in detail, detail
        assert "\n" not in detail
        assert "user root" in detail and "cannot see" not in detail, detail
        assert "ip_local_port_range" in detail and f"{low}-{high}" in detail
        assert own["fix"].startswith(f"export MASTER_PORT=29500 (outside {low}-{high})")
        assert f"ddpnet tune --master-port {port}" in own["fix"]
        assert "ss -ltnp" not in own["fix"] and "ss -ltnp" not in own["see_for_yourself"]
        print(f"time to verdict: {runs[0].seconds:.1f} s")
        # the fix works: the port it proposes, with the connection still there
        fixed = lab.run([sys.executable, "-c", PLAIN], nodes=[0], timeout=60,
                        env={"MASTER_PORT": "29500", "WORLD_SIZE": "1",
                             "PYTHONWARNINGS": "ignore"})
        assert fixed[0].returncode == 0 and "ok 1" in fixed[0].stdout, fixed[0].stderr[-500:]
    finally:
        for proc in (dialer, server):
            proc.kill()
            proc.communicate()

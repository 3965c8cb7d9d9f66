"""A real lab in network namespaces: connectivity, names, isolation and clean removal."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from ddpnet.errors import ConfigError
from ddpnet.lab import Lab
from ddpnet.lab.state import state_path
from tests.lab_util import requires_netns, unique_name

pytestmark = [requires_netns, pytest.mark.root]

MakeLab = Callable[..., Lab]

#: answers every TCP connection on PORT with this node's hostname
SERVER = textwrap.dedent("""
    import socket, sys
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(64)
    print("listening", flush=True)
    while True:
        c, _ = s.accept(); c.sendall(socket.gethostname().encode()); c.close()
""")

#: connects to every host in argv[2:] on port argv[1], prints "peer=answer"
CLIENT = textwrap.dedent("""
    import socket, sys, time
    port = int(sys.argv[1])
    for host in sys.argv[2:]:
        deadline = time.monotonic() + 10
        while True:
            try:
                c = socket.create_connection((host, port), timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline: raise
                time.sleep(0.05)
        print(f"{host}={c.recv(100).decode()}", flush=True); c.close()
""")


def _ns_names() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def _host_links() -> str:
    return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True,
                          timeout=10).stdout


def test_three_nodes_every_pair_pings_and_connects_over_tcp(make_lab: MakeLab) -> None:
    lab = make_lab("lb", nodes=3)
    names = [n.hostname for n in lab.nodes]
    assert [n.address for n in lab.nodes] == ["198.18.0.1", "198.18.0.2", "198.18.0.3"]
    assert lab.master_addr == "198.18.0.1"
    servers = [lab.popen(i, [sys.executable, "-c", SERVER, "29511"], stdout=subprocess.PIPE,
                         text=True) for i in range(3)]
    for srv in servers:
        assert srv.stdout is not None and srv.stdout.readline().strip() == "listening"

    pings = lab.run(["sh", "-c", 'for h in "$@"; do ping -c1 -W2 "$h" >/dev/null || exit 1; '
                     'done; hostname', "sh", *names])
    assert [(r.returncode, r.stdout.strip()) for r in pings] == [(0, h) for h in names], pings

    results = lab.run([sys.executable, "-c", CLIENT, "29511", *names], timeout=30)
    for r in results:
        assert r.returncode == 0, r.stderr
        # every peer answered with its own hostname: names resolve to the right node
        assert r.stdout.split() == [f"{h}={h}" for h in names]


def test_run_exports_cluster_variables_and_exec_adds_none(make_lab: MakeLab) -> None:
    lab = make_lab("lb", nodes=3)
    script = 'echo "$NNODES $NODE_RANK $RANK $WORLD_SIZE $MASTER_ADDR $MASTER_PORT $(hostname)"'
    results = lab.run(["sh", "-c", script], master_port=29533)
    assert [r.stdout.split() for r in results] == [
        ["3", str(i), str(i), "3", "198.18.0.1", "29533", f"{lab.name}-n{i}"] for i in range(3)]
    sub = lab.run(["sh", "-c", script], nodes="1-2", env={"EXTRA": "x"})
    assert [r.stdout.split()[:5] for r in sub] == [["2", "0", "0", "2", "198.18.0.2"],
                                                   ["2", "1", "1", "2", "198.18.0.2"]]
    cp = lab.exec(2, ["sh", "-c", 'echo "${NODE_RANK-unset} $K $(hostname)"'], env={"K": "v"})
    assert cp.returncode == 0 and cp.stdout.split() == ["unset", "v", f"{lab.name}-n2"]
    # the node's /sys shows only its own interfaces
    cp = lab.exec(0, ["ls", "/sys/class/net"])
    assert sorted(cp.stdout.split()) == ["eth0", "lo"]


def test_run_timeout_kills_and_reports_124(make_lab: MakeLab) -> None:
    lab = make_lab("lb", nodes=2)
    results = lab.run(["sh", "-c", 'if [ "$NODE_RANK" = 1 ]; then sleep 30; fi; echo done'],
                      timeout=1.5)
    assert [r.returncode for r in results] == [0, 124]
    assert results[1].timed_out and "timeout" in results[1].stderr
    with pytest.raises(subprocess.TimeoutExpired):
        lab.exec(0, ["sleep", "30"], timeout=0.5)


def test_up_is_idempotent_and_another_shape_is_refused(make_lab: MakeLab) -> None:
    lab = make_lab("lb", nodes=2)
    again = Lab(name=lab.name, nodes=2)
    assert again.up() is False                     # same shape: no-op
    with pytest.raises(ConfigError, match="another shape") as info:
        Lab(name=lab.name, nodes=3).up()
    assert "lab down" in info.value.hint
    with pytest.raises(ConfigError, match="another shape"), Lab(name=lab.name, nodes=3):
        pass
    assert lab.is_up()                             # the refused attempt left the lab alone
    assert lab.exec(1, ["ping", "-c1", "-W2", lab.master_addr]).returncode == 0


def test_down_leaves_no_trace_even_with_processes_and_a_half_built_lab() -> None:
    name = unique_name("lb")
    before_links = _host_links()
    lab = Lab(name=name, nodes=3, rate="500mbit")
    with lab:
        lab.popen(1, ["sleep", "300"])
        # a process started outside the API, inside the node, is killed too
        subprocess.Popen(["ip", "netns", "exec", f"{name}-n2", "sleep", "300"],
                         start_new_session=True)
        assert {f"{name}-sw", f"{name}-n0", f"{name}-n1", f"{name}-n2"} <= _ns_names()
        assert Path(f"/etc/netns/{name}-n0/hosts").is_file()
        assert state_path(name).is_file()
    assert not {ns for ns in _ns_names() if ns.startswith(name + "-")}
    assert not Path(f"/etc/netns/{name}-n0").exists()
    assert not state_path(name).exists()
    assert _host_links() == before_links           # the host's namespace never changed

    # half-built: only some namespaces exist, no state file; down still removes them
    subprocess.run(["ip", "netns", "add", f"{name}-sw"], check=True, timeout=10)
    subprocess.run(["ip", "netns", "add", f"{name}-n0"], check=True, timeout=10)
    Path(f"/etc/netns/{name}-n0").mkdir(parents=True, exist_ok=True)
    Lab(name=name, nodes=3).down()
    assert not {ns for ns in _ns_names() if ns.startswith(name + "-")}
    assert not Path(f"/etc/netns/{name}-n0").exists()


def test_body_error_still_tears_down() -> None:
    name = unique_name("lb")
    with pytest.raises(RuntimeError, match="boom"), Lab(name=name, nodes=2):
        raise RuntimeError("boom")
    assert not {ns for ns in _ns_names() if ns.startswith(name + "-")}


def test_two_labs_coexist_with_the_same_subnet(make_lab: MakeLab) -> None:
    a = make_lab("lb", nodes=2)
    b = make_lab("lb", nodes=2)
    # same addresses, separate switches: each lab reaches only its own nodes
    out_a = a.exec(1, ["sh", "-c", "ping -c1 -W2 198.18.0.1 >/dev/null && hostname"])
    out_b = b.exec(1, ["sh", "-c", "ping -c1 -W2 198.18.0.1 >/dev/null && hostname"])
    assert out_a.stdout.strip() == f"{a.name}-n1" and out_b.stdout.strip() == f"{b.name}-n1"
    a.down()
    assert b.exec(0, ["ping", "-c1", "-W2", "198.18.0.2"]).returncode == 0


ALL_REDUCE = textwrap.dedent("""
    import os, datetime, torch, torch.distributed as dist
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    print(os.uname().nodename, dist.get_rank(), dist.get_world_size(), int(t.item()))
    dist.destroy_process_group()
""")


@pytest.mark.slow
def test_gloo_all_reduce_across_lab_nodes_with_plain_env(make_lab: MakeLab) -> None:
    pytest.importorskip("torch")
    lab = make_lab("lb", nodes=2)
    results = lab.run([sys.executable, "-c", ALL_REDUCE], master_port=29517, timeout=240)
    for r in results:
        assert r.returncode == 0, r.stderr[-2000:]
    # each node is its own host to gloo (its hostname resolves to its lab address through
    # the node's /etc/hosts), and every rank sees 1 + 2
    assert [r.stdout.split() for r in results] == [
        [f"{lab.name}-n{i}", str(i), "2", "3"] for i in range(2)]


def test_node_command_variants_give_the_node_view(make_lab: MakeLab) -> None:
    lab = make_lab("lb", nodes=2)
    script = ('hostname; ls /sys/class/net | tr "\\n" " "; echo; ls /sys/fs/cgroup | wc -l; '
              f"getent hosts {lab.nodes[0].hostname}; cat /etc/hostname")
    for keep in (False, True):
        cp = subprocess.run(lab.node_command(1, ["sh", "-c", script], keep_cgroup=keep),
                            capture_output=True, text=True, timeout=30)
        assert cp.returncode == 0, cp.stderr
        lines = cp.stdout.splitlines()
        assert lines[0] == lines[4] == f"{lab.name}-n1"
        assert lines[1].split() == ["eth0", "lo"]
        assert lines[3].split() == ["198.18.0.1", f"{lab.name}-n0"]
        if keep:    # the daemon variant keeps the cgroup tree (slurmd needs it)
            assert int(lines[2]) > 0

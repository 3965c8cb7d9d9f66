"""``launch --hostfile`` planned without SSH: node ranks in file order, slots as processes per
node, rank 0 on the first host, every host's command line (``--dry-run --json``)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from ddpnet.launch.command import Host, Target
from ddpnet.launch.hostlaunch import HostSettings, plan
from ddpnet.launch.ssh import HostfileOptions, SshOptions
from tests.conftest import RunCli


def _settings(**kw: object) -> HostSettings:
    base = {"target": Target("train.py", ("--lr", "0.1")), "nproc": None, "master_addr": None,
            "master_port": 29555, "rdzv": "static", "max_restarts": 0, "iface_env": {}}
    return HostSettings(**{**base, **kw})  # type: ignore[arg-type]


def test_plan_gives_each_host_its_rank_slots_and_command() -> None:
    hosts = (Host("a", 2), Host("b", 3))
    hf = HostfileOptions("hosts", SshOptions(user="u", options=("Port=2222",)))
    launch = plan(hf, hosts, _settings(), {"PYTHONPATH": "/src", "HOME": "/h"}, "/work",
                  "/opt/py")
    assert [n["ranks"] for n in launch.nodes] == [[0, 1], [2, 3, 4]]
    assert dict(launch.env) == {"PYTHONPATH": "/src"}
    second = launch.nodes[1]
    assert second["host"] == "b" and second["node_rank"] == 1
    ssh = second["argv"]
    assert ssh[:2] == ["ssh", "-T"] and ssh[-2] == "b" and "Port=2222" in ssh
    remote = shlex.split(ssh[-1])
    assert remote[:3] == ["cd", "/work", "&&"]
    torchrun = remote[remote.index("--") + 1:]
    assert torchrun[:3] == ["/opt/py", "-m", "torch.distributed.run"]
    for flag, value in (("--nnodes", "2"), ("--nproc-per-node", "3"), ("--node-rank", "1"),
                        ("--master-addr", "a"), ("--master-port", "29555")):
        assert torchrun[torchrun.index(flag) + 1] == value
    assert torchrun[-3:] == ["train.py", "--lr", "0.1"]
    assert "PYTHONPATH=/src" in remote and "HOME=/h" not in remote
    assert remote[remote.index("--") - 3:remote.index("--")] == ["/opt/py", "-m",
                                                                 "ddpnet.launch.remote"]


def test_every_host_gets_the_watch_variables_over_the_users() -> None:
    """The composed PYTHONPATH (the boot dir first) wins over the user's forwarded one."""
    watch = {"DDPNET_WATCH_ATTACH": "1", "PYTHONPATH": "/boot:/src"}
    launch = plan(HostfileOptions("h"), (Host("a", 1), Host("b", 1)),
                  _settings(watch_env=watch), {"PYTHONPATH": "/src"}, "/work", "/opt/py")
    for node in launch.nodes:
        remote = shlex.split(node["argv"][-1])
        assert "DDPNET_WATCH_ATTACH=1" in remote and "PYTHONPATH=/boot:/src" in remote
        assert "PYTHONPATH=/src" not in remote


def test_flags_override_slots_and_master() -> None:
    launch = plan(HostfileOptions("h"), (Host("a", 2), Host("b", 2)),
                  _settings(nproc=1, master_addr="10.0.0.1",
                            iface_env={"GLOO_SOCKET_IFNAME": "ib0"}), {}, "/", "py")
    assert [n["ranks"] for n in launch.nodes] == [[0], [1]]
    line = launch.nodes[1]["argv"][-1]
    assert "--master-addr 10.0.0.1" in line and "GLOO_SOCKET_IFNAME=ib0" in line


def test_dry_run_json_over_the_cli(run_cli: RunCli, tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("n0 slots=2\nn1 slots=2\n")
    proc = run_cli("launch", "--dry-run", "--json", "--hostfile", str(hosts), "--ssh-identity",
                   "/k", "--", "train.py")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["engine"] == "ssh" and out["sources"] == {"hostfile": str(hosts)}
    assert [n["host"] for n in out["nodes"]] == ["n0", "n1"]
    assert [n["ranks"] for n in out["nodes"]] == [[0, 1], [2, 3]]
    assert "-i" in out["nodes"][0]["argv"]

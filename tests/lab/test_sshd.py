"""``ddpnet.lab.sshd``: a real OpenSSH server per lab node, on the node's address only, with
keys and known_hosts in the caller's directory; stop leaves no server and no files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ddpnet.lab import Lab
from ddpnet.lab import sshd as labsshd
from ddpnet.lab.system import pids_in
from ddpnet.lab.topology import LabNode
from tests.lab_util import requires_netns

NODE = LabNode(index=1, name="x-n1", namespace="x-n1", hostname="x-n1", ifname="eth0",
               address="198.18.0.2", port="p1")


def test_config_listens_on_the_node_and_keeps_files_in_the_directory() -> None:
    text = labsshd.sshd_config(NODE, Path("/t"), Path("/t/authorized_keys"))
    lines = set(text.splitlines())
    assert {"ListenAddress 198.18.0.2", "HostKey /t/x-n1/host_key", "PidFile /t/x-n1/sshd.pid",
            "AuthorizedKeysFile /t/authorized_keys", "UsePAM no", "StrictModes no",
            "PasswordAuthentication no"} <= lines
    assert "/etc/ssh" not in text and "/root" not in text
    assert labsshd.known_hosts_line(NODE, "ssh-ed25519 AAAAkey comment") == \
        "198.18.0.2,x-n1 ssh-ed25519 AAAAkey"


@requires_netns
@pytest.mark.skipif(not Path(labsshd.SSHD).exists(), reason="needs openssh-server")
def test_real_sshd_per_node(make_lab: Callable[..., Lab], tmp_path: Path) -> None:
    lab = make_lab("lsd", nodes=2)
    servers = labsshd.start(lab, tmp_path / "ssh", without_key=[0])
    try:
        ssh = ["ssh", *servers.ssh_args(), "-o", "ConnectTimeout=5"]
        ok = lab.exec(0, [*ssh, lab.nodes[1].address, "hostname"], timeout=60)
        assert ok.returncode == 0, ok.stderr
        assert ok.stdout.strip() == lab.nodes[1].hostname  # the command ran in node 1
        denied = lab.exec(1, [*ssh, lab.nodes[0].hostname, "true"], timeout=60)
        assert denied.returncode == 255 and "Permission denied" in denied.stderr
        # the servers listen on the lab addresses only, not on the node's loopback
        local = lab.exec(1, [*ssh, "127.0.0.1", "true"], timeout=60)
        assert local.returncode == 255 and "Connection refused" in local.stderr
    finally:
        labsshd.stop(servers)
    assert not (tmp_path / "ssh").exists()
    assert not [pid for pid in pids_in([n.namespace for n in lab.nodes])
                if b"sshd" in _cmdline(pid)]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""

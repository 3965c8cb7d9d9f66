"""tests/zygote.py's lab nodes: a zygote child in a node sees what ``lab.exec`` gives a
process there (network, /sys, /etc/netns files, hostname), and ``lab.down`` ends it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddpnet.lab import Lab
from tests import zygote
from tests.lab_util import fresh_lab, requires_netns

pytestmark = [requires_netns,
              pytest.mark.skipif(not zygote.enabled(), reason="DDPNET_TEST_ZYGOTE=0")]

PROBE = textwrap.dedent("""\
    import json, os, socket, subprocess, sys, warnings
    with open("/etc/hosts") as f:
        hosts = f.read()
    print(json.dumps({
        "hostname": socket.gethostname(),
        "hosts": hosts,
        "sys_class_net": sorted(os.listdir("/sys/class/net")),
        "netns": os.readlink("/proc/self/ns/net"),
        "addresses": subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True,
                                    text=True).stdout.split("\\n"),
        "child_hostname": subprocess.run(["hostname"], capture_output=True,
                                         text=True).stdout.strip(),
        "ignores_user_warnings": any(f[0] == "ignore" and f[2] is UserWarning
                                     for f in warnings.filters),
    }))
""")


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with fresh_lab("zy", nodes=2) as lab:
        yield lab


def _probe(tmp_path: Path) -> str:
    path = tmp_path / "probe.py"
    path.write_text(PROBE)
    return str(path)


@pytest.mark.parametrize("node", [0, 1])
def test_a_child_in_a_node_sees_what_ip_netns_exec_gives_it(lab: Lab, tmp_path: Path,
                                                            node: int) -> None:
    env = {"PYTHONWARNINGS": "ignore::UserWarning"}
    plain = lab.exec(node, [sys.executable, _probe(tmp_path)], env=env, timeout=60)
    assert plain.returncode == 0, plain.stderr
    proc = zygote.node_popen(lab, node, [_probe(tmp_path)], env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    forked, execed = json.loads(out), json.loads(plain.stdout)
    assert forked == execed
    assert forked["hostname"] == lab.nodes[node].hostname
    assert forked["ignores_user_warnings"] and forked["netns"] != os.readlink("/proc/self/ns/net")
    assert socket.gethostname() != lab.nodes[node].hostname  # the test's own is untouched


def test_a_module_runs_as_python_m_runs_it(lab: Lab) -> None:
    proc = zygote.node_popen(lab, 1, ["-m", "ddpnet", "--version"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=60)
    plain = lab.exec(1, [sys.executable, "-m", "ddpnet", "--version"], timeout=60)
    assert (proc.returncode, out) == (plain.returncode, plain.stdout) and out.strip(), err


def test_a_node_that_does_not_exist_fails_the_child_with_why(lab: Lab) -> None:
    class Gone:
        namespace, hostname = "ddpnet-no-such-node", "nowhere"

    class NoLab:
        def node(self, index: int) -> Gone:
            return Gone()

    proc = zygote.node_popen(NoLab(), 0, ["-m", "ddpnet", "--version"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and out == "" and "ddpnet-no-such-node" in err, err


def test_lab_down_ends_a_child_left_in_a_node(tmp_path: Path) -> None:
    script = tmp_path / "sleep.py"
    script.write_text("import time\nprint('up', flush=True)\ntime.sleep(300)\n")
    with fresh_lab("zd", nodes=1) as own:
        proc = zygote.node_popen(own, 0, [str(script)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline() == "up\n"
    assert proc.wait(timeout=30) == -15  # SIGTERM first (system.kill_namespaces)

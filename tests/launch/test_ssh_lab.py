"""``--hostfile`` over real SSH: an OpenSSH server in each lab node (its own host key, keys
and known_hosts in the test's temporary directory), the launcher in node 0.

A healthy lab launches a gloo all_reduce and passes ``check``; a node without the key, one
with a changed or unknown host key and an address nobody answers are each named per host
within seconds; Ctrl-C and SIGTERM to the launcher leave no process on any node."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ddpnet.lab import Lab
from ddpnet.lab import sshd as labsshd
from ddpnet.lab.system import pids_in
from tests.lab_util import fresh_lab, requires_netns

pytestmark = [requires_netns,
              pytest.mark.skipif(not Path(labsshd.SSHD).exists(),
                                 reason="needs openssh-server (make system-deps)")]
HERE = Path(__file__).parent
ALLREDUCE = str(HERE / "allreduce_script.py")
SLEEPER = str(HERE / "sleep_script.py")
DDPNET = [sys.executable, "-m", "ddpnet"]


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with fresh_lab("lsh", nodes=3) as lab:
        yield lab


@pytest.fixture
def sshd(lab: Lab, tmp_path: Path) -> Iterator[labsshd.SshdSet]:
    servers = labsshd.start(lab, tmp_path / "ssh")
    yield servers
    labsshd.stop(servers)


def _hostfile(path: Path, lines: list[str]) -> str:
    path.write_text("# written by the test\n" + "\n".join(lines) + "\n")
    return str(path)


def _names(lab: Lab) -> list[str]:
    return [n.hostname for n in lab.nodes]


def _left_behind(lab: Lab, marker: str) -> list[str]:
    """Command lines in the lab's nodes that carry ``marker``."""
    found = []
    for pid in pids_in([n.namespace for n in lab.nodes]):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd:
            found.append(f"{pid}: {cmd[:200]}")
    return found


def test_launch_hostfile_runs_all_reduce_on_every_host(lab: Lab, sshd: labsshd.SshdSet,
                                                       tmp_path: Path) -> None:
    names = _names(lab)
    hf = _hostfile(tmp_path / "hosts", [f"{names[0]} slots=1", f"{names[1]}:2", names[2]])
    p = lab.exec(0, [*DDPNET, "launch", "--hostfile", hf, *sshd.client_flags(),
                     "--master-port", "29671", "--", ALLREDUCE], timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    objs = sorted(((json.loads(m.group(2)), m.group(1)) for m in
                   re.finditer(r"^\[(\S+)\] (\{.*\})$", p.stdout, re.MULTILINE)),
                  key=lambda o: int(o[0]["rank"]))
    assert [o["rank"] for o, _ in objs] == [0, 1, 2, 3]
    assert {o["world_size"] for o, _ in objs} == {4}
    assert {o["sum"] for o, _ in objs} == {10.0}
    # rank 0 on the first host (MASTER_ADDR), ranks 1-2 on the two slots of the second
    assert [host for _, host in objs] == [names[0], names[1], names[1], names[2]]
    assert {o["master"] for o, _ in objs} == {f"{names[0]}:29671"}


def test_check_hostfile_passes_on_a_healthy_lab(lab: Lab, sshd: labsshd.SshdSet,
                                                tmp_path: Path) -> None:
    hf = _hostfile(tmp_path / "hosts", [f"{n} slots=4" for n in _names(lab)])
    p = lab.exec(0, [*DDPNET, "check", "--json", "--no-matrix", "--hostfile", hf,
                     *sshd.client_flags()], env={"MASTER_PORT": "29672"}, timeout=240)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    report = json.loads(p.stdout)
    assert report["verdict"] == "pass"
    assert report["world_size"] == 3


def _broken(lab: Lab, tmp_path: Path, **faults: Any) -> labsshd.SshdSet:
    return labsshd.start(lab, tmp_path / "ssh", **faults)


def test_preflight_names_every_broken_host_in_seconds(lab: Lab, tmp_path: Path) -> None:
    """Node 1 lacks the key, node 2's host key changed, and one address answers nobody."""
    servers = _broken(lab, tmp_path, without_key=[1], wrong_host_key=[2])
    try:
        names = _names(lab)
        nobody = lab.nodes[2].address.rsplit(".", 1)[0] + ".250"
        hf = _hostfile(tmp_path / "hosts", [*names, nobody])
        started = time.monotonic()
        p = lab.exec(0, [*DDPNET, "check", "--json", "--hostfile", hf,
                         *servers.client_flags()], timeout=120)
        took = time.monotonic() - started
    finally:
        labsshd.stop(servers)
    assert p.returncode == 1, p.stderr
    error = json.loads(p.stdout)["error"]
    assert error["id"] == "ssh-auth-failed"
    assert f"3 of 4 host(s): {names[1]}: ssh-auth-failed" in error["message"]
    assert f"ddpnet: {names[1]}: ssh-auth-failed: " in p.stderr
    assert f"ddpnet: {names[2]}: ssh-host-key-changed: " in p.stderr
    assert f"ddpnet: {nobody}: ssh-unreachable: " in p.stderr
    assert names[0] + ":" not in p.stderr  # the healthy host is not blamed
    assert "Traceback" not in p.stderr
    assert took < 30, f"the preflight took {took:.1f} s"


def test_unknown_host_key_is_named_by_launch(lab: Lab, tmp_path: Path) -> None:
    servers = _broken(lab, tmp_path, unknown_host_key=[1])
    try:
        hf = _hostfile(tmp_path / "hosts", _names(lab)[:2])
        p = lab.exec(0, [*DDPNET, "launch", "--hostfile", hf, *servers.client_flags(), "--",
                         ALLREDUCE], timeout=120)
    finally:
        labsshd.stop(servers)
    assert p.returncode == 1
    name = lab.nodes[1].hostname
    assert f"ddpnet: error: ssh preflight failed on 1 of 2 host(s): {name}: " \
           "ssh-host-key-unknown" in p.stderr
    assert "hint: add the host's key first" in p.stderr


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_stopping_the_launcher_leaves_no_remote_process(
        lab: Lab, sshd: labsshd.SshdSet, tmp_path: Path, signum: int, code: int) -> None:
    hf = _hostfile(tmp_path / "hosts", [f"{n} slots=1" for n in _names(lab)])
    launcher = lab.popen(0, [*DDPNET, "launch", "--hostfile", hf, *sshd.client_flags(),
                             "--master-port", str(29673 + code % 2), "--", SLEEPER],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = _read_until(launcher, lambda seen: sum("] ready" in s for s in seen) == 3)
        assert len(_left_behind(lab, SLEEPER)) >= 3
        launcher.send_signal(signum)
        assert launcher.wait(60) == code
    finally:
        if launcher.poll() is None:
            launcher.kill()
    end = time.monotonic() + 20
    while _left_behind(lab, SLEEPER) and time.monotonic() < end:
        time.sleep(0.2)
    assert not _left_behind(lab, SLEEPER), ready
    assert not _left_behind(lab, "ddpnet.launch.remote")


def _read_until(proc: subprocess.Popen[str], done: Any, timeout: float = 180) -> list[str]:
    """stdout lines of ``proc`` until ``done(lines)`` (fails at ``timeout``)."""
    import threading

    seen: list[str] = []
    finished = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            if done(seen):
                finished.set()
                return

    threading.Thread(target=read, daemon=True).start()
    assert finished.wait(timeout), f"not ready: {seen!r}"
    return seen


def test_a_failing_host_stops_the_others(lab: Lab, sshd: labsshd.SshdSet,
                                         tmp_path: Path) -> None:
    """Rank 1 fails at once, rank 0 would wait forever: the launch ends with the failure
    within the grace period, and rank 0's host is cleaned up too."""
    script = tmp_path / "fail_one.py"
    script.write_text("import os, sys, time\n"
                      "if os.environ['RANK'] == '1':\n"
                      "    sys.exit(3)\n"
                      "time.sleep(300)\n")
    hf = _hostfile(tmp_path / "hosts", _names(lab)[:2])
    started = time.monotonic()
    p = lab.exec(0, [*DDPNET, "launch", "--hostfile", hf, *sshd.client_flags(),
                     "--master-port", "29676", "--", str(script)], timeout=180)
    took = time.monotonic() - started
    assert p.returncode == 1, p.stderr[-2000:]  # torchrun's status for a failed worker
    assert f"ddpnet: {_names(lab)[1]}: exit 1" in p.stderr
    assert took < 120, took
    assert not _left_behind(lab, str(script))


@pytest.mark.parametrize(("python", "cause", "words"), [
    ("/nonexistent/bin/python3", "ssh-command-not-found", "No such file or directory"),
    ("python-not-on-path", "ssh-command-not-found", "No such file or directory"),
    ("/usr/bin/python3", "ssh-software-differs", "torch None (here "),
])
def test_the_remote_python_is_checked_first(lab: Lab, sshd: labsshd.SshdSet, tmp_path: Path,
                                            python: str, cause: str, words: str) -> None:
    """Another Python on the hosts (absent, not on the non-interactive PATH, or without
    torch) is named before any rank starts."""
    hf = _hostfile(tmp_path / "hosts", _names(lab)[1:])
    p = lab.exec(0, [*DDPNET, "launch", "--hostfile", hf, *sshd.client_flags(),
                     "--remote-python", python, "--", ALLREDUCE], timeout=120)
    assert p.returncode == 1, p.stderr
    for name in _names(lab)[1:]:
        assert f"ddpnet: {name}: {cause}: " in p.stderr, p.stderr
    assert words in p.stderr

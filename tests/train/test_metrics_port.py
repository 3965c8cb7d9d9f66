"""``ddpnet train --metrics-port``: rank 0's watch hub serves the job's metrics while it trains
(two real local ranks, real scrapes, promtool), and a port in use stops it with one line."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ddpnet.net.ports import listen_socket
from tests.conftest import clean_environ
from tests.train.helpers import train_cli

pytestmark = pytest.mark.slow  # two ranks with torch each, per test

ARGS = ("--local", "2", "--model", "mlp", "--width", "32", "--depth", "2", "--samples",
        "100000", "--batch-size", "8", "--log-every", "100000", "--device", "cpu")


def scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            return str(answer.read().decode())
    except OSError:
        return ""


def counted(text: str, rank: int) -> bool:
    """Whether ``rank``'s step histogram has counted a step."""
    return any(line.startswith("ddpnet_step_seconds_count{") and f'rank="{rank}"' in line
               and not line.endswith(" 0.0") for line in text.splitlines())


def test_the_job_is_scraped_while_it_trains_and_promtool_finds_it_clean(
        tmp_path: Path) -> None:
    probe = listen_socket("127.0.0.1", 0)
    port = probe.getsockname()[1]
    probe.close()
    log = tmp_path / "stderr"
    with log.open("w") as stderr:  # not a pipe: the hub (its own session) holds it open
        proc = subprocess.Popen([sys.executable, "-m", "ddpnet", "train", *ARGS,
                                 "--step-sleep", "0.02", "--metrics-port", str(port)],
                                env=clean_environ({"DDPNET_METRICS_PROBE_S": "0"}),
                                stdout=subprocess.DEVNULL, stderr=stderr)
    text = ""
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            text = scrape(port)
            if all(counted(text, rank) for rank in range(2)):
                break
            time.sleep(0.5)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        # the ranks' end is a verdict: the hub stays for one scrape to see it, then leaves
        gone = time.monotonic() + 60
        while scrape(port) and time.monotonic() < gone:
            time.sleep(0.5)
    err = log.read_text()
    for rank in range(2):
        assert counted(text, rank), (text[-2000:], err[-2000:])
    assert "ddpnet_job_info{" in text and 'world_size="2"' in text
    if shutil.which("promtool"):
        out = subprocess.run(["promtool", "check", "metrics"], input=text, text=True,
                             capture_output=True, timeout=60)
        assert out.returncode == 0 and not (out.stdout + out.stderr).strip(), out


@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_metrics_port_in_use_is_one_line_a_hint_and_exit_2(how: str) -> None:
    held = listen_socket("127.0.0.1", 0)
    port = held.getsockname()[1]
    try:
        if how == "flag":
            proc = train_cli(*ARGS, "--max-steps", "2", "--metrics-port", str(port))
        else:
            proc = train_cli(*ARGS, "--max-steps", "2", env={"DDPNET_METRICS_PORT": str(port)})
    finally:
        held.close()
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert errors and f"metrics port {port}: 127.0.0.1:{port} is already in use" in errors[0]
    assert "Traceback" not in proc.stderr
    assert any(line.strip().startswith("hint:") for line in proc.stderr.splitlines())

"""``ddpnet env`` shows the interface choice (table and the ``network`` JSON key), torch-free."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import RunCli, clean_environ


def test_json_has_network(run_cli: RunCli) -> None:
    proc = run_cli("env", "--json")
    assert proc.returncode == 0, proc.stderr
    net = json.loads(proc.stdout)["network"]
    assert net["interface"] == "lo" and net["master"] == "127.0.0.1"
    gloo = net["variables"]["GLOO_SOCKET_IFNAME"]
    assert gloo == {"value": "lo", "source": "auto", "cause": None, "hint": None,
                    "reason": "the whole job is on this host (MASTER_ADDR 127.0.0.1 is "
                              "loopback)"}


def test_table_shows_bad_user_value_with_fix(run_cli: RunCli) -> None:
    proc = run_cli("env", env={"GLOO_SOCKET_IFNAME": "^lo", "NCCL_SOCKET_IFNAME": "nt-nope"})
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert "ifname-syntax" in out and "ifname-missing" in out
    assert "hint: unset GLOO_SOCKET_IFNAME" in out
    assert "ddpnet.init() sets: TP_SOCKET_IFNAME=lo" in out


def test_env_stays_torch_free() -> None:
    code = ("import sys\nfrom ddpnet.cli.main import main\ntry:\n    main(['env', '--json'])\n"
            "except SystemExit:\n    pass\nprint('torch' in sys.modules, file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=clean_environ(), timeout=60)
    assert proc.stderr.strip().splitlines()[-1] == "False", proc.stderr

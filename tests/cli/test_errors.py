"""One error path for every command: under ``--json`` a user error prints the JSON error
object on stdout (never nothing), and one line plus ``hint:`` on stderr, no traceback."""

from __future__ import annotations

import json
import math

import pytest

from ddpnet.errors import CheckFailed, ConfigError, RendezvousError, RequirementError
from ddpnet.output import dumps, error_object
from tests.conftest import RunCli, assert_user_error

#: (argv, environment, exit code, error id)
BAD = [
    (["env", "--json"], {"WORLD_SIZE": "abc", "RANK": "0"}, 2, "config"),
    (["env", "--json"], {"RANK": "-1", "WORLD_SIZE": "2"}, 2, "config"),
    (["env", "--json"], {"SLURM_JOB_ID": "1", "SLURM_NODELIST": "n[3-1]", "SLURM_PROCID": "0",
                         "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0"}, 2, "config"),
    (["check", "--json", "--local", "0"], {}, 2, "usage"),
    (["bench", "--json", "-b", "nonsense", "--local", "2"], {}, 2, "config"),
    (["bench", "--json", "--local", "100000"], {}, 2, "config"),
    (["train", "--json", "--epochs", "-1"], {}, 2, "config"),
    (["doctor", "--json", "--cluster-subnet", "nonsense"], {}, 2, "config"),
    (["monitor", "--json", "--iface", "nosuch0", "--duration", "1"], {}, 2, "config"),
    (["sbatch", "--json", "--nodes", "0", "--", "x.py"], {}, 2, "config"),
    (["tune", "--json", "--iface", "nosuch0"], {}, 2, "config"),
    (["bench", "--no-such-flag", "--json"], {}, 2, "usage"),
]


@pytest.mark.parametrize(("argv", "env", "code", "error_id"), BAD,
                         ids=[" ".join(a) + " " + ",".join(e) for a, e, _, _ in BAD])
def test_json_error_object_on_stdout(run_cli: RunCli, argv: list[str], env: dict[str, str],
                                     code: int, error_id: str) -> None:
    proc = run_cli(*argv, env=env, timeout=120)
    assert_user_error(proc, code)
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout  # one object, one line when piped (JSON Lines)
    error = json.loads(lines[0])["error"]
    assert error["id"] == error_id and error["exit_code"] == code
    assert error["message"] and error["hint"]
    assert error["message"] in proc.stderr


def test_without_json_stdout_stays_empty(run_cli: RunCli) -> None:
    proc = run_cli("env", env={"WORLD_SIZE": "abc", "RANK": "0"})
    assert_user_error(proc, 2)
    assert proc.stdout == ""


def test_json_after_double_dash_belongs_to_the_script(run_cli: RunCli) -> None:
    proc = run_cli("sbatch", "--nodes", "0", "--", "x.py", "--json")
    assert_user_error(proc, 2)
    assert proc.stdout == ""


@pytest.mark.parametrize(("exc", "error_id", "code"), [
    (ConfigError("m", "h"), "config", 2),
    (RequirementError("m", "h"), "missing-requirement", 3),
    (CheckFailed("m", "h"), "check-failed", 1),
    (RendezvousError("master-port-filtered", "m", "h"), "master-port-filtered", 1),
])
def test_error_ids(exc: ConfigError, error_id: str, code: int) -> None:
    assert error_object(exc.error_id, exc.message, exc.hint, int(exc.exit_code)) == {
        "error": {"id": error_id, "message": "m", "hint": "h", "exit_code": code}}


def test_json_is_strict_and_says_what_it_replaced() -> None:
    text = dumps({"busbw": [1.0, math.nan], "ratio": math.inf, "ok": True}, pretty=False)
    data = json.loads(text)  # python's json accepts NaN; check the text has none
    assert "NaN" not in text and "Infinity" not in text
    assert data["busbw"] == [1.0, None] and data["ratio"] is None
    assert data["json_notes"] == ["$.busbw[1] was nan (not valid JSON): shown as null",
                                  "$.ratio was inf (not valid JSON): shown as null"]
    assert "json_notes" not in json.loads(dumps({"a": 1.5}, pretty=True))

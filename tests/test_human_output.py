"""Every command's human output is whole at 80 columns, at 200 and in a pipe (``output``).

Each command runs once for real through the CLI (``main(argv)``), in a child process whose
``output.finish`` renders the very result the command hands it: at 80 and 200 columns, into
a real pipe (no terminal: how SLURM logs, CI and ``| tee`` get it), and as the JSON
``--json`` prints. Then every value and fix of that JSON a reader looks for must be in each
text whole: a command or fix on one line, a name, address or version unbroken, prose word by
word; and no ``…`` anywhere (rich cut ``127.0.…`` and ``2.13.…`` in a pipe, and broke
``net.core.rmem_max=16777216`` across lines).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ddpnet.local import local_environ
from ddpnet.net.ports import free_port
from tests.conftest import clean_environ
from tests.lab_util import requires_netns

#: the child: ``output.finish`` replaced by one that renders what the command hands it
HARNESS = textwrap.dedent("""
    import io, json, os, sys, threading
    from ddpnet import output

    def pipe(result, human):
        r, w = os.pipe()
        got = []
        reader = threading.Thread(target=lambda: got.append(os.fdopen(r).read()))
        reader.start()
        with os.fdopen(w, "w") as stream:
            human(result, output.console(stream))
        reader.join()
        return got[0]

    def finish(result, as_json, human=None):
        bundle = {"json": json.loads(output.dumps(result.to_dict(), pretty=False))}
        for width in (80, 200):
            buf = io.StringIO()
            human(result, output.console(buf, width=width))
            bundle[str(width)] = buf.getvalue()
        bundle["pipe"] = pipe(result, human)
        with open(sys.argv[1], "w") as fh:
            json.dump(bundle, fh)
        return int(result.exit_code)

    output.finish = finish
    from ddpnet.cli.main import main
    main(json.loads(sys.argv[2]))
""")

#: how a value must appear: verbatim within one line / verbatim / each word unbroken
LINE, WHOLE, WORDS = "line", "whole", "words"
Values = list[tuple[str, str]]
RENDERS = ("80", "200", "pipe")


def _bundle(tmp: Path, argv: list[str], env: dict[str, str] | None = None,
            peer: dict[str, str] | None = None, timeout: float = 240) -> dict[str, Any]:
    """Run ``ddpnet ARGV`` in the harness (with ``peer``: rank 1 beside it, as --local
    would start it) and return its renders and JSON."""
    out = tmp / f"{argv[0]}.json"
    base = clean_environ(env)
    base.pop("COLUMNS", None)  # a pipe gets rich's own width, as in a job's log
    others = []
    if peer is not None:
        others.append(subprocess.Popen([sys.executable, "-m", "ddpnet", *argv], env=peer,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                       text=True))
    try:
        proc = subprocess.run([sys.executable, "-c", HARNESS, str(out), json.dumps(argv)],
                              env=base, capture_output=True, text=True, timeout=timeout)
        for other in others:
            other.wait(timeout=timeout)
    finally:
        for other in others:
            other.kill()
    assert out.exists(), (argv, proc.returncode, proc.stderr[-3000:])
    bundle: dict[str, Any] = json.loads(out.read_text())
    bundle["stdout"] = proc.stdout  # what the command printed before it finished
    return bundle


def _two_ranks() -> tuple[dict[str, str], dict[str, str]]:
    """Rank 0's and rank 1's environments as ``--local 2`` makes them."""
    port = free_port()
    base = clean_environ()
    return local_environ(base, 0, 2, port), local_environ(base, 1, 2, port)


def _missing(text: str, values: Values) -> list[str]:
    lines = text.splitlines()
    gone = []
    for value, how in values:
        if how == LINE:
            ok = any(value in line for line in lines)
        elif how == WORDS:
            ok = all(word in text for word in value.split())
        else:
            ok = value in text
        if not ok:
            gone.append(f"{how}: {value!r}")
    return gone


def _assert_whole(bundle: dict[str, Any], values: Values) -> None:
    assert values, "nothing to look for"
    for render in RENDERS:
        text = bundle[render]
        assert "…" not in text, (render, text)
        gone = _missing(text, values)
        assert not gone, f"{render}: " + "; ".join(gone) + "\n" + text


def _strings(*items: Any, how: str = WHOLE) -> Values:
    return [(str(v), how) for v in items if v not in (None, "")]


# ---------------------------------------------------------------- what each JSON shows

def env_values(d: dict[str, Any]) -> Values:
    net = d["network"]
    out = _strings(d["launcher"], d["master_addr"], d["master_port"], d["init_method"],
                   net["interface"], net["address"])
    out += _strings(*d["sources"].values(), how=WORDS) + _strings(*d["notes"], how=LINE)
    for v in net["variables"].values():
        out += _strings(v["value"], v["source"]) + _strings(v["reason"], how=WORDS)
        out += _strings(v["hint"], how=LINE)
    return out


def doctor_values(d: dict[str, Any]) -> Values:
    out = _strings(d["facts"]["hostname"])
    for c in d["checks"]:
        out += _strings(c["id"].split(".", 1)[1], c["status"])
        out += _strings(c["summary"], how=WORDS)
        if c["status"] in ("warn", "fail"):
            out += _strings(c["fix"], how=LINE)
        if c["status"] == "fail":
            out += _strings(c["detail"], how=WORDS)
    return out


def check_values(d: dict[str, Any]) -> Values:
    out = _strings(d["master"], *d["stages"]) + _strings(*d["notes"], how=LINE)
    for c in d["causes"]:
        out += _strings(c["id"]) + _strings(c["detail"], c["fix"], how=LINE)
    for n in d["nodes"]:
        out += _strings(n["host"], n["address"], n["interface"], n["mtu"], n["torch"],
                        n["python"], n["interface_why"]["source"])
    return out


def bench_values(d: dict[str, Any]) -> Values:
    link = d["link"]
    out = _strings(link["method"], link["interface"]) + _strings(link["note"], how=LINE)
    out += _strings(*d["verdicts"], how=LINE)
    out += _strings(*{r["collective"] for r in d["rows"]}, *{r["dtype"] for r in d["rows"]})
    return out + _strings(*(s["reason"] for s in d["skipped"]), how=LINE)


def tune_values(d: dict[str, Any]) -> Values:
    req, facts = d["request"], d["facts"]
    out = _strings(req["distro"], req["firewall"], req["profile"], facts["hostname"],
                   facts["iface"]) + _strings(facts["iface_reason"], *req["sources"].values(),
                                              how=LINE)
    for part in d["parts"]:
        out += _strings(part["name"], *(f["path"] for f in part["files"]))
        out += _strings(*(shlex.join(c["argv"]) for c in part["apply"]), how=LINE)
        out += _strings(*part.get("notes", ()), *part.get("warnings", ()), how=LINE)
    return out


def launch_values(d: dict[str, Any]) -> Values:
    return _strings(*(n["command"] for n in d["nodes"]), *d["notes"], how=LINE)


def sbatch_values(d: dict[str, Any]) -> Values:
    return _strings(*d["script"].splitlines(), how=LINE)


def k8s_values(d: dict[str, Any]) -> Values:
    return _strings(*d["yaml"].splitlines(), how=LINE)


def monitor_values(d: dict[str, Any]) -> Values:
    return _strings(*(i["name"] for i in d["interfaces"])) + _strings(
        d["selection"]["iface"]["reason"], how=LINE)


def train_values(d: dict[str, Any]) -> Values:
    return _strings(d["steps"], d["world_size"], d["backend"], d["device"], d["precision"],
                    f"{d['parameters']:,}") + _strings(d.get("bytes_note"), how=LINE)


def diagnose_values(d: dict[str, Any]) -> Values:
    diag = d["diagnosis"]
    return _strings(diag["kind"]) + _strings(diag["summary"], diag.get("hint"), how=LINE)


def lab_values(d: dict[str, Any]) -> Values:
    out = _strings(d["name"], d["subnet"])
    for n in d["nodes"]:
        out += _strings(n["namespace"], n["hostname"], n["address"], n["ifname"])
    return out


# ---------------------------------------------------------------- the commands

CHEAP: dict[str, tuple[list[str], Callable[[dict[str, Any]], Values]]] = {
    "env": (["env"], env_values),
    "doctor": (["doctor"], doctor_values),
    "tune": (["tune"], tune_values),
    "launch": (["launch", "--dry-run", "--nproc-per-node", "2", "--", "train.py", "--lr",
                "0.1"], launch_values),
    "sbatch": (["sbatch", "--nodes", "2", "--", "train.py"], sbatch_values),
    "k8s": (["k8s", "--nodes", "2", "--gpus-per-node", "1", "--image",
             "registry.example.org/team/train:2.13.0-cu128", "--", "train.py"], k8s_values),
    "monitor": (["monitor", "--once"], monitor_values),
}


@pytest.mark.parametrize("name", sorted(CHEAP))
def test_a_commands_output_is_whole_at_any_width_and_in_a_pipe(name: str,
                                                                tmp_path: Path) -> None:
    argv, values = CHEAP[name]
    bundle = _bundle(tmp_path, argv)
    _assert_whole(bundle, values(bundle["json"]))


def test_doctor_with_a_failing_check_is_whole(tmp_path: Path) -> None:
    """A failing check shows its detail and its fix (a command), whole at 80 columns."""
    bundle = _bundle(tmp_path, ["doctor"], env={"GLOO_SOCKET_IFNAME": "nosuch9"})
    assert any(c["status"] == "fail" for c in bundle["json"]["checks"])
    _assert_whole(bundle, doctor_values(bundle["json"]))


def test_check_local_2_is_whole(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, ["check", "--local", "2", "--bw-seconds", "0.2"])
    assert len(bundle["json"]["nodes"]) == 2
    _assert_whole(bundle, check_values(bundle["json"]))


def test_bench_two_ranks_is_whole(tmp_path: Path) -> None:
    mine, peer = _two_ranks()
    argv = ["bench", "--collectives", "all_reduce,broadcast,send_recv", "-b", "1K", "-e",
            "16K", "-f", "4", "--iters", "2", "--warmup", "1", "--baseline", "tcp",
            "--baseline-time", "0.3"]
    bundle = _bundle(tmp_path, argv, env=mine, peer=peer)
    assert bundle["json"]["world_size"] == 2 and bundle["json"]["verdicts"]
    # rank 0 printed the head and each row as it finished (plain lines, at any width), the
    # renderer the rest: together what a reader gets
    assert "all_reduce" in bundle["stdout"]
    assert bundle["json"]["verdicts"][0] not in bundle["stdout"]
    for render in RENDERS:
        bundle[render] = bundle["stdout"] + bundle[render]
    _assert_whole(bundle, bench_values(bundle["json"]))


def test_train_two_ranks_is_whole(tmp_path: Path) -> None:
    mine, peer = _two_ranks()
    argv = ["train", "--max-steps", "4", "--samples", "256", "--eval-samples", "64",
            "--batch-size", "16", "--log-every", "2", "--width", "16"]
    bundle = _bundle(tmp_path, argv, env=mine, peer=peer)
    assert bundle["json"]["world_size"] == 2
    _assert_whole(bundle, train_values(bundle["json"]))


def test_diagnose_from_dumps_is_whole(tmp_path: Path) -> None:
    from ddpnet.watch.dump import write_state
    from ddpnet.watch.state import CollectiveRecord, RankState

    dumps = tmp_path / "dumps"
    dumps.mkdir()
    for rank, shape in ((0, (3,)), (1, (4,))):
        write_state(dumps, RankState(
            rank=rank, world_size=2, host=f"node-{rank}.cluster.example.org",
            published=100.0 + rank, recent=(CollectiveRecord(
                seq=3, op="all_reduce", dtype="float32", shape=shape, started=90.0),)),
            "watchdog")
    bundle = _bundle(tmp_path, ["diagnose", "--dumps", str(dumps)])
    _assert_whole(bundle, diagnose_values(bundle["json"]))


@pytest.fixture(scope="module")
def lab() -> Iterator[Any]:
    from tests.lab_util import fresh_lab

    with fresh_lab("ho", nodes=2) as made:
        yield made


@requires_netns
def test_lab_status_is_whole(lab: Any, tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, ["lab", "status", "--name", lab.name])
    _assert_whole(bundle, lab_values(bundle["json"]))

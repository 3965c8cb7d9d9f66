"""The doctor engine (registry, concurrency, verdict, facts, JSON schema) on fixture hosts,
and ``ddpnet doctor`` run for real."""

from __future__ import annotations

import json
import os
import pwd
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ddpnet.doctor import run as doctor
from ddpnet.doctor.base import FAMILIES, Check, CheckResult, CommandOutput, Host, Inputs
from tests.conftest import RunCli
from tests.doctor.helpers import GOOD_SYSCTLS, Tree, fixture, inputs, ok
from tests.doctor.test_software import CPU, LIMITS, MOUNTS, PROBE_KEY

NFT = ("nft", "-j", "list", "ruleset")
IPT = ("iptables-save", "-t", "filter")
CONTRACT_FACTS = {"python", "torch", "cuda", "nccl", "hostname", "hostname_loopback",
                  "interface", "address", "mtu", "subnet", "time"}


def healthy(tmp_path: Path, **over: Any) -> Host:
    tree = Tree(tmp_path)
    tree.sysctls(GOOD_SYSCTLS)
    tree.write("etc/hosts", "127.0.0.1 localhost\n198.18.0.3 node1\n")
    tree.write("proc/self/mounts", MOUNTS.format("16g"))
    tree.write("proc/self/limits", LIMITS.format(1048576))
    tree.write("proc/net/tcp", "  sl  local_address rem_address   st\n")
    kw: dict[str, Any] = dict(
        names={"node1": ["198.18.0.3"], "198.18.0.1": ["198.18.0.1"]},
        commands={NFT: ok(fixture("firewall/nft_cluster_open.json")),
                  IPT: ok(fixture("firewall/ipt_empty.txt")), PROBE_KEY: ok(json.dumps(CPU))},
        native={"nvml": "absent"})
    kw.update(over)
    return tree.host(**kw)


def test_healthy_fixture_node_passes(tmp_path: Path) -> None:
    report = doctor.run_checks(healthy(tmp_path), inputs())
    bad = [(c.id, c.status, c.summary) for c in report.checks if c.status in ("warn", "fail")]
    assert report.verdict == "pass", bad
    assert [c.family for c in report.checks] == sorted(
        (c.family for c in report.checks), key=FAMILIES.index)
    assert {c.family for c in report.checks} == set(FAMILIES)
    f = report.facts
    assert set(f) >= CONTRACT_FACTS
    assert (f["hostname"], f["hostname_loopback"], f["interface"], f["address"], f["mtu"],
            f["subnet"], f["torch"], f["cuda"], f["nccl"]) == (
        "node1", False, "eth0", "198.18.0.3", 1500, "198.18.0.0/24", "2.13.0+cpu", None, None)
    assert f["firewall"]["managers"] == ["nftables"]
    assert f["sysctl"]["net.core.rmem_max"] == "67108864" and len(f["sysctl"]) == 7
    assert abs(f["time"] - time.time()) < 60


def test_one_failure_makes_the_verdict_fail(tmp_path: Path) -> None:
    host = healthy(tmp_path, names={"node1": ["127.0.1.1"], "198.18.0.1": ["198.18.0.1"]})
    report = doctor.run_checks(host, inputs())
    assert report.verdict == "fail"
    assert [c.id for c in report.failed] == ["names.hostname"]
    assert report.facts["hostname_loopback"] is True


def test_json_schema(tmp_path: Path) -> None:
    data = doctor.run_checks(healthy(tmp_path), inputs()).to_dict()
    assert set(data) == {"verdict", "checks", "facts", "elapsed_s"}
    assert data["verdict"] in ("pass", "warn", "fail")
    for c in data["checks"]:
        assert set(c) == {"id", "family", "status", "summary", "detail", "fix"}
        assert c["status"] in ("pass", "warn", "fail", "skip")
        assert c["family"] in FAMILIES and c["id"].startswith(c["family"] + ".")
        assert all(isinstance(c[k], str) for k in ("summary", "detail", "fix"))
    assert len({c["id"] for c in data["checks"]}) == len(data["checks"])
    json.dumps(data)  # serialisable without default=
    back = doctor.DoctorReport.from_dict(json.loads(json.dumps(data)))
    assert back.to_dict() == data


class Sleepy(Check):
    family = "environment"
    title = "sleep"

    def __init__(self, n: int, barrier: threading.Barrier) -> None:
        self.id = f"environment.sleep{n}"  # type: ignore[misc]
        self.barrier = barrier

    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        self.barrier.wait(timeout=5)  # only passes if all run at the same time
        return self.ok("slept")


def test_checks_run_concurrently(tmp_path: Path) -> None:
    barrier = threading.Barrier(4)
    report = doctor.run_checks(healthy(tmp_path), inputs(),
                               [Sleepy(i, barrier) for i in range(4)], prefetch=False)
    assert report.verdict == "pass" and len(report.checks) == 4


def test_slow_commands_overlap(tmp_path: Path) -> None:
    """nft, iptables-save and the torch probe run at the same time, not one after another."""
    base = healthy(tmp_path)
    lock = threading.Lock()
    running = [0]
    peak = [0]

    def slow(argv: Sequence[str], timeout: float) -> CommandOutput | None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.3)
        with lock:
            running[0] -= 1
        return base.run(argv, timeout)

    host = Host(**{**{f: getattr(base, f) for f in (
        "proc", "sys", "etc", "dev", "var", "environ", "hostname", "resolve", "which",
        "native")}, "run": slow})
    report = doctor.run_checks(host, inputs())
    assert report.verdict == "pass"
    assert peak[0] == 3, peak


class Broken(Check):
    id = "environment.broken"
    family = "environment"
    title = "broken"

    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        raise KeyError("boom")


def test_crashing_check_is_a_visible_failure(tmp_path: Path) -> None:
    report = doctor.run_checks(healthy(tmp_path), inputs(), [Broken()], prefetch=False)
    assert report.verdict == "fail"
    assert "crashed: KeyError" in report.checks[0].summary


def test_resolve_name_is_bounded() -> None:
    assert "127.0.0.1" in doctor.resolve_name("localhost")


def test_cli_json(run_cli: RunCli) -> None:
    proc = run_cli("doctor", "--json", "--master-port", "29517")
    data = json.loads(proc.stdout)
    assert proc.returncode == (1 if data["verdict"] == "fail" else 0), proc.stderr
    assert set(data["facts"]) >= CONTRACT_FACTS
    assert any(c["id"] == "rendezvous.config" and "29517" in c["summary"]
               for c in data["checks"])
    assert "Traceback" not in proc.stderr


def test_cli_table_and_bad_input(run_cli: RunCli) -> None:
    proc = run_cli("doctor")
    assert "verdict:" in proc.stdout and "firewall" in proc.stdout and "sysctl" in proc.stdout
    bad = run_cli("doctor", "--cluster-subnet", "nonsense")
    assert bad.returncode == 2 and "hint:" in bad.stderr and "Traceback" not in bad.stderr
    bad = run_cli("doctor", env={"RANK": "3"})
    data = run_cli("doctor", "--json", env={"RANK": "3"})
    assert bad.returncode == 1 and "configuration invalid" in bad.stdout
    assert json.loads(data.stdout)["checks"][0]["status"] == "fail"


def test_the_torch_facts_cache_has_a_home_without_one_in_the_environment() -> None:
    """slurmd runs HealthCheckProgram with an empty environment: the cache falls back to the
    account's home, so a health check does not import torch again every interval."""
    assert doctor.cache_dir({"XDG_CACHE_HOME": "/x"}, "/root") == Path("/x/ddpnet")
    assert doctor.cache_dir({"HOME": "/home/u"}, "/root") == Path("/home/u/.cache/ddpnet")
    assert doctor.cache_dir({}, "/root") == Path("/root/.cache/ddpnet")
    assert doctor.cache_dir({}, None) is None
    home = pwd.getpwuid(os.getuid()).pw_dir
    expected = Path(home) / ".cache" / "ddpnet" if Path(home).is_dir() else None
    assert doctor.real_host({}).cache == expected

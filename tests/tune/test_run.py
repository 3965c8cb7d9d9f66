"""``ddpnet tune``'s options to result: the JSON per mode, the journal's firewall, the
sysctl read-back, flags that exclude each other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ddpnet.errors import ConfigError
from ddpnet.tune import apply as ap
from ddpnet.tune import machine
from ddpnet.tune.plan import build_plan
from ddpnet.tune.run import TuneOptions, TuneResult, previous_firewall, run, sysctl_not_taken
from tests.tune.fixtures import FACTS, request

PLAN = build_plan(request("rhel9", "nftables"), FACTS)


def test_json_per_mode() -> None:
    dry = TuneResult("dry-run", Path("/"), PLAN).to_dict()
    assert set(dry) == {"mode", "request", "facts", "parts", "files"}
    assert dry["request"]["cluster_subnet"] == "10.0.0.0/24" and dry["facts"]["mtu"] == 9000
    applied = TuneResult("apply", Path("/"), PLAN, outcome=ap.Outcome(),
                         sysctl_not_taken=("k",)).to_dict()
    assert set(applied) == {"mode", "request", "facts", "parts", "outcome", "sysctl_not_taken"}
    assert applied["sysctl_not_taken"] == ["k"]
    assert TuneResult("revert", Path("/"), outcome=ap.Outcome()).to_dict() == {
        "mode": "revert", "outcome": {"changed": False, "files": [], "commands": [],
                                      "failed": []}}


class _Journal:
    def __init__(self, parts: dict[str, Any]) -> None:
        self.parts = parts


@pytest.mark.parametrize(("tool", "firewall"), [
    ("nft", "nftables"), ("iptables-restore", "iptables"), ("ip6tables-restore", "iptables"),
    ("firewall-cmd", "firewalld"), ("ufw", "ufw"), ("true", None)])
def test_previous_firewall_from_the_journal(tool: str, firewall: str | None) -> None:
    journal = _Journal({"firewall": {"apply": [{"argv": [tool, "-f", "x"]}]}})
    assert previous_firewall(journal) == firewall  # type: ignore[arg-type]
    assert previous_firewall(_Journal({})) is None  # type: ignore[arg-type]
    assert previous_firewall(None) is None


def test_sysctl_read_back_names_what_the_kernel_did_not_take(
        monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def fake(keys: Any) -> dict[str, str | None]:
        asked.extend(keys)
        return dict.fromkeys(asked, None)

    monkeypatch.setattr(machine, "read_sysctls", fake)
    missing = sysctl_not_taken(PLAN)
    assert asked and len(missing) == len(asked)


def test_apply_and_revert_exclude_each_other() -> None:
    with pytest.raises(ConfigError, match="--apply and --revert"):
        run(TuneOptions(apply=True, revert=True))


def test_root_must_be_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not a directory"):
        run(TuneOptions(root=tmp_path / "absent"))


def test_os_release_under_root_prefers_etc(tmp_path: Path) -> None:
    assert machine.read_os_release(tmp_path) == (None, tmp_path / "etc/os-release")
    (tmp_path / "usr/lib").mkdir(parents=True)
    (tmp_path / "usr/lib/os-release").write_text("ID=debian\n")
    assert machine.read_os_release(tmp_path) == ("ID=debian\n",
                                                 tmp_path / "usr/lib/os-release")


def test_a_rerun_compares_with_the_values_before_ddpnet() -> None:
    """After a 100g apply the kernel shows ddpnet's 1 GiB; a re-run with the guide profile
    compares with the host's own value from the journal, so it lowers what ddpnet raised,
    and still keeps what the host had higher (somaxconn)."""
    from dataclasses import replace

    from ddpnet.tune import sysctl
    from ddpnet.tune.run import with_values_before

    now = {"net.core.rmem_max": str((1 << 31) - 1), "net.core.somaxconn": "65535"}
    journal = _Journal({"sysctl": {"revert": [
        {"argv": ["sysctl", "-q", "-w", "net.core.rmem_max=212992"]},
        {"argv": ["sysctl", "-q", "-w", "net.core.somaxconn=65535"]}]}})
    facts = with_values_before(replace(FACTS, sysctl_now=now), journal)  # type: ignore[arg-type]
    assert facts.sysctl_now["net.core.rmem_max"] == "212992"
    assert "journal" in facts.sources["sysctl"]
    part = build_plan(request("ubuntu", "none", profile="guide"), facts).part("sysctl")
    assert part is not None
    written = sysctl.settings_in(part.files[0].content)
    assert written["net.core.rmem_max"] == str(16 << 20)
    assert written["net.core.somaxconn"] == "65535"
    assert with_values_before(FACTS, None) is FACTS
    for junk in ({"sysctl": "x"}, {"sysctl": {"revert": "x"}},
                 {"sysctl": {"revert": ["x", {"argv": "sysctl"}, {"argv": [1, 2, 3, 4]},
                                        {"argv": ["sysctl", "-q", "-w", "nokey"]}]}}):
        assert with_values_before(FACTS, _Journal(junk)) is FACTS  # type: ignore[arg-type]

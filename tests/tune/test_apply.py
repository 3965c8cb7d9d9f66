"""--apply / --revert on a temp root: loss-free (byte, mode and owner identical after revert),
idempotent (a second apply changes nothing), journalled; command sequencing with an injected
runner (commands never touch this machine in these tests)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from ddpnet.errors import CheckFailed
from ddpnet.tune import apply as ap
from ddpnet.tune.plan import build_plan
from tests.conftest import RunCli
from tests.tune.fixtures import FACTS, request

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="--apply needs root")

OS_RELEASE = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n'


def make_root(root: Path) -> Path:
    (root / "etc/sysctl.d").mkdir(parents=True)
    (root / "etc/network").mkdir()
    (root / "etc/os-release").write_text(OS_RELEASE)
    (root / "etc/hostname").write_text("node1.cluster\n")
    (root / "etc/hosts").write_text("127.0.0.1\tlocalhost\n127.0.1.1\tnode1.cluster node1\n")
    conf = root / "etc/nftables.conf"
    conf.write_text("#!/usr/sbin/nft -f\nflush ruleset\n")  # no trailing include yet
    conf.chmod(0o700)
    os.chown(conf, 1234, 4321)
    (root / "etc/network/interfaces").write_text("source /etc/network/interfaces.d/*\n")
    (root / "etc/sysctl.d/99-local.conf").write_text("vm.swappiness = 10\n")
    return root


def snapshot(root: Path) -> dict[str, tuple[str, bytes, int, int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            kind = "d" if p.is_dir() else "f"
            data = p.read_bytes() if kind == "f" else b""
            out[str(p.relative_to(root))] = (kind, data, st.st_mode, st.st_uid, st.st_gid)
    return out


ARGS = ("--distro", "debian", "--firewall", "nftables", "--cluster-subnet", "10.0.0.0/24",
        "--static-ip", "10.0.0.11/24", "--gateway", "10.0.0.1", "--master-port", "29501")


def test_apply_twice_then_revert_is_byte_identical(tmp_path: Path, run_cli: RunCli) -> None:
    root = make_root(tmp_path / "root")
    before = snapshot(root)

    proc = run_cli("tune", "--root", str(root), *ARGS, "--apply", "--json")
    assert proc.returncode == 0, proc.stderr
    first = json.loads(proc.stdout)["outcome"]
    actions = {f["path"]: f["action"] for f in first["files"]}
    assert actions["/etc/sysctl.d/90-ddpnet.conf"] == "create"
    assert actions["/etc/hosts"] == "modify"
    assert actions["/etc/nftables.conf"] == "modify"
    assert actions["/etc/ddpnet/firewall.nft"] == "create"
    assert actions["/etc/network/interfaces.d/ddpnet-" + json.loads(proc.stdout)["facts"]
                   ["iface"]] == "create"
    assert all(c["status"].startswith("skipped") for c in first["commands"])
    assert "29501" in (root / "etc/sysctl.d/90-ddpnet.conf").read_text()
    assert "10.0.0.11 node1.cluster node1" in (root / "etc/hosts").read_text()
    conf = root / "etc/nftables.conf"
    assert conf.read_text().endswith('include "/etc/ddpnet/firewall.nft"  # ddpnet tune\n')
    st = conf.stat()
    assert (st.st_mode & 0o777, st.st_uid, st.st_gid) == (0o700, 1234, 4321)  # kept
    journal = json.loads((root / "var/lib/ddpnet/journal.json").read_text())
    assert journal["files"]["/etc/hosts"]["action"] == "modified"
    assert (root / "var/lib/ddpnet/backups/etc%hosts").read_bytes() == before["etc/hosts"][1]
    after_first = snapshot(root)

    proc = run_cli("tune", "--root", str(root), *ARGS, "--apply", "--json")
    assert proc.returncode == 0, proc.stderr
    second = json.loads(proc.stdout)["outcome"]
    assert second["changed"] is False
    assert {f["action"] for f in second["files"]} == {"unchanged"}
    assert snapshot(root) == after_first

    proc = run_cli("tune", "--root", str(root), "--revert", "--json")
    assert proc.returncode == 0, proc.stderr
    assert snapshot(root) == before
    # a second revert has nothing left to do
    proc = run_cli("tune", "--root", str(root), "--revert")
    assert proc.returncode == 0 and "nothing to do" in proc.stdout


def test_dry_run_writes_nothing_and_shows_diffs(tmp_path: Path, run_cli: RunCli) -> None:
    root = make_root(tmp_path / "root")
    before = snapshot(root)
    proc = run_cli("tune", "--root", str(root), *ARGS)
    assert proc.returncode == 0, proc.stderr
    assert snapshot(root) == before
    assert "+++ b/etc/sysctl.d/90-ddpnet.conf" in proc.stdout
    assert "--- a/etc/hosts" in proc.stdout and "+10.0.0.11 node1.cluster node1" in proc.stdout
    assert "would run: nft -f /etc/ddpnet/firewall.nft" in proc.stdout
    proc = run_cli("tune", "--root", str(root), *ARGS, "--json")
    data = json.loads(proc.stdout)
    assert data["mode"] == "dry-run" and data["request"]["cluster_subnet"] == "10.0.0.0/24"
    assert {f["path"]: f["action"] for f in data["files"]}["/etc/hosts"] == "modify"


class FakeRunner:
    """Records commands; ``checks`` maps an argv to the exit code of that check."""

    def __init__(self, fail: str | None = None) -> None:
        self.ran: list[tuple[str, ...]] = []
        self.checks: dict[tuple[str, ...], int] = {}
        self.fail = fail

    def __call__(self, argv: Sequence[str]) -> tuple[int, str]:
        argv = tuple(argv)
        if argv in self.checks:
            return self.checks[argv], ""
        query = next((a for a in argv if a.startswith("--query-rich-rule=")), None)
        if query:  # firewalld holds the rules of the first apply (10.0.0.0/24) only
            return (0 if "10.0.0.0/24" in query else 1), ""
        self.ran.append(argv)
        if self.fail and self.fail in argv:
            return 1, "boom"
        return 0, ""


def test_commands_run_once_and_revert_in_reverse(tmp_path: Path) -> None:
    plan = build_plan(request("rhel9", "iptables"), FACTS)
    run = FakeRunner()
    run.checks[("iptables", "-C", "INPUT", "-j", "DDPNET")] = 1  # not jumped to yet
    run.checks[("ip6tables", "-C", "INPUT", "-j", "DDPNET")] = 1
    run.checks[("test", "-e", "/proc/net/if_inet6")] = 0  # the kernel has IPv6
    ap.apply(plan, tmp_path, run, live=True)
    assert run.ran == [("sysctl", "-q", "-e", "-p", "/etc/sysctl.d/90-ddpnet.conf"),
                       ("iptables-restore", "--noflush", "/etc/ddpnet/firewall.iptables"),
                       ("iptables", "-I", "INPUT", "1", "-j", "DDPNET"),
                       ("ip6tables-restore", "--noflush", "/etc/ddpnet/firewall.ip6tables"),
                       ("ip6tables", "-I", "INPUT", "1", "-j", "DDPNET")]
    run.ran.clear()
    out = ap.apply(plan, tmp_path, run, live=True)
    assert run.ran == [] and not out.changed

    # a new master port: sysctl reloads but keeps the revert to the original values,
    # the firewall reloads its file
    plan2 = build_plan(request("rhel9", "iptables", master_port=29600), FACTS)
    ap.apply(plan2, tmp_path, run, live=True)
    assert ("sysctl", "-q", "-e", "-p", "/etc/sysctl.d/90-ddpnet.conf") in run.ran
    assert ("iptables-restore", "--noflush", "/etc/ddpnet/firewall.iptables") in run.ran
    run.ran.clear()

    for ipt in ("iptables", "ip6tables"):
        run.checks[(ipt, "-C", "INPUT", "-j", "DDPNET")] = 0
        run.checks[(ipt, "-n", "-L", "DDPNET")] = 0
    ap.revert(tmp_path, run, live=True)
    assert run.ran == [("iptables", "-D", "INPUT", "-j", "DDPNET"),
                       ("iptables", "-F", "DDPNET"), ("iptables", "-X", "DDPNET"),
                       ("ip6tables", "-D", "INPUT", "-j", "DDPNET"),
                       ("ip6tables", "-F", "DDPNET"), ("ip6tables", "-X", "DDPNET"),
                       ("sysctl", "-q", "-w", "net.ipv4.tcp_fin_timeout=60"),
                       ("sysctl", "-q", "-w", "net.core.somaxconn=4096")]
    assert list(tmp_path.iterdir()) == []


def test_firewalld_rule_change_removes_the_old_rules_first(tmp_path: Path) -> None:
    run = FakeRunner()
    ap.apply(build_plan(request("rhel8", "firewalld"), FACTS), tmp_path, run, live=True)
    run.ran.clear()
    ap.apply(build_plan(request("rhel8", "firewalld", cluster_subnet="10.0.1.0/24",
                                static_ip=None, gateway=None, dns=None), FACTS),
             tmp_path, run, live=True)
    removes = [a for a in run.ran if any("--remove-rich-rule" in x for x in a)]
    adds = [a for a in run.ran if any("--add-rich-rule" in x for x in a)]
    assert len(removes) == 3 and all("10.0.0.0/24" in a[-1] for a in removes)
    assert len(adds) == 3 and all("10.0.1.0/24" in a[-1] for a in adds)
    assert run.ran.index(removes[-1]) < run.ran.index(adds[0])


def test_failed_command_leaves_a_journal_that_reverts(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    before = snapshot(root)
    plan = build_plan(request("debian", "nftables"), FACTS)
    run = FakeRunner(fail="nft")
    with pytest.raises(CheckFailed, match="part firewall failed"):
        ap.apply(plan, root, run, live=True)
    assert (root / "var/lib/ddpnet/journal.json").exists()
    run = FakeRunner()
    ap.revert(root, run, live=True)
    assert ("nft", "delete", "table", "inet", "ddpnet") in run.ran
    assert snapshot(root) == before


def test_a_second_apply_at_the_same_time_is_refused(tmp_path: Path) -> None:
    import fcntl

    from ddpnet.errors import ConfigError

    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(ConfigError, match="another ddpnet tune"):
            ap.apply(build_plan(request("debian", "none"), FACTS), tmp_path, FakeRunner())
    finally:
        os.close(fd)
    assert list(tmp_path.iterdir()) == []


def test_system_runner_reports_absent_and_merged_output() -> None:
    rc, text = ap.system_runner(["ddpnet-no-such-tool-qa"])
    assert (rc, text) == (127, "ddpnet-no-such-tool-qa: command not found")
    assert ap.system_runner(["sh", "-c", "echo a; echo b >&2; exit 3"]) == (3, "a\nb")


def test_gather_maps_the_address_inside_the_cluster_subnet(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An interface with two IPv4 addresses: /etc/hosts gets the one in --cluster-subnet."""
    import ipaddress

    from ddpnet.net import interfaces as interfaces_mod
    from ddpnet.net.interfaces import Address, Interface
    from ddpnet.tune.facts import gather

    eth = Interface("eth0", True, (Address("192.168.9.9", 24, 4), Address("10.0.0.12", 24, 4)),
                    1500, None, "physical")
    monkeypatch.setattr(interfaces_mod, "list_interfaces", lambda: (eth,))
    facts = gather(tmp_path, subnet=ipaddress.ip_network("10.0.0.0/24"), distro="debian",
                   environ={})
    assert (facts.iface, facts.address) == ("eth0", "10.0.0.12")
    assert facts.iface_reason == "has 10.0.0.12 in the cluster subnet 10.0.0.0/24"

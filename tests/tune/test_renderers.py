"""Pure pieces: sysctl scaling, /etc/hosts fix, distro detection, SELinux report, port spec,
input validation (interface choice: tests/net/test_choose.py; firewall detection:
tests/net/test_firewall.py)."""

from __future__ import annotations

import ipaddress
from dataclasses import replace
from typing import Any

import pytest

from ddpnet.errors import ConfigError
from ddpnet.tune import detect, hosts, selinux, sysctl
from ddpnet.tune.firewall import PortSpec
from ddpnet.tune.plan import build_plan
from ddpnet.tune.validate import parse_static_ip, parse_subnet
from tests.tune.fixtures import FACTS, request


@pytest.mark.parametrize("speed,profile", [
    (None, "guide"), (0, "guide"), (1000, "guide"), (9999, "guide"), (10000, "10g"),
    (25000, "10g"), (40000, "40g"), (50000, "40g"), (100000, "100g"), (400000, "100g"),
])
def test_profile_follows_link_speed(speed: int | None, profile: str) -> None:
    assert sysctl.profile_for_speed(speed)[0] == profile


def test_buffers_never_go_below_the_guides_and_grow_with_speed() -> None:
    def maxima(p: str) -> tuple[int, int]:
        values = {s.key: s.value for s in sysctl.profile_for(p, 29500)}
        return int(values["net.core.rmem_max"]), int(values["net.ipv4.tcp_rmem"].split()[2])

    sizes = [maxima(p) for p in ("guide", "10g", "40g", "100g")]
    assert sizes[0] == (16 * 2**20, 16 * 2**20)  # the guides' floor
    assert sizes == sorted(sizes) and len(set(sizes)) == 4
    for p in ("guide", "100g"):
        keys = {s.key: s for s in sysctl.profile_for(p, 29500)}
        assert keys["net.ipv4.tcp_fin_timeout"].value == "30"
        assert int(keys["net.ipv4.tcp_max_syn_backlog"].value) >= 4096
        assert all(s.why for s in keys.values())


@pytest.mark.parametrize("current,expected", [
    ("", "29400,29500"),
    ("8000-8010", "8000-8010,29400,29500"),
    ("29000-29999", "29000-29999"),  # already covered
    ("29500,30000", "29400,29500,30000"),
])
def test_reserved_ports_keep_what_is_reserved(current: str, expected: str) -> None:
    assert sysctl.merge_reserved(current, (29500, 29400)) == expected


def test_hosts_fix_moves_the_name_off_loopback_and_keeps_other_names() -> None:
    text = "127.0.0.1 localhost node1 # mine\n::1 localhost\n"
    new, what = hosts.fix_hosts(text, "node1", "10.0.0.11")
    assert new.splitlines() == [
        "# 127.0.0.1 localhost node1 # mine  # ddpnet tune: node1 is not loopback",
        "127.0.0.1 localhost # mine",
        "::1 localhost",
        "10.0.0.11 node1  # ddpnet tune: gloo resolves this host's name",
    ]
    assert "mapped node1" in what
    again, what2 = hosts.fix_hosts(new, "node1", "10.0.0.11")
    assert (again, what2) == (new, "")  # idempotent


def test_hosts_untouched_when_the_name_is_routable() -> None:
    text = "127.0.0.1 localhost\n10.0.0.11 node1\n"
    assert hosts.fix_hosts(text, "node1", "10.0.0.11") == (text, "")


@pytest.mark.parametrize("os_release,distro", [
    ('ID=centos\nVERSION_ID="7"\n', "rhel7"),
    ('ID="rocky"\nID_LIKE="rhel centos fedora"\nVERSION_ID="8.9"\n', "rhel8"),
    ('ID="almalinux"\nVERSION_ID="9.4"\n', "rhel9"),
    ('ID="rhel"\nVERSION_ID="10.0"\n', "rhel9"),
    ("ID=ubuntu\nID_LIKE=debian\nVERSION_ID=\"22.04\"\n", "ubuntu"),
    ("ID=linuxmint\nID_LIKE=\"ubuntu debian\"\n", "ubuntu"),
    ("ID=debian\nVERSION_ID=\"12\"\n", "debian"),
])
def test_distro_detection(os_release: str, distro: str) -> None:
    assert detect.detect_distro(os_release)[0] == distro


@pytest.mark.parametrize("os_release", [None, "ID=gentoo\n", 'ID=centos\nVERSION_ID="6"\n'])
def test_unknown_distro_asks_for_the_flag(os_release: str | None) -> None:
    with pytest.raises(ConfigError) as err:
        detect.detect_distro(os_release)
    assert "--distro" in err.value.hint


def test_selinux_is_reported_never_disabled() -> None:
    assert selinux.mode("1", "SELINUX=enforcing\n") == ("enforcing", "enforcing")
    assert selinux.mode("0", "SELINUX=enforcing\n") == ("permissive", "enforcing")
    assert selinux.mode(None, "SELINUX=disabled\n") == ("disabled", "disabled")
    assert selinux.mode(None, None) == ("absent", "absent")
    part = build_plan(request("rhel9", "firewalld"), FACTS).part("selinux")
    assert part is not None and not part.files and not part.apply
    text = " ".join(part.notes)
    assert "semanage port" in text and "never disables" in text


def test_port_spec_drops_ports_inside_the_range() -> None:
    spec = PortSpec(ipaddress.ip_network("10.0.0.0/24"), 50010, 29400, (50000, 50100))
    assert [(lo, hi) for lo, hi, _ in spec.ranges()] == [(29400, 29400), (50000, 50100)]
    spec = PortSpec(ipaddress.ip_network("10.0.0.0/24"), 29500, 29400, (50000, 50100))
    assert [(lo, hi) for lo, hi, _ in spec.ranges()] == [
        (29500, 29500), (29400, 29400), (50000, 50100)]


def test_no_renderer_opens_to_everyone() -> None:
    for fw in ("firewalld", "nftables", "iptables", "ufw"):
        plan = build_plan(request("rhel9", fw), FACTS)
        part = plan.part("firewall")
        assert part is not None
        blob = repr(part)
        assert "10.0.0.0/24" in blob and "0.0.0.0/0" not in blob and "any port" not in \
            blob.replace("to any port", "")


def test_static_ip_outside_the_cluster_subnet_warns() -> None:
    plan = build_plan(request("ubuntu", "none", static_ip="10.9.0.11/24", gateway="10.9.0.1"),
                      FACTS)
    part = plan.part("static-ip")
    assert part is not None and any("not in the cluster subnet" in w for w in part.warnings)


def test_validation_edges() -> None:
    assert str(parse_subnet("fd00::/64")) == "fd00::/64"
    assert str(parse_static_ip("10.0.0.1/31", None)) == "10.0.0.1/31"  # /31: both usable
    with pytest.raises(ConfigError, match="broadcast"):
        parse_static_ip("10.0.0.255/24", None)
    with pytest.raises(ConfigError, match="itself"):
        parse_static_ip("10.0.0.5/24", "10.0.0.5")


def test_sysctl_mismatches_name_what_the_kernel_did_not_take() -> None:
    content = sysctl.render_file(sysctl.profile_for("guide", 29500), "guide", "test")
    live: dict[str, str | None] = {k: v for k, v in sysctl.settings_in(content).items()}
    assert sysctl.mismatches(content, live) == ()
    live["net.ipv4.tcp_rmem"] = "4096\t131072\t16777216\n"  # the kernel prints tabs
    assert sysctl.mismatches(content, live) == ()
    live["net.core.rmem_max"] = "4194304\n"
    live["net.core.wmem_max"] = None
    found = sysctl.mismatches(content, live)
    assert len(found) == 2 and "refused" in found[0] and "not in this kernel" in found[1]


AUDIT = (
    'type=AVC msg=audit(1700000000.1:10): avc:  denied  { name_bind } for  pid=812 '
    'comm="python3" src=29500 scontext=system_u:system_r:trainer_t:s0 '
    'tcontext=system_u:object_r:unreserved_port_t:s0 tclass=tcp_socket permissive=0\n'
    'type=AVC msg=audit(1700000000.2:11): avc:  denied  { name_connect } for  pid=813 '
    'comm="python3" dest=40001 scontext=system_u:system_r:trainer_t:s0 '
    'tcontext=system_u:object_r:ephemeral_port_t:s0 tclass=tcp_socket permissive=0\n'
    'type=AVC msg=audit(1700000000.3:12): avc:  denied  { name_bind } for  pid=9 '
    'comm="nginx" src=8080 scontext=system_u:system_r:httpd_t:s0 '
    'tcontext=system_u:object_r:http_cache_port_t:s0 tclass=tcp_socket permissive=0\n'
    'type=AVC msg=audit(1700000000.4:13): avc:  denied  { read } for  pid=9 comm="python3" '
    'name="x" scontext=a:b:trainer_t:s0 tcontext=a:b:etc_t:s0 tclass=file permissive=0\n'
)


def test_selinux_names_the_denials_of_training_ports_and_their_fix() -> None:
    denials = selinux.port_denials(AUDIT, lambda p: p == 29500 or 32768 <= p <= 60999)
    assert [(d.perm, d.comm, d.port, d.domain, d.port_type) for d in denials] == [
        ("name_bind", "python3", 29500, "trainer_t", "unreserved_port_t"),
        ("name_connect", "python3", 40001, "trainer_t", "ephemeral_port_t")]
    facts = replace(FACTS, audit_log=AUDIT)
    part = build_plan(request("rhel9", "firewalld"), facts).part("selinux")
    assert part is not None and len(part.warnings) == 2
    assert "audit2allow -M ddpnet_python3" in part.warnings[0]
    assert "setenforce" not in " ".join(part.warnings)


@pytest.mark.parametrize("speed", [None, 1000, 10_000, 25_000, 40_000, 100_000, 400_000])
def test_tuned_values_satisfy_doctors_targets(speed: int | None) -> None:
    """After `tune`, `doctor` must not complain about the sysctls tune wrote. True by
    construction (both read the table in ``ddpnet.sysctl_profile``); this holds the wiring:
    the same tier for a speed, and every target written with a value that satisfies it."""
    from ddpnet import sysctl_profile as doctor

    profile = sysctl.profile_for_speed(speed)[0]
    ours = {s.key: s.value for s in sysctl.profile_for(profile, 29500)}
    for key, target in doctor.profile_for(speed).targets.items():
        assert target.satisfied_by(ours[key]), (profile, key, ours[key], target)


def test_cloud_init_is_named_when_it_would_undo_the_change() -> None:
    cloud = "manage_etc_hosts: true\n"
    facts = replace(FACTS, files={**FACTS.files, "/etc/cloud/cloud.cfg": cloud})
    plan = build_plan(request("ubuntu", "none"), facts)
    names, static = plan.part("names"), plan.part("static-ip")
    assert names is not None and any("manage_etc_hosts" in w for w in names.warnings)
    assert static is not None and any("config: disabled" in w for w in static.warnings)
    quiet = replace(FACTS, files={**FACTS.files, "/etc/cloud/cloud.cfg":
                                  "manage_etc_hosts: false\nnetwork: {config: disabled}\n"})
    plan = build_plan(request("ubuntu", "none"), quiet)
    assert all(not p.warnings for p in plan.parts if p.name in ("names", "static-ip"))


def test_sysctl_never_lowers_a_value_the_host_has_higher() -> None:
    """A host with 32 MiB tcp_rmem max, a larger tcp_wmem min, a bigger somaxconn keeps them
    (element-wise for the triples); fin_timeout (a ceiling, not a floor) still goes to 30."""
    now = {"net.ipv4.tcp_rmem": "4096 131072 33554432", "net.ipv4.tcp_wmem": "8192 16384 4194304",
           "net.core.somaxconn": "65535", "net.core.rmem_max": "1048576",
           "net.ipv4.tcp_fin_timeout": "60"}
    facts = replace(FACTS, sysctl_now=now)
    part = build_plan(request("ubuntu", "none", profile="guide"), facts).part("sysctl")
    assert part is not None
    written = sysctl.settings_in(part.files[0].content)
    assert written["net.ipv4.tcp_rmem"] == f"4096 131072 {32 << 20}"
    assert written["net.ipv4.tcp_wmem"] == f"8192 65536 {16 << 20}"
    assert written["net.core.somaxconn"] == "65535"
    assert written["net.core.rmem_max"] == str(16 << 20)  # raised: the host's is lower
    assert written["net.ipv4.tcp_fin_timeout"] == "30"
    kept = [n for n in part.notes if "never lowers" in n]
    assert len(kept) == 3 and any(n.startswith("net.ipv4.tcp_rmem = ") for n in kept)
    assert "is kept" in part.files[0].content


def test_higher_of_compares_field_by_field() -> None:
    assert sysctl.higher_of("4096 131072 16777216", "4096 87380 33554432") == \
        "4096 131072 33554432"
    assert sysctl.higher_of("4096", "1 2") == "4096"  # shapes differ: the profile's
    assert sysctl.higher_of("30", "x") == "30"
    assert sysctl.higher_of("30", "9" * 5000) == "30"  # not a kernel value (and int() refuses)


@pytest.mark.parametrize("defaults,subnet,warned", [
    (None, "10.0.0.0/24", ""),  # absent: ufw's shipped default (yes)
    ("IPV6=yes\n", "10.0.0.0/24", ""),
    ("IPV6=no\n", "10.0.0.0/24", "bypass"),
    ("IPV6=yes\n# later\nIPV6=no\n", "fd00::/64", "cannot add"),
])
def test_ufw_warns_when_it_does_not_filter_ipv6(defaults: str | None, subnet: str,
                                                warned: str) -> None:
    files = dict(FACTS.files)
    if defaults is not None:
        files["/etc/default/ufw"] = defaults
    static = "fd00::11/64" if ":" in subnet else "10.0.0.11/24"
    req = request("ubuntu", "ufw", cluster_subnet=subnet, static_ip=static, gateway=None,
                  dns=None)
    part = build_plan(req, replace(FACTS, files=files)).part("firewall")
    assert part is not None
    assert (warned in " ".join(part.warnings)) if warned else not part.warnings


@pytest.mark.parametrize("subnet,static_ip", [("10.0.0.0/24", "10.0.0.11/24"),
                                              ("fd00::/64", "fd00::11/64")])
def test_every_firewall_gates_both_families(subnet: str, static_ip: str) -> None:
    """iptables renders an ip6tables chain beside the iptables one (and reverts both); only
    the subnet's family accepts; nftables' table is inet; firewalld's family follows."""
    def part(fw: str) -> Any:
        req = request("rhel9", fw, cluster_subnet=subnet, static_ip=static_ip, gateway=None,
                      dns=None)
        return build_plan(req, FACTS).part("firewall")

    ipt = part("iptables")
    files = {f.path: f.content for f in ipt.files}
    assert set(files) == {"/etc/ddpnet/firewall.iptables", "/etc/ddpnet/firewall.ip6tables"}
    assert sum("-j ACCEPT" in c for c in files.values()) == 1
    assert all("--ctstate NEW" in c and "-j DROP" in c for c in files.values())
    tools = {c.argv[0] for c in ipt.apply} | {c.argv[0] for c in ipt.revert}
    assert tools == {"iptables-restore", "iptables", "ip6tables-restore", "ip6tables"}
    assert all(c.onlyif == ("test", "-e", "/proc/net/if_inet6") for c in ipt.apply
               if c.argv[0].startswith("ip6"))
    assert "table inet ddpnet {" in part("nftables").files[0].content
    family = "ipv6" if ":" in subnet else "ipv4"
    assert all(f'family="{family}"' in c.argv[-1] for c in part("firewalld").apply[:-1])

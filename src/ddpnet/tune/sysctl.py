"""The sysctl drop-in: the guides' values as a floor, scaled up with the link speed.

:func:`profile_for` is the one pure table of values (the doctor engineer keeps a
``profile_for(link_speed_mbps)`` of their own; see the README for unifying them). Buffer sizes
follow ESnet's fasterdata host tuning for 10/40/100 Gb/s hosts; every value carries a comment
saying why, and a scope: ``netns`` keys exist per network namespace (and can be proven in a lab
node), ``host`` keys only in the initial namespace.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from dataclasses import dataclass

from ddpnet.tune.model import RDZV_PORT, Command, FileChange, HostFacts, Part, TuneRequest

PATH = "/etc/sysctl.d/90-ddpnet.conf"

MIB = 1024 * 1024


@dataclass(frozen=True)
class Setting:
    key: str
    value: str
    why: str
    #: "netns": the key exists in every network namespace (containers, lab nodes); "host":
    #: host-wide on most kernels (recent ones, e.g. 6.18, namespace rmem_max/wmem_max too)
    scope: str = "netns"


def profile_for_speed(speed_mbps: int | None) -> tuple[str, str]:
    """``(profile, reason)`` for a link speed: the smallest profile the link reaches."""
    if speed_mbps is None or speed_mbps <= 0:
        return "guide", "link speed unknown: the guides' values"
    for floor, name in ((100_000, "100g"), (40_000, "40g"), (10_000, "10g")):
        if speed_mbps >= floor:
            return name, f"link speed {speed_mbps} Mb/s >= {floor // 1000} Gb/s"
    return "guide", f"link speed {speed_mbps} Mb/s < 10 Gb/s: the guides' values"


#: profile -> (rmem/wmem max, tcp_rmem, tcp_wmem). Maxima from ESnet's host tuning (64 MiB
#: for 10G, 128 MiB for 40G, 2 GiB with 1 GiB autotuning for 100G); autotuning reaches the
#: socket maximum so ``ddpnet doctor``'s targets (``ddpnet.sysctl_profile``) hold after tune.
_BUFFERS: dict[str, tuple[int, str, str]] = {
    "guide": (16 * MIB, f"4096 87380 {16 * MIB}", f"4096 65536 {16 * MIB}"),
    "10g": (64 * MIB, f"4096 87380 {64 * MIB}", f"4096 65536 {64 * MIB}"),
    "40g": (128 * MIB, f"4096 87380 {128 * MIB}", f"4096 65536 {128 * MIB}"),
    "100g": (2147483647, f"4096 {64 * MIB} {1024 * MIB}", f"4096 {64 * MIB} {1024 * MIB}"),
}


def merge_reserved(current: str, ports: tuple[int, ...]) -> str:
    """``ip_local_reserved_ports`` keeping what is reserved already (ranges like 8000-8010)."""
    items = [x.strip() for x in current.replace("\n", ",").split(",") if x.strip()]

    def covered(port: int) -> bool:
        for item in items:
            lo, _, hi = item.partition("-")
            if lo.isdigit() and int(lo) <= port <= int(hi or lo):
                return True
        return False

    items += [str(p) for p in ports if not covered(p)]
    # sorted, as the kernel prints it back, so the file and `sysctl -n` agree
    return ",".join(sorted(set(items), key=lambda x: int(x.partition("-")[0] or 0)))


def profile_for(
    profile: str,
    master_port: int,
    reserved_now: str = "",
    port_range: tuple[int, int] | None = None,
) -> tuple[Setting, ...]:
    """Every sysctl value of a profile, each with why (pure)."""
    bmax, rmem, wmem = _BUFFERS[profile]
    fast = profile != "guide"
    settings = [
        Setting("net.core.rmem_max", str(bmax),
                f"largest receive buffer a socket may ask for ({profile} profile)", "host"),
        Setting("net.core.wmem_max", str(bmax),
                f"largest send buffer a socket may ask for ({profile} profile)", "host"),
        Setting("net.ipv4.tcp_rmem", rmem,
                "TCP receive autotuning min/default/max: lets gradient streams fill the link"),
        Setting("net.ipv4.tcp_wmem", wmem,
                "TCP send autotuning min/default/max"),
        Setting("net.ipv4.tcp_fin_timeout", "30",
                "free sockets of finished ranks sooner (guides' value; default 60)"),
        Setting("net.ipv4.tcp_max_syn_backlog", "8192",
                "every rank connects to the master at once at rendezvous (guides: 4096)"),
        Setting("net.core.somaxconn", "4096",
                "TCPStore's listen backlog: world-size connections arrive together "
                "(raise it above the number of ranks for 4096+ ranks)"),
    ]
    if fast:
        settings += [
            Setting("net.ipv4.tcp_mtu_probing", "1",
                    "recover from black-hole paths when jumbo frames are in use (ESnet)"),
            Setting("net.core.netdev_max_backlog", "250000",
                    "queue more packets per CPU before dropping at 10+ Gb/s (ESnet)", "host"),
        ]
    reserved = merge_reserved(reserved_now, (master_port, RDZV_PORT))
    settings.append(Setting(
        "net.ipv4.ip_local_reserved_ports", reserved,
        f"keep MASTER_PORT {master_port} and the rendezvous port {RDZV_PORT} out of the "
        "ephemeral range so an outgoing socket cannot take them"))
    if port_range is not None:
        settings.append(Setting(
            "net.ipv4.ip_local_port_range", f"{port_range[0]} {port_range[1]}",
            "a small explicit ephemeral range, so the firewall opens only these ports to "
            "gloo/NCCL"))
    return tuple(settings)


def render_file(settings: tuple[Setting, ...], profile: str, reason: str) -> str:
    lines = [
        "# Written by `ddpnet tune`; `ddpnet tune --revert` removes it and restores the",
        "# values the kernel had before. Do not append to /etc/sysctl.conf: this drop-in",
        "# is the one place these keys are set.",
        f"# profile: {profile} ({reason})",
    ]
    for s in settings:
        lines += ["", *textwrap.wrap(s.why, 88, initial_indent="# ", subsequent_indent="# "),
                  f"{s.key} = {s.value}"]
    return "\n".join(lines) + "\n"


def render(req: TuneRequest, facts: HostFacts) -> Part:
    reason = req.sources.get("profile", "")
    settings = profile_for(req.profile, req.master_port, facts.reserved_ports, req.port_range)
    content = render_file(settings, req.profile, reason)
    revert = tuple(
        Command(("sysctl", "-q", "-w", f"{s.key}={facts.sysctl_now[s.key]}"),
                f"restore {s.key} to its value before ddpnet")
        for s in settings if s.key in facts.sysctl_now
    )
    return Part(
        name="sysctl",
        files=(FileChange(PATH, content, 0o644, "sysctl drop-in"),),
        apply=(Command(("sysctl", "-q", "-e", "-p", PATH),
                       "load the drop-in now (-e: a container lacks the host-wide keys)"),),
        revert=revert,
        keep_first_revert=True,
        notes=(f"profile {req.profile}: {reason}",),
    )



def settings_in(content: str) -> dict[str, str]:
    """``key -> value`` of a drop-in (comments and blank lines skipped)."""
    out: dict[str, str] = {}
    for line in content.splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.strip().startswith(("#", ";")):
            out[key.strip()] = " ".join(value.split())
    return out


def mismatches(content: str, live: Mapping[str, str | None]) -> tuple[str, ...]:
    """Keys the kernel did not take after ``sysctl -p`` (``sysctl -e`` does not fail on
    them): absent in this namespace, or refused (a host-wide key from inside a container)."""
    out = []
    for key, want in settings_in(content).items():
        got = live.get(key)
        if got is None:
            out.append(f"{key}: not in this kernel/namespace (host-wide key in a container?)")
        elif " ".join(got.split()) != want:
            out.append(f"{key} = {' '.join(got.split())}, not {want}: the kernel refused it "
                       "(set it on the host, outside the container)")
    return tuple(out)


def all_keys() -> tuple[str, ...]:
    """Every key any profile may set (their values are captured before an apply)."""
    keys = [s.key for p in _BUFFERS for s in profile_for(p, 1, "", (1024, 65535))]
    return tuple(dict.fromkeys(keys))

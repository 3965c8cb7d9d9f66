"""The sysctl drop-in: the values of ``ddpnet.sysctl_profile`` (the one table of values,
reasons and speed tiers that ``ddpnet doctor`` checks against) plus the port keys only tune
sets. Every value is written with its reason as a comment, and a scope: ``netns`` keys exist
per network namespace (and can be proven in a lab node), ``host`` keys only in the initial
namespace.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from ddpnet.sysctl_profile import TIER_NAMES, profile_of, tier_for, tier_named
from ddpnet.tune.model import RDZV_PORT, Command, FileChange, HostFacts, Part, TuneRequest

PATH = "/etc/sysctl.d/90-ddpnet.conf"


@dataclass(frozen=True)
class Setting:
    key: str
    value: str
    why: str
    #: "netns": the key exists in every network namespace (containers, lab nodes); "host":
    #: host-wide on most kernels (recent ones, e.g. 6.18, namespace rmem_max/wmem_max too)
    scope: str = "netns"
    #: the value is a floor (more is as good): a host value above it is kept, never lowered
    floor: bool = False


def profile_for_speed(speed_mbps: int | None) -> tuple[str, str]:
    """``(profile, reason)`` for a link speed: the largest tier the link reaches."""
    tier, reason = tier_for(speed_mbps)
    return tier.name, reason


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
    """Every sysctl value of a profile, each with why (pure): the shared table's targets,
    then the port reservations."""
    settings = [Setting(t.name, t.recommended, t.why, t.scope, floor=t.op == "min")
                for t in profile_of(tier_named(profile)).targets.values()]
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


def higher_of(want: str, have: str) -> str:
    """The element-wise maximum of two values of one key (``tcp_rmem``'s three fields each
    keep the larger), ``want`` when they do not compare (different shapes, not numbers)."""
    a, b = want.split(), have.split()
    if len(a) != len(b) or not all(x.isdigit() and len(x) <= 20 for x in a + b):
        return want
    return " ".join(str(max(int(x), int(y))) for x, y in zip(a, b, strict=True))


def keep_higher(settings: tuple[Setting, ...], now: Mapping[str, str],
                where: str = "this host") -> tuple[tuple[Setting, ...], tuple[str, ...]]:
    """Never lower a floor the host already exceeds: the settings with each such value kept,
    and a note per kept key (pure)."""
    out: list[Setting] = []
    notes: list[str] = []
    for s in settings:
        have = now.get(s.key)
        kept = higher_of(s.value, have) if s.floor and have else s.value
        if kept != s.value:
            notes.append(f"{s.key} = {kept} kept: higher than the profile's {s.value} "
                         f"({where}); tune never lowers a value")
            s = replace(s, value=kept, why=f"{s.why}; the current value ({where}) is higher "
                        f"than the profile's {s.value} and is kept")
        out.append(s)
    return tuple(out), tuple(notes)


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
    settings, kept = keep_higher(
        profile_for(req.profile, req.master_port, facts.reserved_ports, req.port_range),
        facts.sysctl_now, facts.sources.get("sysctl", "this host"))
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
        notes=(f"profile {req.profile}: {reason}", *kept),
    )


def settings_in(content: str) -> dict[str, str]:
    """``key -> value`` of a drop-in (comments and blank lines skipped; sysctl.d's ``-key``
    and ``net/ipv4/x`` spellings read as ``key`` and ``net.ipv4.x``)."""
    out: dict[str, str] = {}
    for line in content.splitlines():
        key, sep, value = line.partition("=")
        key = key.strip().lstrip("-")
        if sep and key and not key.startswith(("#", ";")):
            if "/" in key.split(".")[0]:  # the first separator names the separator
                key = key.translate(str.maketrans("/.", "./"))
            out[key] = " ".join(value.split())
    return out


#: where ``sysctl --system`` reads drop-ins, first directory first (a file name there hides
#: the same name in the later ones); ``/etc/sysctl.conf`` is read after all of them
CONF_DIRS = ("etc/sysctl.d", "run/sysctl.d", "usr/local/lib/sysctl.d", "usr/lib/sysctl.d",
             "lib/sysctl.d")
CONF_MAIN = "etc/sysctl.conf"


def load_order(paths: Iterable[str]) -> list[str]:
    """The files (relative to the root) in the order ``sysctl --system`` applies them, by
    file name across :data:`CONF_DIRS`, then sysctl.conf. ddpnet's own drop-in is left out:
    its values are not the host's."""
    found = set(paths)
    by_name: dict[str, str] = {}
    for d in reversed(CONF_DIRS):
        for p in sorted(found):
            folder, _, name = p.rpartition("/")
            if folder == d and name.endswith(".conf"):
                by_name[name] = p
    ours = PATH.rpartition("/")[2]
    order = [by_name[n] for n in sorted(by_name) if n != ours]
    return order + ([CONF_MAIN] if CONF_MAIN in found else [])


def configured(texts: Iterable[str]) -> dict[str, str]:
    """``key -> value`` after reading the files in order (the last one wins)."""
    out: dict[str, str] = {}
    for text in texts:
        out.update(settings_in(text))
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


def values_before(revert: object) -> dict[str, str]:
    """``key -> value`` the kernel had before ddpnet's first apply, read back from the
    journal's sysctl revert commands (``sysctl -q -w key=value``); anything else is skipped
    (a journal is data from disk, not trusted to have our shape)."""
    out: dict[str, str] = {}
    for cmd in revert if isinstance(revert, list) else ():
        argv = cmd.get("argv") if isinstance(cmd, Mapping) else None
        if (isinstance(argv, list) and len(argv) == 4 and argv[:3] == ["sysctl", "-q", "-w"]
                and isinstance(argv[3], str) and "=" in argv[3]):
            key, _, value = argv[3].partition("=")
            out[key] = value
    return out


def all_keys() -> tuple[str, ...]:
    """Every key any profile may set (their values are captured before an apply)."""
    keys = [s.key for p in TIER_NAMES for s in profile_for(p, 1, "", (1024, 65535))]
    return tuple(dict.fromkeys(keys))

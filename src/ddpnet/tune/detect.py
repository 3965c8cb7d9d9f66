"""Pure detection: the distribution from os-release (the firewall in charge is
:func:`ddpnet.net.firewall.front_end`)."""

from __future__ import annotations

import shlex

from ddpnet.errors import ConfigError

_RHEL_LIKE = {"rhel", "centos", "rocky", "almalinux", "ol", "scientific", "cloudlinux"}


def parse_os_release(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and not key.startswith("#"):
            try:
                parts = shlex.split(value)
            except ValueError:
                parts = [value]
            out[key.strip()] = parts[0] if parts else ""
    return out


def detect_distro(os_release: str | None, where: str = "/etc/os-release") -> tuple[str, str]:
    """``(distro, reason)`` or a ConfigError naming --distro."""
    hint = "pass --distro rhel7|rhel8|rhel9|ubuntu|debian"
    if os_release is None:
        raise ConfigError(f"cannot detect the distribution: {where} is missing", hint)
    info = parse_os_release(os_release)
    ident = info.get("ID", "").lower()
    like = set(info.get("ID_LIKE", "").lower().split())
    major = info.get("VERSION_ID", "").split(".")[0]
    label = f"{where}: ID={ident} VERSION_ID={info.get('VERSION_ID', '')}"
    if ident == "ubuntu":
        return "ubuntu", label
    if ident == "debian" or (ident != "ubuntu" and "debian" in like and "ubuntu" not in like):
        return "debian", label
    if "ubuntu" in like:
        return "ubuntu", label
    if ident in _RHEL_LIKE or "rhel" in like or "fedora" in like:
        if major in ("7", "8", "9"):
            return f"rhel{major}", label
        if major.isdigit() and int(major) > 9:
            return "rhel9", label + " (newer than 9: rendered as rhel9)"
    raise ConfigError(f"unknown distribution ({label})", hint)

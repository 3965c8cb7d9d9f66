"""sysctl family: TCP buffer and backlog settings against the profile for the training
link's speed (``ddpnet.sysctl_profile``, the table ``tune`` writes from), with the exact
``sysctl -w`` and sysctl.d fix."""

from __future__ import annotations

from ddpnet.doctor.base import Check, CheckResult, Host, Inputs
from ddpnet.sysctl_profile import SysctlTarget, checked_keys, profile_for


def link_speed(inputs: Inputs) -> int | None:
    """The selected interface's speed, used to pick the profile."""
    for iface in inputs.interfaces:
        if iface.name == inputs.selected.name:
            return iface.speed_mbps
    return None


class SysctlCheck(Check):
    family = "sysctl"

    def __init__(self, key: str) -> None:
        self.key = key
        self.id = f"sysctl.{key}"  # type: ignore[misc]
        self.title = key  # type: ignore[misc]

    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        speed = link_speed(inputs)
        target: SysctlTarget = profile_for(speed).targets[self.key]
        current = host.sysctl(self.key)
        facts = {"sysctl": {self.key: current}}
        if current is None:
            return self.skip(f"{self.key} not readable here (no such key in this namespace)",
                             **facts)
        ok = target.satisfied_by(current)
        where = f"{speed} Mb/s link" if speed else "link speed unknown"
        word = "at least" if target.op == "min" else "at most"
        if ok is None:
            return self.warn(f"{self.key} = {current!r} is not a number", **facts)
        if ok:
            return self.ok(f"{self.key} = {current}", f"profile ({where}): {word} "
                           f"{target.value}", **facts)
        value = f"'{target.recommended}'" if " " in target.recommended else target.recommended
        fix = (f"sysctl -w {self.key}={value} ; persist: '{self.key} = {target.recommended}' "
               "in /etc/sysctl.d/90-ddpnet.conf (ddpnet tune does both)")
        return self.warn(
            f"{self.key} = {current}, want {word} {target.value}",
            f"{target.why}; profile for {where}", fix, **facts,
        )


KEYS = checked_keys()
CHECKS: tuple[Check, ...] = tuple(SysctlCheck(key) for key in KEYS)

"""/etc/profile.d/ddpnet.sh: GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME for login shells, as
defaults a job can still override."""

from __future__ import annotations

from ddpnet.tune.model import FileChange, HostFacts, Part, TuneRequest

PATH = "/etc/profile.d/ddpnet.sh"


def render_env(iface: str, reason: str) -> str:
    return "\n".join([
        "# Written by `ddpnet tune`: the interface gloo and NCCL open their sockets on.",
        f"# {iface}: {reason}",
        "# Defaults only: a job that exports its own value keeps it.",
        f': "${{GLOO_SOCKET_IFNAME:={iface}}}"',
        f': "${{NCCL_SOCKET_IFNAME:={iface}}}"',
        "export GLOO_SOCKET_IFNAME NCCL_SOCKET_IFNAME",
        "",
    ])


def render(req: TuneRequest, facts: HostFacts) -> Part:
    return Part(name="env", files=(FileChange(PATH, render_env(facts.iface, facts.iface_reason),
                                              0o644, "socket interface for gloo/NCCL"),))

"""environment family: leftovers from debugging sessions (NCCL_P2P_DISABLE and friends) that
silently slow or hang jobs, and socket-interface variables that name no interface or use the
wrong syntax for their library."""

from __future__ import annotations

import re

from ddpnet.doctor.base import Check, CheckResult, Host, Inputs

#: variable -> why it hurts when left set (values that are harmless are not listed)
DEBUG_VARS: dict[str, str] = {
    "NCCL_P2P_DISABLE": "disables NVLink/PCIe peer-to-peer: intra-node traffic goes through "
                        "host memory",
    "NCCL_SHM_DISABLE": "disables the shared-memory transport between local GPUs",
    "NCCL_IB_DISABLE": "forces TCP sockets even where InfiniBand/RoCE is available",
    "NCCL_NET_GDR_LEVEL": "changes GPUDirect RDMA use (usually copied from a forum post)",
    "NCCL_P2P_LEVEL": "restricts which GPU pairs use peer-to-peer",
    "NCCL_ALGO": "forces one collective algorithm for every size",
    "NCCL_PROTO": "forces one protocol for every size",
    "NCCL_MIN_NCHANNELS": "overrides NCCL's channel tuning",
    "NCCL_MAX_NCHANNELS": "caps NCCL's channels (bandwidth)",
    "NCCL_BUFFSIZE": "overrides NCCL's buffer size",
    "NCCL_LAUNCH_MODE": "changes kernel launch ordering (debugging hangs)",
    "NCCL_CHECKS_DISABLE": "debug setting",
    "NCCL_DEBUG_SUBSYS": "verbose NCCL logging",
    "CUDA_LAUNCH_BLOCKING": "serialises every CUDA kernel launch: very slow",
    "TORCH_DISTRIBUTED_DEBUG": "DETAIL/INFO adds collective consistency checks (slow)",
    "TORCH_NCCL_BLOCKING_WAIT": "blocks the CPU on every collective",
    "NCCL_BLOCKING_WAIT": "blocks the CPU on every collective (old name)",
}
#: values that are harmless for the listed variables
_HARMLESS = {"NCCL_P2P_DISABLE": {"0"}, "NCCL_SHM_DISABLE": {"0"}, "NCCL_IB_DISABLE": {"0"},
             "CUDA_LAUNCH_BLOCKING": {"0"}, "TORCH_DISTRIBUTED_DEBUG": {"OFF"},
             "TORCH_NCCL_BLOCKING_WAIT": {"0"}, "NCCL_BLOCKING_WAIT": {"0"},
             "NCCL_CHECKS_DISABLE": {"0"}}


class DebugLeftovers(Check):
    id = "environment.debug-vars"
    family = "environment"
    title = "debug leftovers"

    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        found = {k: host.environ[k] for k in DEBUG_VARS
                 if k in host.environ and host.environ[k].strip() not in _HARMLESS.get(k, ())}
        nccl_debug = host.environ.get("NCCL_DEBUG", "").upper()
        if nccl_debug == "TRACE":
            found["NCCL_DEBUG"] = "TRACE"
        facts = {"env_overrides": found}
        if not found:
            return self.ok("no NCCL/torch debug variables set", **facts)
        detail = "; ".join(f"{k}={v}: {DEBUG_VARS.get(k, 'per-call logging (very slow)')}"
                           for k, v in found.items())
        return self.warn(f"debug settings left set: {', '.join(found)}", detail,
                         f"unset {' '.join(found)}  (and remove them from ~/.bashrc / the job "
                         "script)", **facts)


_NAME = re.compile(r"^[A-Za-z0-9_.:@\-]+$")


def ifname_problems(var: str, value: str, names: set[str]) -> list[str]:
    """Why ``var=value`` would not select an interface here (empty list: fine)."""
    value = value.strip()
    if not value:
        return [f"{var} is empty"]
    if var == "NCCL_SOCKET_IFNAME":
        # prefixes, comma separated; ^ excludes; = exact names
        body = value[1:] if value.startswith("^") else value
        exact = body.startswith("=")
        body = body[1:] if exact else body
        tokens = body.split(",")
        bad = [t for t in tokens if not _NAME.match(t)]
        if bad:
            return [f"{var}={value!r}: {bad[0]!r} is not an interface name (syntax: "
                    "eth0,ib or ^docker,lo or =eth0)"]
        if value.startswith("^"):
            left = [n for n in names if not any(
                (n == t if exact else n.startswith(t)) for t in tokens) and n != "lo"]
            return [] if left else [f"{var}={value} excludes every interface"]
        hits = [n for n in names if any((n == t if exact else n.startswith(t)) for t in tokens)]
        return [] if hits else [f"{var}={value} matches no interface (have "
                                f"{', '.join(sorted(names))})"]
    # GLOO_SOCKET_IFNAME: comma separated exact names; TP_SOCKET_IFNAME: one exact name
    if value.startswith(("^", "=")):
        return [f"{var}={value!r}: {var} takes exact names, not NCCL's ^/= syntax"]
    tokens = value.split(",") if var == "GLOO_SOCKET_IFNAME" else [value]
    bad = [t for t in tokens if not _NAME.match(t)]
    if bad:
        return [f"{var}={value!r}: {bad[0]!r} is not an interface name"]
    missing = [t for t in tokens if t not in names]
    if missing:
        return [f"{var}={value}: no interface {', '.join(missing)} on this node (have "
                f"{', '.join(sorted(names))})"]
    return []


class IfnameVars(Check):
    id = "environment.ifname"
    family = "environment"
    title = "socket interface variables"

    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        names = {i.name for i in inputs.interfaces}
        set_vars = {v: host.environ[v] for v in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME",
                                                  "TP_SOCKET_IFNAME") if v in host.environ}
        if not set_vars:
            return self.ok("GLOO/NCCL/TP_SOCKET_IFNAME not set (ddpnet.init selects one)")
        problems = [p for var, value in set_vars.items()
                    for p in ifname_problems(var, value, names)]
        shown = " ".join(f"{k}={v}" for k, v in set_vars.items())
        if problems:
            target = inputs.selected.name or "<training iface>"
            return self.fail("; ".join(problems), shown,
                             f"export GLOO_SOCKET_IFNAME={target} NCCL_SOCKET_IFNAME={target} "
                             "(or unset them and let ddpnet.init select)")
        return self.ok(shown)


CHECKS: tuple[Check, ...] = (DebugLeftovers(), IfnameVars())

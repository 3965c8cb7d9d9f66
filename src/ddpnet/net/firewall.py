"""Which firewalls are active on this host and what their rule sets are: the one reader, used
by ``doctor`` (which evaluates the rules) and ``tune`` (which renders rules for the firewall in
charge).

Pure: the parsers of each tool's output (``nft -j list ruleset``, ``iptables-save`` or
``iptables -S``, ``ufw.conf``, ``/etc/default/ufw``, ``ufw status``) and :func:`live_state` /
:func:`image_state`, which compose a :class:`FirewallState` from them. Edge: :func:`read_state`
runs the tools (through :func:`ddpnet.subproc.run_command`, bounded, concurrently) and reads
the files under a root, so tests pass fixture trees and canned outputs.
"""

from __future__ import annotations

import json
import shlex
import shutil
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddpnet.subproc import CommandOutput, run_command

#: seconds each tool may take (doctor's budget; ``tune`` passes its own)
TIMEOUT_S = 2.0
#: the front ends first: firewalld and ufw drive nftables/iptables themselves
MANAGERS = ("firewalld", "ufw", "nftables", "iptables")
#: what ``ddpnet tune`` adds (its nftables table, its iptables chain): not "a firewall the
#: user runs" when tune decides which one to render for
OUR_NFT_TABLE = "ddpnet"
OUR_IPT_CHAIN = "DDPNET"
#: where an image enables firewalld (systemctl enable firewalld)
FIREWALLD_WANTS = "systemd/system/multi-user.target.wants/firewalld.service"

#: the commands each manager's rules are read with
COMMANDS: Mapping[str, tuple[str, ...]] = {
    "firewalld": ("firewall-cmd", "--list-all-zones"),
    "ufw": ("ufw", "status"),
    "iptables": ("iptables-save", "-t", "filter"),
    # IPv6 has its own iptables tables: a v4-only rule set leaves v6 open (issue 17)
    "ip6tables": ("ip6tables-save", "-t", "filter"),
    "nftables": ("nft", "-j", "list", "ruleset"),
}

Runner = Callable[[Sequence[str], float], "CommandOutput | None"]
ChainKey = tuple[str, str, str]  # family, table, chain


# --------------------------------------------------------------------------- nftables

@dataclass(frozen=True)
class NftRuleset:
    """``nft -j list ruleset``: chains (with hook, type, priority, policy) and their rules."""

    chains: Mapping[ChainKey, Mapping[str, Any]]
    rules: Mapping[ChainKey, tuple[Mapping[str, Any], ...]]


def parse_nft(text: str) -> NftRuleset:
    """Raises ValueError (JSON, or not nft's shape) or KeyError (an item without its fields)
    on a broken dump."""
    data = json.loads(text)
    items = data.get("nftables", []) if isinstance(data, dict) else None
    if not isinstance(items, list) or not all(
            isinstance(i, dict) and all(isinstance(v, dict) for v in i.values()) for i in items):
        raise ValueError("not an nft -j dump: {\"nftables\": [objects]}")
    chains: dict[ChainKey, Mapping[str, Any]] = {}
    rules: dict[ChainKey, list[Mapping[str, Any]]] = {}
    try:
        for item in items:
            if "chain" in item:
                c = item["chain"]
                chains[(c["family"], c["table"], c["name"])] = c
            elif "rule" in item:
                r = item["rule"]
                rules.setdefault((r["family"], r["table"], r["chain"]), []).append(r)
    except TypeError as exc:  # a family, table or name that is a list or an object
        raise ValueError(f"not an nft -j dump ({exc})") from None
    return NftRuleset(chains, {k: tuple(v) for k, v in rules.items()})


def nft_input_chains(ruleset: NftRuleset, skip_iptables: bool = False,
                     family: int = 4) -> list[ChainKey]:
    """Base chains on the input hook of filter type that see a packet of IP ``family`` (``ip``
    or ``ip6`` tables, and ``inet`` for both), by priority. ``skip_iptables`` drops the
    ``ip``/``ip6 filter INPUT`` chain of iptables-nft (evaluated from iptables-save)."""
    own = "ip" if family == 4 else "ip6"
    found = []
    for key, c in ruleset.chains.items():
        if c.get("hook") != "input" or c.get("type", "filter") != "filter":
            continue
        if key[0] not in (own, "inet"):
            continue
        if skip_iptables and key[0] == own and key[2] == "INPUT":
            continue
        found.append(key)
    return sorted(found, key=lambda k: int(ruleset.chains[k].get("prio", 0)))


def has_nft_rules(ruleset: NftRuleset, skip_iptables: bool = False) -> bool:
    """Does nftables filter input: an input chain with a rule or a policy other than accept."""
    chains = nft_input_chains(ruleset, skip_iptables)
    return any(ruleset.rules.get(k) or ruleset.chains[k].get("policy", "accept") != "accept"
               for k in chains)


def nft_hooks_input_besides_ours(ruleset: NftRuleset) -> bool:
    """A table other than ddpnet's (and iptables-nft's ``ip``/``ip6 filter``) hooks input:
    the user runs nftables, so tune renders nftables rules."""
    for (family, table, _), chain in ruleset.chains.items():
        iptables_nft = family in ("ip", "ip6") and table == "filter"
        if chain.get("hook") == "input" and table != OUR_NFT_TABLE and not iptables_nft:
            return True
    return False


# --------------------------------------------------------------------------- iptables

@dataclass(frozen=True)
class IptRules:
    policies: Mapping[str, str]
    rules: Mapping[str, tuple[tuple[str, ...], ...]]


def _tokens(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError:
        return line.split()


def parse_iptables_save(text: str, table: str = "filter") -> IptRules | None:
    """The ``*filter`` table of ``iptables-save`` output, or ``iptables -S`` output (no table
    headers: ``-P CHAIN POLICY`` and ``-A`` lines); None when the table is absent."""
    policies: dict[str, str] = {}
    rules: dict[str, list[tuple[str, ...]]] = {}
    headers = any(raw.strip().startswith("*") for raw in text.splitlines())
    current = None if headers else table
    seen = not headers and bool(text.strip())
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("*"):
            current = line[1:]
            seen = seen or current == table
        elif current != table or not line or line.startswith("#"):
            continue
        elif line.startswith(":") or line.startswith("-P "):
            name, policy = ([*line.lstrip(":").removeprefix("-P ").split(), "", "-"])[:2]
            if name:  # a bare ":" names no chain
                policies[name] = policy
                rules.setdefault(name, [])
        elif line.startswith("-A "):
            tokens = _tokens(line)
            rules.setdefault(tokens[1], []).append(tuple(tokens[2:]))
    if not seen:
        return None
    return IptRules(policies, {k: tuple(v) for k, v in rules.items()})


def has_ipt_rules(rules: IptRules | None) -> bool:
    """Does iptables filter input: a rule in INPUT or a policy other than ACCEPT."""
    return rules is not None and (bool(rules.rules.get("INPUT"))
                                  or rules.policies.get("INPUT", "ACCEPT") != "ACCEPT")


def ipt_filters_input_besides_ours(rules: IptRules | None) -> bool:
    """INPUT has a rule that is not ddpnet's jump, or drops by policy: the user runs
    iptables."""
    if rules is None:
        return False
    theirs = [r for r in rules.rules.get("INPUT", ()) if OUR_IPT_CHAIN not in " ".join(r)]
    return bool(theirs) or rules.policies.get("INPUT") == "DROP"


# --------------------------------------------------------------------------- ufw

def ufw_enabled(conf: str | None) -> bool:
    """``ENABLED=yes`` in ``/etc/ufw/ufw.conf`` (a commented line does not count)."""
    return any(line.strip().replace(" ", "").lower() == "enabled=yes"
               for line in (conf or "").splitlines())


def ufw_input_policy(defaults: str | None) -> str:
    """``DEFAULT_INPUT_POLICY`` from ``/etc/default/ufw`` as written (quotes kept), or ""."""
    policy = ""
    for line in (defaults or "").splitlines():
        if line.startswith("DEFAULT_INPUT_POLICY="):
            policy = line.split("=", 1)[1]
    return policy


# --------------------------------------------------------------------------- the state

@dataclass(frozen=True)
class FirewallState:
    """Every firewall manager as read on this host (or in an image).

    ``managers`` filter input now (their rules were read: the ones doctor evaluates, in the
    order firewalld, ufw, iptables, nftables); the dumps are None where a manager is not
    active or its rules could not be read (``unreadable``). ``enabled`` are the managers
    switched on, ddpnet's own table and chain not counted (the one tune renders for is
    :func:`front_end` of them). ``where`` is ``live`` or ``image`` (files only: an image has
    no running firewall to ask).
    """

    managers: tuple[str, ...]
    nft: str | None
    iptables: str | None
    firewalld: str | None
    ufw_status: str | None
    ufw_policy: str
    unreadable: tuple[str, ...]
    enabled: tuple[str, ...] = field(default=())
    where: str = "live"
    #: ``ip6tables-save``: IPv6 has its own tables (None: not read, or not installed)
    ip6tables: str | None = None
    #: why each unreadable one is (``nftables: nft exited 1: Operation not permitted``)
    why_unreadable: tuple[str, ...] = ()

    def facts(self) -> dict[str, object]:
        return {"managers": list(self.managers) or ["none"],
                "unreadable": list(self.unreadable), "why": list(self.why_unreadable)}

    def unknown(self) -> str:
        """``cannot read the rules of X (why)``: the firewall is unknown, not open; "" when
        every manager was read."""
        if not self.unreadable:
            return ""
        why = "; ".join(self.why_unreadable)
        return f"cannot read the rules of {', '.join(self.unreadable)}" + \
            (f" ({why})" if why else "")

    def active(self) -> dict[str, bool]:
        """Each manager: switched on (not counting ddpnet's own rules)?"""
        return {name: name in self.enabled for name in MANAGERS}


def front_end(active: Mapping[str, bool]) -> tuple[str, str]:
    """``(manager, reason)`` of the firewall in charge, front ends first: firewalld and ufw
    drive nftables/iptables themselves, so their own rules are what a user must change."""
    for name, why in (
        ("firewalld", "firewalld is running"),
        ("ufw", "ufw is enabled"),
        ("nftables", "an nftables ruleset filters input"),
        ("iptables", "iptables INPUT has rules or a DROP policy"),
    ):
        if active.get(name):
            return name, why
    return "none", "no active firewall found"


def image_state(ufw_conf: str | None, ufw_defaults: str | None,
                firewalld_enabled: bool) -> FirewallState:
    """An image under a root: what its files enable (pure)."""
    enabled = [n for n, on in (("firewalld", firewalld_enabled),
                               ("ufw", ufw_enabled(ufw_conf))) if on]
    return FirewallState((), None, None, None, None, ufw_input_policy(ufw_defaults), (),
                         tuple(enabled), "image")


def commands_for(firewalld_running: bool, ufw_on: bool,
                 which: Callable[[str], str | None]) -> dict[str, tuple[str, ...]]:
    """The tools worth asking: firewalld's only while it runs (firewall-cmd is a Python
    program that takes a few hundred ms just to start), ufw's only when it is enabled."""
    wanted = {"firewalld": firewalld_running, "ufw": ufw_on, "iptables": True,
              "ip6tables": True, "nftables": True}
    return {name: argv for name, argv in COMMANDS.items()
            if wanted[name] and which(argv[0])}


def _dump(outs: Mapping[str, CommandOutput | None], name: str, unreadable: list[str],
          needle: str = "", why: list[str] | None = None) -> str | None:
    """A manager's output if it was asked and answered (with ``needle``), else None; a
    failed or missing answer is recorded as unreadable, and in ``why`` what the tool said."""
    if name not in outs:
        return None
    out = outs[name]
    if out is None or out.returncode != 0:
        unreadable.append(name)
        if why is not None:
            why.append(f"{name}: {_failure(COMMANDS[name][0], out)}")
        return None
    return out.stdout if needle in out.stdout else None


def _failure(tool: str, out: CommandOutput | None) -> str:
    """What a tool that did not answer said, one line (pure)."""
    if out is None:
        return f"{tool} gave no answer (timed out or could not start)"
    lines = (out.stderr or out.stdout).strip().splitlines()
    return f"{tool} exited {out.returncode}" + (f": {lines[-1].strip()}" if lines else "")


#: neither packet filter tool ran: the kernel's rules are unknown, not absent
NO_TOOLS = ("nft and iptables-save cannot be run (not installed or not on PATH): the kernel's "
            "packet filter rules are unknown")


def _nft_state(nft: str | None, iptables_read: bool, firewalld: bool,
               unreadable: list[str]) -> tuple[bool, bool]:
    """(filters input, hooks input besides ours) for a ruleset dump."""
    if nft is None:
        return False, False
    try:
        ruleset = parse_nft(nft)
    except (ValueError, KeyError):
        if not firewalld:  # firewalld's zones are evaluated instead: nothing is missing
            unreadable.append("nftables")
        return False, False
    return (not firewalld and has_nft_rules(ruleset, iptables_read),
            nft_hooks_input_besides_ours(ruleset))


def live_state(outs: Mapping[str, CommandOutput | None], ufw_conf: str | None,
               ufw_defaults: str | None, firewalld_running: bool) -> FirewallState:
    """Compose the state from the tools' answers (pure). ``outs`` holds an entry (None = no
    answer) for every manager that was asked, keyed as in :data:`COMMANDS`."""
    unreadable: list[str] = []
    why: list[str] = []
    firewalld = _dump(outs, "firewalld", unreadable, why=why)
    ufw_status = _dump(outs, "ufw", unreadable, "Status: active", why=why)
    ipt = _dump(outs, "iptables", unreadable, why=why)
    nft = _dump(outs, "nftables", unreadable, why=why)
    if "iptables" not in outs and "nftables" not in outs and not (firewalld or ufw_status):
        unreadable += ["nftables", "iptables"]
        why.append(NO_TOOLS)
    ipt_rules = parse_iptables_save(ipt) if ipt is not None else None
    nft_filters, nft_theirs = _nft_state(nft, ipt is not None, bool(firewalld), unreadable)
    filtering = {"firewalld": bool(firewalld), "ufw": bool(ufw_status),
                 "iptables": not ufw_status and has_ipt_rules(ipt_rules),
                 "nftables": nft_filters}
    switched_on = {"firewalld": firewalld_running, "ufw": ufw_enabled(ufw_conf),
                   "nftables": nft_theirs, "iptables": ipt_filters_input_besides_ours(ipt_rules)}
    return FirewallState(
        tuple(n for n in ("firewalld", "ufw", "iptables", "nftables") if filtering[n]),
        nft, ipt, firewalld, ufw_status, ufw_input_policy(ufw_defaults), tuple(unreadable),
        tuple(n for n in MANAGERS if switched_on[n]),
        ip6tables=_dump(outs, "ip6tables", []), why_unreadable=tuple(why))


# --------------------------------------------------------------------------- the edge

def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def process_running(proc: Path, name: str) -> bool:
    """Whether a process called ``name`` runs (``<proc>/<pid>/comm``): cheaper than asking
    ``firewall-cmd --state``, which takes a few hundred ms just to start."""
    try:
        pids = [p for p in proc.iterdir() if p.name.isdigit()]
    except OSError:
        return False
    return any((_read(p / "comm") or "").strip() == name for p in pids)


def read_state(
    root: Path = Path("/"),
    *,
    live: bool = True,
    etc: Path | None = None,
    proc: Path | None = None,
    run: Runner = run_command,
    which: Callable[[str], str | None] = shutil.which,
    timeout: float = TIMEOUT_S,
) -> FirewallState:
    """Read the firewall state of the host at ``root`` (``etc``/``proc`` default to its
    ``etc``/``proc``). ``live``: ask the running firewalls (each tool bounded by
    ``timeout``, all at once); otherwise ``root`` is an image and only its files are read."""
    etc = root / "etc" if etc is None else etc
    proc = root / "proc" if proc is None else proc
    ufw_conf, ufw_defaults = _read(etc / "ufw" / "ufw.conf"), _read(etc / "default" / "ufw")
    if not live:
        return image_state(ufw_conf, ufw_defaults, (etc / FIREWALLD_WANTS).exists())
    running = process_running(proc, "firewalld")
    jobs = commands_for(running, ufw_enabled(ufw_conf), which)
    with ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
        futures = {name: pool.submit(run, argv, timeout) for name, argv in jobs.items()}
        outs = {name: f.result() for name, f in futures.items()}
    return live_state(outs, ufw_conf, ufw_defaults, running)


def firewalld_default_zone(timeout: float = 2.0) -> str:
    """firewalld's default zone (``public`` when firewall-cmd cannot say): where tune opens
    the cluster's ports."""
    proc = run_command(("firewall-cmd", "--get-default-zone"), timeout)
    zone = proc.stdout.strip() if proc is not None and proc.returncode == 0 else ""
    return zone or "public"

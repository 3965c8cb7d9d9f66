"""Pure evaluators of firewall rule sets: would a new TCP connection from ``src`` to this
host's ``port`` (arriving on ``iif``) be accepted? One evaluator per manager: nftables (``nft
-j list ruleset``), iptables (``iptables-save``), firewalld (``firewall-cmd
--list-all-zones``), ufw (``ufw status``).

The rule sets are parsed by :mod:`ddpnet.net.firewall` (the one firewall reader); only the
evaluation lives here. Matches we cannot evaluate are treated as not matching and reported,
so a verdict is either certain or names the rule that makes it uncertain.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ddpnet.net.firewall import (
    IptRules,
    NftRuleset,
    nft_input_chains,
    parse_iptables_save,
    parse_nft,
)

Verdict = Literal["accept", "drop", "reject"]


@dataclass(frozen=True)
class Packet:
    """A new incoming TCP connection. ``src`` None = any source (matches on it are unknown)."""

    port: int
    src: str | None = None
    dst: str | None = None
    iif: str | None = None


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    #: the rule or policy that decided, in the manager's own syntax
    by: str
    #: where to insert an accepting rule (manager specific: "inet filter input", "INPUT")
    where: str = ""
    #: rules we could not evaluate that might have changed the decision
    uncertain: tuple[str, ...] = field(default=())


# --------------------------------------------------------------------------- shared matching

def _addr_in(addr: str | None, spec: str) -> bool | None:
    if addr is None:
        return None
    try:
        return ipaddress.ip_address(addr) in ipaddress.ip_network(spec, strict=False)
    except ValueError:
        return None


def _port_in(port: int, spec: str) -> bool | None:
    """``"29500"``, ``"1000:2000"``, ``"1000-2000"``, ``"80,443,1000:2000"``."""
    try:
        for part in spec.split(","):
            low, _, high = part.replace("-", ":").partition(":")
            if int(low) <= port <= int(high or low):
                return True
    except ValueError:
        return None
    return False


# --------------------------------------------------------------------------- nftables

class _Unknown(Exception):
    pass


def _nft_value_match(value: Any, right: Any) -> bool:
    """Does the packet's ``value`` (int port / str address / str name) match ``right``?"""
    if isinstance(right, dict):
        if "set" in right:
            return any(_nft_value_match(value, item) for item in right["set"])
        if "range" in right:
            low, high = right["range"]
            if isinstance(value, int):
                return bool(low <= value <= high)
            lo, v, hi = (ipaddress.ip_address(x) for x in (low, value, high))
            if not lo.version == v.version == hi.version:
                return False
            return bool(lo <= v <= hi)  # type: ignore[operator]
        if "prefix" in right:
            net = f"{right['prefix']['addr']}/{right['prefix']['len']}"
            return bool(_addr_in(value, net))
        raise _Unknown(json.dumps(right))
    if isinstance(right, list):
        return any(_nft_value_match(value, item) for item in right)
    if isinstance(right, str) and right.startswith("@"):
        raise _Unknown(f"named set {right}")
    if isinstance(value, int):
        return bool(value == right)
    if isinstance(value, str) and isinstance(right, str) and ("." in value or ":" in value) \
            and ("." in right or ":" in right):
        return _addr_in(value, right) is True
    if isinstance(right, str) and right.endswith("*"):
        return str(value).startswith(right[:-1])
    return bool(value == right)


def _nft_left(left: Any, pkt: Packet) -> Any:
    """The packet's value for a match's left side; raises _Unknown for what we do not model."""
    if isinstance(left, dict) and "payload" in left:
        proto, fld = left["payload"].get("protocol"), left["payload"].get("field")
        if proto == "tcp" and fld == "dport":
            return pkt.port
        if proto in ("tcp", "th") and fld == "dport":
            return pkt.port
        if proto == "ip" and fld == "saddr":
            if pkt.src is None:
                raise _Unknown("ip saddr (no cluster subnet known)")
            return pkt.src
        if proto == "ip" and fld == "daddr":
            if pkt.dst is None:
                raise _Unknown("ip daddr")
            return pkt.dst
        if proto == "ip" and fld == "protocol":
            return "tcp"
        if proto in ("ip6",):
            return _NOT_THIS_FAMILY
        if proto == "udp":
            return _NOT_THIS_FAMILY
    if isinstance(left, dict) and "meta" in left:
        key = left["meta"].get("key")
        if key == "l4proto":
            return "tcp"
        if key == "nfproto":
            return "ipv4"
        if key in ("iifname", "iif"):
            if pkt.iif is None:
                raise _Unknown(f"meta {key}")
            return pkt.iif
    if isinstance(left, dict) and "ct" in left and left["ct"].get("key") == "state":
        return "new"
    raise _Unknown(json.dumps(left))


_NOT_THIS_FAMILY = object()


def _nft_match(expr: Mapping[str, Any], pkt: Packet) -> bool:
    m = expr["match"]
    op = m.get("op", "==")
    value = _nft_left(m["left"], pkt)
    if value is _NOT_THIS_FAMILY:  # a udp/ip6 header match never matches our packet
        return bool(op == "!=")
    right = m["right"]
    if value == "new" and isinstance(m["left"], dict) and "ct" in m["left"]:
        states = right if isinstance(right, list) else \
            right.get("set", [right]) if isinstance(right, dict) else [right]
        hit = "new" in states
    else:
        hit = _nft_value_match(value, right)
    return not hit if op == "!=" else hit


_NFT_NONTERMINAL = {"counter", "log", "limit", "comment", "quota", "meta", "mangle",
                    "notrack", "ct"}


@dataclass
class _NftState:
    """One evaluation over a parsed ruleset: what could not be evaluated, the jump depth."""

    ruleset: NftRuleset
    uncertain: list[str]
    depth: int = 0


def _nft_rule_text(rule: Mapping[str, Any]) -> str:
    parts = []
    for expr in rule.get("expr", []):
        if "match" in expr:
            m = expr["match"]
            left = m["left"]
            if isinstance(left, dict) and "payload" in left:
                name = f"{left['payload'].get('protocol')} {left['payload'].get('field')}"
            elif isinstance(left, dict) and "meta" in left:
                name = f"meta {left['meta'].get('key')}"
            elif isinstance(left, dict) and "ct" in left:
                name = f"ct {left['ct'].get('key')}"
            else:
                name = json.dumps(left)
            op = m.get("op", "==")
            right = m["right"]
            if isinstance(right, dict) and "prefix" in right:
                right = f"{right['prefix']['addr']}/{right['prefix']['len']}"
            elif isinstance(right, dict) and "range" in right:
                right = "-".join(str(x) for x in right["range"])
            elif isinstance(right, dict) and "set" in right:
                right = "{ " + ", ".join(str(x) for x in right["set"]) + " }"
            parts.append(f"{name} {'' if op in ('==', 'in') else op + ' '}{right}")
        else:
            key = next(iter(expr), "")
            if key in ("jump", "goto"):
                parts.append(f"{key} {expr[key].get('target')}")
            elif key not in ("counter",):
                parts.append(key)
    where = f"{rule.get('family')} {rule.get('table')} {rule.get('chain')}"
    return f"[{where}] " + " ".join(parts)


def _nft_chain(state: _NftState, key: tuple[str, str, str], pkt: Packet
               ) -> tuple[Verdict, str, str] | None:
    """Evaluate one chain: a terminal verdict with its rule, or None (fall through/return)."""
    if state.depth > 32:
        raise _Unknown("jump depth")
    for rule in state.ruleset.rules.get(key, ()):
        # expressions in order: a failed match ends the rule, a verdict ends the chain
        for expr in rule.get("expr", []):
            if "match" in expr:
                try:
                    if not _nft_match(expr, pkt):
                        break
                except (_Unknown, ValueError, TypeError, KeyError) as exc:
                    if _nft_terminal(rule) is not None:
                        state.uncertain.append(f"{_nft_rule_text(rule)} ({exc})")
                    break
                continue
            if "vmap" in expr:  # a verdict map (firewalld uses them to dispatch to zones)
                try:
                    expr = _nft_vmap(expr["vmap"], pkt)
                except (_Unknown, ValueError, TypeError, KeyError) as exc:
                    state.uncertain.append(f"{_nft_rule_text(rule)} ({exc})")
                    break
                if expr is None:
                    break
            if "accept" in expr:
                return "accept", _nft_rule_text(rule), " ".join(key)
            if "drop" in expr:
                return "drop", _nft_rule_text(rule), " ".join(key)
            if "reject" in expr:
                return "reject", _nft_rule_text(rule), " ".join(key)
            if "return" in expr:
                return None
            for jump in ("jump", "goto"):
                if jump in expr:
                    target = (key[0], key[1], expr[jump]["target"])
                    state.depth += 1
                    result = _nft_chain(state, target, pkt)
                    state.depth -= 1
                    if result is not None or jump == "goto":
                        return result
                    break
            else:
                if not any(k in _NFT_NONTERMINAL for k in expr):
                    state.uncertain.append(f"{_nft_rule_text(rule)} (statement "
                                           f"{next(iter(expr))})")
                    break
    return None


def _nft_vmap(vmap: Mapping[str, Any], pkt: Packet) -> dict[str, Any] | None:
    """The verdict a verdict map gives the packet, or None when no element matches."""
    value = _nft_left(vmap["key"], pkt)
    if value is _NOT_THIS_FAMILY:
        return None
    data = vmap["data"]
    if isinstance(data, str):
        raise _Unknown(f"named map {data}")
    for element, verdict in data["set"]:
        if _nft_value_match(value, element):
            return dict(verdict)
    return None


def _nft_terminal(rule: Mapping[str, Any]) -> str | None:
    for expr in rule.get("expr", []):
        for key in ("accept", "drop", "reject", "jump", "goto", "vmap"):
            if key in expr:
                return key
    return None


def evaluate_nft(text: str, pkt: Packet, skip_iptables: bool = False) -> Decision | None:
    """None when no input chain exists (nftables filters nothing)."""
    ruleset = parse_nft(text)
    state = _NftState(ruleset, [])
    chains = nft_input_chains(ruleset, skip_iptables)
    if not chains:
        return None
    last: Decision | None = None
    for key in chains:
        result = _nft_chain(state, key, pkt)
        where = " ".join(key)
        if result is None:
            policy = ruleset.chains[key].get("policy", "accept")
            verdict: Verdict = "accept" if policy == "accept" else "drop"
            result = (verdict, f"[{where}] policy {policy}", where)
        if result[0] != "accept":
            return Decision(result[0], result[1], where, tuple(state.uncertain))
        last = Decision("accept", result[1], where, tuple(state.uncertain))
    return last


# --------------------------------------------------------------------------- iptables

_IPT_IGNORED_MODULES = {"tcp", "comment", "limit", "multiport", "state", "conntrack",
                        "addrtype", "hashlimit"}


def _ipt_match(args: Sequence[str], pkt: Packet) -> tuple[bool, str | None]:
    """(matches, target) for one rule's tokens; raises _Unknown on options we do not model."""
    i = 0
    target = None
    negate = False
    matched = True

    def apply(hit: bool | None, what: str) -> None:
        nonlocal matched, negate
        if hit is None:
            raise _Unknown(what)
        if negate:
            hit = not hit
        negate = False
        if not hit:
            matched = False

    while i < len(args):
        tok = args[i]
        val = args[i + 1] if i + 1 < len(args) else ""
        if tok == "!":
            negate = True
            i += 1
            continue
        if tok in ("-j", "-g"):
            target = ("goto:" if tok == "-g" else "") + val
            i += 2
            # target options (--reject-with ...) follow; ignore them
            break
        if tok in ("-p", "--protocol"):
            apply(val in ("tcp", "6", "all"), tok)
        elif tok in ("-s", "--source"):
            apply(None if pkt.src is None else any(_addr_in(pkt.src, s) for s in val.split(",")),
                  "-s (no cluster subnet known)")
        elif tok in ("-d", "--destination"):
            apply(None if pkt.dst is None else any(_addr_in(pkt.dst, s) for s in val.split(",")),
                  "-d")
        elif tok in ("-i", "--in-interface"):
            if pkt.iif is None:
                apply(None, "-i")
            else:
                apply(pkt.iif.startswith(val[:-1]) if val.endswith("+") else pkt.iif == val,
                      "-i")
        elif tok == "-m":
            if val not in _IPT_IGNORED_MODULES:
                raise _Unknown(f"-m {val}")
        elif tok in ("--dport", "--destination-port", "--dports", "--destination-ports"):
            apply(_port_in(pkt.port, val), tok)
        elif tok in ("--state", "--ctstate"):
            apply("NEW" in val.upper().split(","), tok)
        elif tok in ("--comment", "--limit", "--limit-burst"):
            pass
        elif tok == "--dst-type":
            apply(val == "LOCAL" or None, f"--dst-type {val}")
        elif tok == "--src-type":
            apply(val in ("UNICAST",) or None, f"--src-type {val}")
        elif tok == "--tcp-flags":
            i += 3
            continue
        elif tok == "--syn":
            apply(True, tok)
            i += 1
            continue
        else:
            raise _Unknown(tok)
        i += 2
    return matched, target


def _ipt_chain(rules: IptRules, chain: str, pkt: Packet, uncertain: list[str], depth: int = 0
               ) -> tuple[Verdict, str] | None:
    if depth > 32:
        return None
    for args in rules.rules.get(chain, ()):
        text = f"-A {chain} " + " ".join(args)
        try:
            matched, target = _ipt_match(args, pkt)
        except _Unknown as exc:
            if any(t in args for t in ("-j", "-g")):
                uncertain.append(f"{text} ({exc})")
            continue
        if not matched or target is None:
            continue
        goto = target.startswith("goto:")
        target = target.removeprefix("goto:")
        if target == "ACCEPT":
            return "accept", text
        if target == "DROP":
            return "drop", text
        if target == "REJECT":
            return "reject", text
        if target == "RETURN":
            return None
        if target in rules.rules or target in rules.policies:
            result = _ipt_chain(rules, target, pkt, uncertain, depth + 1)
            if result is not None or goto:
                return result
        # LOG, NFLOG and other non-terminal targets fall through
    return None


def evaluate_iptables(text: str, pkt: Packet) -> Decision | None:
    rules = parse_iptables_save(text)
    if rules is None or "INPUT" not in rules.policies:
        return None
    uncertain: list[str] = []
    result = _ipt_chain(rules, "INPUT", pkt, uncertain)
    if result is None:
        policy = rules.policies.get("INPUT", "ACCEPT")
        verdict: Verdict = "accept" if policy == "ACCEPT" else "drop"
        return Decision(verdict, f":INPUT {policy} (policy)", "INPUT", tuple(uncertain))
    return Decision(result[0], result[1], "INPUT", tuple(uncertain))


# --------------------------------------------------------------------------- firewalld

@dataclass(frozen=True)
class Zone:
    name: str
    default: bool
    target: str
    interfaces: tuple[str, ...]
    sources: tuple[str, ...]
    ports: tuple[str, ...]
    services: tuple[str, ...]


def parse_firewalld_zones(text: str) -> list[Zone]:
    """``firewall-cmd --list-all-zones`` output."""
    zones: list[Zone] = []
    block: dict[str, str] = {}
    head = ""

    def flush() -> None:
        if not head:
            return
        name = head.split()[0]
        zones.append(Zone(
            name, "(default" in head or "default)" in head, block.get("target", "default"),
            tuple(block.get("interfaces", "").split()), tuple(block.get("sources", "").split()),
            tuple(block.get("ports", "").split()), tuple(block.get("services", "").split()),
        ))

    for raw in text.splitlines():
        if not raw.strip():
            continue
        if not raw[0].isspace():
            flush()
            head, block = raw.strip(), {}
            continue
        key, _, value = raw.strip().partition(":")
        block[key.strip()] = value.strip()
    flush()
    return zones


def evaluate_firewalld(text: str, pkt: Packet) -> Decision | None:
    zones = parse_firewalld_zones(text)
    if not zones:
        return None
    zone = None
    if pkt.src is not None:
        zone = next((z for z in zones if any(_addr_in(pkt.src, s) for s in z.sources)), None)
    if zone is None and pkt.iif is not None:
        zone = next((z for z in zones if pkt.iif in z.interfaces), None)
    if zone is None:
        zone = next((z for z in zones if z.default), zones[0])
    where = f"zone {zone.name}"
    if zone.target.upper() == "ACCEPT":
        return Decision("accept", f"{where} target ACCEPT", zone.name)
    for spec in zone.ports:
        port, _, proto = spec.partition("/")
        if proto == "tcp" and _port_in(pkt.port, port):
            return Decision("accept", f"{where} port {spec}", zone.name)
    verdict: Verdict = "drop" if zone.target.upper() == "DROP" else "reject"
    return Decision(verdict, f"{where} (target {zone.target}) does not open {pkt.port}/tcp",
                    zone.name)


# --------------------------------------------------------------------------- ufw

def evaluate_ufw(status: str, default_policy: str, pkt: Packet) -> Decision | None:
    """``ufw status`` (first match wins) and DEFAULT_INPUT_POLICY from /etc/default/ufw."""
    if "Status: active" not in status:
        return None
    for raw in status.splitlines():
        line = raw.strip()
        m = re.match(r"^(\S+(?: \(v6\))?)\s+(ALLOW|DENY|REJECT|LIMIT)(?: IN)?\s+(.+)$", line)
        if not m or m.group(1) == "To":
            continue
        to, action, src = m.group(1), m.group(2), m.group(3).strip()
        if "(v6)" in to or "(v6)" in src:
            continue
        port_spec, _, proto = to.partition("/")
        if proto and proto != "tcp":
            continue
        if port_spec != "Anywhere":
            hit = _port_in(pkt.port, port_spec)
            if not hit:
                continue
        if src != "Anywhere":
            src_hit = _addr_in(pkt.src, src.split()[0])
            if not src_hit:
                continue
        verdict: Verdict = "accept" if action in ("ALLOW", "LIMIT") else \
            "reject" if action == "REJECT" else "drop"
        return Decision(verdict, f"ufw: {line}", "ufw")
    policy = default_policy.strip().strip('"').upper() or "DROP"
    verdict = "accept" if policy == "ACCEPT" else "reject" if policy == "REJECT" else "drop"
    return Decision(verdict, f"ufw default incoming policy {policy}", "ufw")

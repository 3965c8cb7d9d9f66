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
from collections.abc import Callable, Mapping, Sequence
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
    #: IP version: a v6 packet is seen by ``ip6``/``inet`` tables and ip6tables only
    family: int = 4


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
        return _nft_dict_match(value, right)
    if isinstance(right, list):
        return any(_nft_value_match(value, item) for item in right)
    if isinstance(right, str) and right.startswith("@"):
        raise _Unknown(f"named set {right}")
    if isinstance(value, int):
        return bool(value == right)
    if _looks_like_address(value) and _looks_like_address(right):
        return _addr_in(value, right) is True
    if isinstance(right, str) and right.endswith("*"):
        return str(value).startswith(right[:-1])
    return bool(value == right)


def _looks_like_address(text: Any) -> bool:
    return isinstance(text, str) and ("." in text or ":" in text)


def _nft_dict_match(value: Any, right: Mapping[str, Any]) -> bool:
    """A set, range or prefix on the right side of a match."""
    if "set" in right:
        return any(_nft_value_match(value, item) for item in right["set"])
    if "range" in right:
        low, high = right["range"]
        return _nft_in_range(value, low, high)
    if "prefix" in right:
        net = f"{right['prefix']['addr']}/{right['prefix']['len']}"
        return bool(_addr_in(value, net))
    raise _Unknown(json.dumps(right))


def _nft_in_range(value: Any, low: Any, high: Any) -> bool:
    """A port range, or an address range (never matching across IP versions)."""
    if isinstance(value, int):
        return bool(low <= value <= high)
    lo, v, hi = (ipaddress.ip_address(x) for x in (low, value, high))
    if not lo.version == v.version == hi.version:
        return False
    return bool(lo <= v <= hi)  # type: ignore[operator]


#: the left side reads a header of another family (udp, or ip6 for a v4 packet and ip for a
#: v6 one): the match never hits our packet
_NOT_THIS_FAMILY = object()
#: the reader does not model this left side
_NO_VALUE = object()


def _pkt_src(pkt: Packet) -> Any:
    if pkt.src is None:
        raise _Unknown("ip saddr (no cluster subnet known)")
    return pkt.src


def _pkt_dst(pkt: Packet) -> Any:
    if pkt.dst is None:
        raise _Unknown("ip daddr")
    return pkt.dst


#: (protocol, field) of a payload match -> the packet's value for it
_NFT_PAYLOAD: tuple[tuple[str, str, Callable[[Packet], Any]], ...] = (
    ("tcp", "dport", lambda pkt: pkt.port),
    ("th", "dport", lambda pkt: pkt.port),
    ("ip", "saddr", _pkt_src),
    ("ip", "daddr", _pkt_dst),
    ("ip", "protocol", lambda pkt: "tcp"),
    ("ip", "nexthdr", lambda pkt: "tcp"),
)


def _nft_payload(payload: Any, pkt: Packet) -> Any:
    proto, fld = payload.get("protocol"), payload.get("field")
    if proto in ("ip", "ip6"):  # the same fields, read from the packet's own header only
        if proto != ("ip" if pkt.family == 4 else "ip6"):
            return _NOT_THIS_FAMILY
        proto = "ip"
    for want_proto, want_fld, read in _NFT_PAYLOAD:
        if proto == want_proto and fld == want_fld:
            return read(pkt)
    if proto == "udp":
        return _NOT_THIS_FAMILY
    return _NO_VALUE


def _nft_meta(meta: Any, pkt: Packet) -> Any:
    key = meta.get("key")
    if key == "l4proto":
        return "tcp"
    if key == "nfproto":
        return "ipv4" if pkt.family == 4 else "ipv6"
    if key in ("iifname", "iif"):
        if pkt.iif is None:
            raise _Unknown(f"meta {key}")
        return pkt.iif
    return _NO_VALUE


def _nft_ct(ct: Any, pkt: Packet) -> Any:
    return "new" if ct.get("key") == "state" else _NO_VALUE


_NFT_LEFT: tuple[tuple[str, Callable[[Any, Packet], Any]], ...] = (
    ("payload", _nft_payload), ("meta", _nft_meta), ("ct", _nft_ct),
)


def _nft_left(left: Any, pkt: Packet) -> Any:
    """The packet's value for a match's left side; raises _Unknown for what we do not model."""
    if isinstance(left, dict):
        for kind, read in _NFT_LEFT:
            if kind in left:
                value = read(left[kind], pkt)
                if value is not _NO_VALUE:
                    return value
    raise _Unknown(json.dumps(left))


def _nft_match(expr: Mapping[str, Any], pkt: Packet) -> bool:
    m = expr["match"]
    op = m.get("op", "==")
    value = _nft_left(m["left"], pkt)
    if value is _NOT_THIS_FAMILY:  # a header of another family never matches our packet
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
        text = _nft_match_text(expr["match"]) if "match" in expr else _nft_statement_text(expr)
        if text is not None:
            parts.append(text)
    where = f"{rule.get('family')} {rule.get('table')} {rule.get('chain')}"
    return f"[{where}] " + " ".join(parts)


def _nft_match_text(m: Mapping[str, Any]) -> str:
    """A match as ``nft list`` would roughly print it: ``ip saddr 10.0.0.0/8``."""
    op = m.get("op", "==")
    name = _nft_left_name(m["left"])
    return f"{name} {'' if op in ('==', 'in') else op + ' '}{_nft_right_text(m['right'])}"


def _nft_left_name(left: Any) -> str:
    if isinstance(left, dict):
        if "payload" in left:
            return f"{left['payload'].get('protocol')} {left['payload'].get('field')}"
        if "meta" in left:
            return f"meta {left['meta'].get('key')}"
        if "ct" in left:
            return f"ct {left['ct'].get('key')}"
    return json.dumps(left)


def _nft_right_text(right: Any) -> Any:
    if isinstance(right, dict) and "prefix" in right:
        return f"{right['prefix']['addr']}/{right['prefix']['len']}"
    if isinstance(right, dict) and "range" in right:
        return "-".join(str(x) for x in right["range"])
    if isinstance(right, dict) and "set" in right:
        return "{ " + ", ".join(str(x) for x in right["set"]) + " }"
    return right


def _nft_statement_text(expr: Mapping[str, Any]) -> str | None:
    """A statement's keyword (with a jump's target); None for the counter we leave out."""
    key = next(iter(expr), "")
    if key in ("jump", "goto"):
        return f"{key} {expr[key].get('target')}"
    if key not in ("counter",):
        return str(key)
    return None


_ChainResult = tuple[Verdict, str, str] | None
#: (ends the chain, its result): a rule either ends the chain or lets the next rule run
_Step = tuple[bool, _ChainResult]
_NFT_VERDICTS: tuple[Verdict, ...] = ("accept", "drop", "reject")
_NFT_ERRORS = (_Unknown, ValueError, TypeError, KeyError)


def _nft_chain(state: _NftState, key: tuple[str, str, str], pkt: Packet) -> _ChainResult:
    """Evaluate one chain: a terminal verdict with its rule, or None (fall through/return)."""
    if state.depth > 32:
        raise _Unknown("jump depth")
    for rule in state.ruleset.rules.get(key, ()):
        ends, result = _nft_rule(state, key, rule, pkt)
        if ends:
            return result
    return None


def _nft_rule(state: _NftState, key: tuple[str, str, str], rule: Mapping[str, Any],
              pkt: Packet) -> _Step:
    """Expressions in order: a failed match ends the rule, a verdict ends the chain."""
    for expr in rule.get("expr", []):
        if "match" in expr:
            if not _nft_rule_matches(state, rule, expr, pkt):
                return False, None
            continue
        if "vmap" in expr:  # a verdict map (firewalld uses them to dispatch to zones)
            expr = _nft_vmap_verdict(state, rule, expr, pkt)
            if expr is None:
                return False, None
        step = _nft_statement(state, key, rule, expr, pkt)
        if step is not None:
            return step
    return False, None


def _nft_rule_matches(state: _NftState, rule: Mapping[str, Any], expr: Mapping[str, Any],
                      pkt: Packet) -> bool:
    """False too when the match cannot be evaluated (noted when the rule could decide)."""
    try:
        return _nft_match(expr, pkt)
    except _NFT_ERRORS as exc:
        if _nft_terminal(rule) is not None:
            state.uncertain.append(f"{_nft_rule_text(rule)} ({exc})")
        return False


def _nft_vmap_verdict(state: _NftState, rule: Mapping[str, Any], expr: Mapping[str, Any],
                      pkt: Packet) -> dict[str, Any] | None:
    try:
        return _nft_vmap(expr["vmap"], pkt)
    except _NFT_ERRORS as exc:
        state.uncertain.append(f"{_nft_rule_text(rule)} ({exc})")
        return None


def _nft_statement(state: _NftState, key: tuple[str, str, str], rule: Mapping[str, Any],
                   expr: Mapping[str, Any], pkt: Packet) -> _Step | None:
    """(ends the chain, result) for a statement that ends the rule; None lets the rule's next
    expression run (non-terminal statements, a jump whose chain returned)."""
    for verdict in _NFT_VERDICTS:
        if verdict in expr:
            return True, (verdict, _nft_rule_text(rule), " ".join(key))
    if "return" in expr:
        return True, None
    for jump in ("jump", "goto"):
        if jump in expr:
            target = (key[0], key[1], expr[jump]["target"])
            state.depth += 1
            result = _nft_chain(state, target, pkt)
            state.depth -= 1
            if result is not None or jump == "goto":
                return True, result
            return None  # the jumped-to chain returned: go on after the jump
    if any(k in _NFT_NONTERMINAL for k in expr):
        return None
    state.uncertain.append(f"{_nft_rule_text(rule)} (statement {next(iter(expr))})")
    return False, None


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
    chains = nft_input_chains(ruleset, skip_iptables, pkt.family)
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


def _ipt_addr(addr: str | None, spec: str) -> bool | None:
    """``-s``/``-d``: a comma-separated list of networks; None when the address is unknown."""
    return None if addr is None else any(_addr_in(addr, s) for s in spec.split(","))


def _ipt_iface(iif: str | None, spec: str) -> bool | None:
    """``-i eth0`` or ``-i eth+`` (a prefix); None when the interface is unknown."""
    if iif is None:
        return None
    return iif.startswith(spec[:-1]) if spec.endswith("+") else iif == spec


#: an option with one value -> (hit, what to report when the hit is unknown) for the packet
_IptTest = Callable[[str, str, Packet], tuple[bool | None, str]]
_IPT_TESTS: dict[str, _IptTest] = {
    **dict.fromkeys(("-p", "--protocol"), lambda tok, val, pkt: (val in ("tcp", "6", "all"), tok)),
    **dict.fromkeys(("-s", "--source"), lambda tok, val, pkt: (
        _ipt_addr(pkt.src, val), "-s (no cluster subnet known)")),
    **dict.fromkeys(("-d", "--destination"), lambda tok, val, pkt: (_ipt_addr(pkt.dst, val), "-d")),
    **dict.fromkeys(("-i", "--in-interface"),
                    lambda tok, val, pkt: (_ipt_iface(pkt.iif, val), "-i")),
    **dict.fromkeys(("--dport", "--destination-port", "--dports", "--destination-ports"),
                    lambda tok, val, pkt: (_port_in(pkt.port, val), tok)),
    **dict.fromkeys(("--state", "--ctstate"),
                    lambda tok, val, pkt: ("NEW" in val.upper().split(","), tok)),
    "--dst-type": lambda tok, val, pkt: (val == "LOCAL" or None, f"--dst-type {val}"),
    "--src-type": lambda tok, val, pkt: (val in ("UNICAST",) or None, f"--src-type {val}"),
}


@dataclass
class _IptScan:
    """The state of reading one rule's matches: a pending ``!`` and whether all matched."""

    matched: bool = True
    negate: bool = False

    def apply(self, hit: bool | None, what: str) -> None:
        if hit is None:
            raise _Unknown(what)
        if self.negate:
            hit = not hit
        self.negate = False
        if not hit:
            self.matched = False


def _ipt_match(args: Sequence[str], pkt: Packet) -> tuple[bool, str | None]:
    """(matches, target) for one rule's tokens; raises _Unknown on options we do not model."""
    scan = _IptScan()
    i = 0
    while i < len(args):
        tok = args[i]
        val = args[i + 1] if i + 1 < len(args) else ""
        if tok in ("-j", "-g"):
            # target options (--reject-with ...) follow; ignore them
            return scan.matched, ("goto:" if tok == "-g" else "") + val
        i += _ipt_option(scan, tok, val, pkt)
    return scan.matched, None


def _ipt_option(scan: _IptScan, tok: str, val: str, pkt: Packet) -> int:
    """Apply one match option to ``scan``; the number of tokens it takes."""
    if tok == "!":
        scan.negate = True
        return 1
    test = _IPT_TESTS.get(tok)
    if test is not None:
        scan.apply(*test(tok, val, pkt))
        return 2
    if tok == "-m" and val not in _IPT_IGNORED_MODULES:
        raise _Unknown(f"-m {val}")
    if tok in ("-m", "--comment", "--limit", "--limit-burst"):
        return 2
    if tok == "--tcp-flags":
        return 3
    if tok == "--syn":
        scan.apply(True, tok)
        return 1
    raise _Unknown(tok)


_IPT_VERDICTS: dict[str, Verdict] = {"ACCEPT": "accept", "DROP": "drop", "REJECT": "reject"}


def _ipt_chain(rules: IptRules, chain: str, pkt: Packet, uncertain: list[str], depth: int = 0
               ) -> tuple[Verdict, str] | None:
    if depth > 32:
        return None
    for args in rules.rules.get(chain, ()):
        text = f"-A {chain} " + " ".join(args)
        target = _ipt_rule_target(args, pkt, text, uncertain)
        if target is None:
            continue
        ends, result = _ipt_target(rules, target, text, pkt, uncertain, depth)
        if ends:
            return result
    return None


def _ipt_rule_target(args: Sequence[str], pkt: Packet, text: str, uncertain: list[str]
                     ) -> str | None:
    """The target of a rule that matches; None when it does not (or cannot be evaluated)."""
    try:
        matched, target = _ipt_match(args, pkt)
    except _Unknown as exc:
        if any(t in args for t in ("-j", "-g")):
            uncertain.append(f"{text} ({exc})")
        return None
    return target if matched else None


def _ipt_target(rules: IptRules, target: str, text: str, pkt: Packet, uncertain: list[str],
                depth: int) -> tuple[bool, tuple[Verdict, str] | None]:
    """(ends the chain, its result) for a matching rule's target."""
    goto = target.startswith("goto:")
    name = target.removeprefix("goto:")
    if name in _IPT_VERDICTS:
        return True, (_IPT_VERDICTS[name], text)
    if name == "RETURN":
        return True, None
    if name in rules.rules or name in rules.policies:
        result = _ipt_chain(rules, name, pkt, uncertain, depth + 1)
        return result is not None or goto, result
    # LOG, NFLOG and other non-terminal targets fall through
    return False, None


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
        if (("(v6)" in to or "(v6)" in src) != (pkt.family == 6)):  # ufw lists v6 apart
            continue
        to, src = to.replace(" (v6)", ""), src.replace(" (v6)", "")
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

"""What gloo, NCCL and TensorPipe really bind on this host, each reading its own variable the
way the library does (pure; :func:`ddpnet.net.interfaces.kernel_order` gives the order).

:mod:`ddpnet.net.select` judges a value (syntax, existence, up, family); this module answers
the next question, which interface and address the library then takes, so ``check`` can
compare it across nodes:

- NCCL (``NCCL_SOCKET_IFNAME``): walks ``getifaddrs()``, every IPv4 address in the kernel's
  interface order, then every IPv6 one, skipping interfaces not running and IPv6 loopback
  only; the first address whose interface matches the spec (:mod:`ddpnet.net.nccl`: prefixes,
  ``^`` exclusion, ``=`` exact) is the bootstrap address. So ``^docker0`` picks ``lo``
  (127.0.0.1 comes first) and ``eth`` picks whichever ``eth*`` the kernel listed first.
  Unset: ``ib*``, else anything but ``docker*``/``lo*``/``virbr*``, else docker, lo, virbr.
- gloo (``GLOO_SOCKET_IFNAME``, torch's ProcessGroupGloo): one device per comma-separated name
  (values of 0-1 characters are ignored), each bound to the interface's first address, IPv4
  before IPv6; device i of every rank connects to device i of every other.
- TensorPipe (``TP_SOCKET_IFNAME``): one name, its first address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ddpnet.net.interfaces import Address, Interface
from ddpnet.net.nccl import IfnameSyntaxError, parse_nccl_ifname

GLOO, NCCL, TP = "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME"
#: NCCL's own order when NCCL_SOCKET_IFNAME is unset (NCCL_COMM_ID's subnet match aside)
NCCL_AUTO = ("ib", "^docker,lo,virbr", "docker", "lo", "virbr")


@dataclass(frozen=True)
class Pick:
    """One library's binding on this host: ``var`` read as ``value`` (None: unset, the
    library's own choice), its ``slot`` (gloo's device index), the interface and address it
    takes (None: nothing matches) and why."""

    var: str
    value: str | None
    slot: int
    iface: str | None
    address: str | None
    subnet: str | None
    why: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Pick:
        def text(key: str) -> str | None:
            value = data.get(key)
            return None if value is None else str(value)

        return cls(str(data.get("var", "")), text("value"), int(data.get("slot") or 0),
                   text("iface"), text("address"), text("subnet"), str(data.get("why", "")))


def _subnet(addr: Address) -> str:
    return str(addr.network())


def _walk(interfaces: Sequence[Interface], order: Sequence[str]) -> Iterator[tuple[str, Address]]:
    """(interface, address) as ``getifaddrs()`` lists them for NCCL: IPv4 first, each family in
    kernel order; interfaces not up and IPv6 loopback left out."""
    by_name = {i.name: i for i in interfaces}
    names = [n for n in order if n in by_name] + sorted(set(by_name) - set(order))
    for family in (4, 6):
        for name in names:
            iface = by_name[name]
            if not iface.up:
                continue
            for a in iface.addresses:
                if a.family == family and not (family == 6 and a.is_loopback):
                    yield name, a


def nccl_pick(value: str | None, interfaces: Sequence[Interface],
              order: Sequence[str]) -> Pick:
    """NCCL's bootstrap interface for ``NCCL_SOCKET_IFNAME=value`` (None or 0-1 characters:
    NCCL's own choice)."""
    given = value if value is not None and len(value.strip()) > 1 else None
    specs = (given,) if given is not None else NCCL_AUTO
    for text in specs:
        try:
            spec = parse_nccl_ifname(text)
        except IfnameSyntaxError as exc:
            return Pick(NCCL, value, 0, None, None, None, str(exc))
        hit = next(((n, a) for n, a in _walk(interfaces, order) if spec.matches(n)), None)
        if hit is not None:
            name, addr = hit
            why = (f"the first address NCCL lists that matches {text!r} (IPv4 first, kernel "
                   f"interface order: {', '.join(order[:6])})" if given is not None else
                   f"NCCL's own choice (unset): first match of {text!r}")
            return Pick(NCCL, given, 0, name, addr.ip, _subnet(addr), why)
    return Pick(NCCL, given, 0, None, None, None,
                f"nothing up matches {given!r}" if given else "no interface up")


def _first_address(iface: Interface | None) -> Address | None:
    if iface is None:
        return None
    return next((a for a in iface.addresses if a.family == 4),
                next((a for a in iface.addresses if a.family == 6), None))


def named_picks(var: str, value: str, interfaces: Sequence[Interface]) -> tuple[Pick, ...]:
    """gloo's devices (a comma list) or TensorPipe's one interface, each bound to the
    interface's first address (IPv4 before IPv6)."""
    by_name = {i.name: i for i in interfaces}
    names = [n.strip() for n in value.split(",")] if var == GLOO else [value.strip()]
    out = []
    for slot, name in enumerate(names):
        addr = _first_address(by_name.get(name))
        why = (f"device {slot} of {len(names)} (gloo pairs device i with device i on every "
               "rank)" if var == GLOO else "TensorPipe binds this interface")
        out.append(Pick(var, value, slot, name if name in by_name else None,
                        addr.ip if addr else None, _subnet(addr) if addr else None,
                        why if addr else f"no interface {name} with an address here"))
    return tuple(out)


def library_picks(environ: Mapping[str, str], interfaces: Sequence[Interface],
                  order: Sequence[str]) -> tuple[Pick, ...]:
    """Every binding the user's variables lead to on this host, plus NCCL's own choice when
    NCCL_SOCKET_IFNAME is unset (pure)."""
    out: list[Pick] = []
    for var in (GLOO, TP):
        value = environ.get(var, "")
        if len(value.strip()) > (1 if var == GLOO else 0):  # torch ignores 0-1 characters
            out += named_picks(var, value, interfaces)
    out.append(nccl_pick(environ.get(NCCL), interfaces, order))
    return tuple(out)


def is_loopback_pick(pick: Pick) -> bool:
    try:
        return pick.address is not None and ipaddress.ip_address(pick.address).is_loopback
    except ValueError:
        return False

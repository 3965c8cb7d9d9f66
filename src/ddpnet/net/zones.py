"""IPv6 link-local addresses and their zones, judged against this node's interfaces.

``fe80::...`` exists on every link, so the kernel binds or dials one only with its zone, the
interface it lives on (``fe80::1%eth0``; sin6_scope_id): without it bind() and connect()
fail with EINVAL. Copied bare from ``ip addr`` into MASTER_ADDR, torch's TCPStore client
retries that EINVAL until its timeout on every rank, and a rank 0 that binds the address
itself fails at once. :func:`judge_zone` is pure (it names the interface the address lives
on here, the zone to add, or a global address of the same interface to use instead);
:func:`refuse_unusable_zone` is the edge every rank runs before anything dials MASTER_ADDR.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ddpnet.address import UserAddress, parse_address
from ddpnet.config import DistConfig
from ddpnet.errors import AddressError, ConfigError
from ddpnet.net.interfaces import Interface

#: the cause every rank names for a MASTER_ADDR that cannot work as written
CAUSE = "master-link-local"


@dataclass(frozen=True)
class ZoneVerdict:
    """Why a link-local address cannot be used as written on this node. ``problem``:
    ``no-zone`` (bare ``fe80::``), ``unknown-zone`` (no interface of that name here) or
    ``wrong-zone`` (this node's own address, on another interface than the zone names).
    ``owner``: the interface here that has the address (empty when it is a peer's);
    ``links``: the up interfaces here with a link-local address (where a peer's can be);
    ``globals``: the owner's other (routable) addresses, which need no zone."""

    address: UserAddress
    problem: str
    owner: str = ""
    links: tuple[str, ...] = ()
    globals: tuple[str, ...] = ()

    @property
    def zone(self) -> str:
        """The zone to write (empty when this node cannot tell which link)."""
        if self.owner:
            return self.owner
        return self.links[0] if len(self.links) == 1 else ""

    def why(self) -> str:
        ip = self.address.host
        where = (f"this node's own address on {self.owner}" if self.owner else
                 "another node's address (not one of this node's)")
        if self.problem == "unknown-zone":
            return (f"{self.address.dial} names zone {self.address.zone}, but this node has no "
                    f"interface {self.address.zone} (link-local interfaces here: "
                    f"{', '.join(self.links) or 'none'})")
        if self.problem == "wrong-zone":
            return (f"{ip} is {where}, not on {self.address.zone}: binding it there fails "
                    "(EADDRNOTAVAIL)")
        return (f"{ip} is an IPv6 link-local address without its zone (%interface), "
                f"{where}: the kernel binds or dials a link-local address only with its "
                "interface (EINVAL), so torch's store retries until its timeout")

    def fix(self, var: str = "MASTER_ADDR") -> str:
        ip = self.address.host
        options = []
        if self.zone:
            options.append(f"export {var}={ip}%{self.zone} (the interface it is reached by "
                           "here; each node writes its own interface)")
        else:
            options.append(f"export {var}={ip}%<interface> with the interface each node "
                           f"reaches it by (`ip -6 route get {ip}%<interface>`; link-local "
                           f"interfaces here: {', '.join(self.links) or 'none'})")
        if self.globals:
            options.append(f"use this node's global address instead: {var}="
                           f"{self.globals[0]}, the same on every node")
        else:
            options.append("use rank 0's global address or host name instead (`ip -br addr` "
                           "on rank 0's node), the same on every node")
        return "; or ".join(options)

    def evidence(self) -> str:
        own = f"; {self.owner} has it" if self.owner else ""
        more = f", and {', '.join(self.globals)}" if self.globals else ""
        return (f"{self.address.text!r} parsed as link-local {self.address.host} zone "
                f"{self.address.zone or '(none)'}{own}{more}; link-local interfaces here: "
                f"{', '.join(self.links) or 'none'}")


def judge_zone(address: UserAddress, interfaces: Sequence[Interface]) -> ZoneVerdict | None:
    """Whether a link-local ``address`` can be bound or dialed as written here (pure); None
    when it can (or when it is not link-local)."""
    if not address.link_local:
        return None
    names = {i.name for i in interfaces}
    links = tuple(i.name for i in interfaces if i.up and i.kind != "loopback"
                  and any(a.family == 6 and a.is_link_local for a in i.addresses))
    owner = next((i for i in interfaces if i.owns(address.host)), None)
    globals_ = tuple(a.ip for a in (owner.addresses if owner else ())
                     if not a.is_link_local and not a.is_loopback)
    found = ZoneVerdict(address, "no-zone", owner.name if owner else "", links, globals_)
    if address.needs_zone:
        return found
    if address.zone.isdigit():
        return None  # an interface index: the kernel checks it
    if address.zone not in names:
        return ZoneVerdict(address, "unknown-zone", found.owner, links, globals_)
    if owner is not None and owner.name != address.zone:
        return ZoneVerdict(address, "wrong-zone", owner.name, links, globals_)
    return None


def zone_error(verdict: ZoneVerdict, *, host: str, rank: int | None, var: str = "MASTER_ADDR"
               ) -> AddressError:
    """The ``master-link-local`` error every rank raises before dialing (pure)."""
    on = f" (on {host}, rank {rank})" if rank is not None else f" (on {host})"
    return AddressError(CAUSE, f"{var} {verdict.address.text}: {verdict.why()}{on}",
                        verdict.fix(var), host=host, rank=rank, detail=verdict.evidence())


def refuse_unusable_zone(cfg: DistConfig, host: str,
                         interfaces: Sequence[Interface] | None = None) -> None:
    """Raise ``master-link-local`` when MASTER_ADDR is a link-local address that cannot be
    used as written on this node (edge: lists the interfaces). Every rank runs it first."""
    try:
        address = parse_address(cfg.master_addr, "MASTER_ADDR")
    except ConfigError:
        return  # the configuration was validated when it was resolved
    if not address.link_local:
        return
    if interfaces is None:
        from ddpnet.net.interfaces import list_interfaces

        interfaces = list_interfaces()
    verdict = judge_zone(address, interfaces)
    if verdict is not None:
        raise zone_error(verdict, host=host, rank=cfg.rank)

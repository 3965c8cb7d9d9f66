"""The lab engine: build and remove a lab, run commands in its nodes, inject faults.

``Lab`` is the Python API (a context manager); the CLI uses the same object, re-attached from
the state file by name (:meth:`Lab.attach`), so every command works from a fresh process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from ddpnet.errors import ConfigError
from ddpnet.lab import faults as faultmod
from ddpnet.lab import state as statemod
from ddpnet.lab import system
from ddpnet.lab.state import LabState
from ddpnet.lab.topology import (
    DEFAULT_IFNAME,
    DEFAULT_MASTER_PORT,
    DEFAULT_NAME,
    DEFAULT_SECOND_IFNAME,
    DEFAULT_SUBNET,
    ROUTER_NAT,
    LabNode,
    LabSpec,
    Plan,
    Shaping,
    check_lab_cidr,
    hosts_file,
    namespace_pattern,
    netns_add_batch,
    netns_del_batch,
    node_argv,
    node_batch,
    parse_nodes,
    plan,
    qdisc_lines,
    router_batch,
    router_nft,
    run_environ,
    switch_batch,
    switch_ports_batch,
    validate_name,
)

#: exit status reported for a command killed at its timeout (as coreutils ``timeout`` does)
TIMEOUT_EXIT = 124


@dataclass(frozen=True)
class NodeResult:
    """One node's outcome of :meth:`Lab.run`."""

    node: LabNode
    returncode: int
    stdout: str
    stderr: str
    duration_s: float = 0.0
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0


LineSink = Callable[[LabNode, str, str], None]  # (node, "stdout"|"stderr", line)


def _kill_group(proc: subprocess.Popen[Any]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


def _hosts_path(node: LabNode) -> Any:
    return system.ETC_NETNS / node.namespace / "hosts"


class Lab:
    """A virtual cluster of ``nodes`` network namespaces on a bridge (see
    :mod:`ddpnet.lab.topology` for the layout). ``with Lab(...) as lab:`` builds it and always
    removes it, even when the body raises."""

    def __init__(self, name: str = DEFAULT_NAME, nodes: int = 2, subnet: str = DEFAULT_SUBNET,
                 rate: str | None = None, delay: str | float | None = None,
                 loss: str | float | None = None, mtu: int = 1500,
                 ifname: str = DEFAULT_IFNAME, behind: Sequence[int] = (),
                 router: str = ROUTER_NAT, forwards: Sequence[tuple[int, int]] = (),
                 second_net: str | None = None, second_ifname: str = DEFAULT_SECOND_IFNAME,
                 second_rate: str | None = None, second_first: Sequence[int] = ()) -> None:
        """``second_net`` gives every node a second NIC (``second_ifname``) on that subnet,
        shaped to ``second_rate``; on ``second_first`` nodes it is created first (lower
        ifindex). ``rate``/``delay``/``loss`` and faults stay on the first NIC."""
        if isinstance(delay, (int, float)):
            delay = f"{delay:g}ms"
        if isinstance(loss, (int, float)):
            loss = f"{loss:g}" if loss else None
        self.spec = LabSpec(name=name, nodes=nodes, subnet=subnet, rate=rate or None,
                            delay=delay or None, loss=loss or None, mtu=int(mtu), ifname=ifname,
                            behind=tuple(sorted(behind)), router=router,
                            forwards=tuple((int(p), int(n)) for p, n in forwards),
                            second_net=second_net or None, second_ifname=second_ifname,
                            second_rate=second_rate or None,
                            second_first=tuple(sorted(second_first)))
        self.plan: Plan = plan(self.spec)
        self._popens: list[subprocess.Popen[Any]] = []

    # ---- identity --------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def nodes(self) -> tuple[LabNode, ...]:
        return self.plan.nodes

    @property
    def master_addr(self) -> str:
        return self.plan.nodes[0].address

    def node(self, index: int) -> LabNode:
        if not isinstance(index, int) or not 0 <= index < len(self.nodes):
            raise ConfigError(f"node {index!r} does not exist in lab {self.name}: it has nodes "
                              f"0-{len(self.nodes) - 1}", "see: ddpnet lab status")
        return self.nodes[index]

    @classmethod
    def attach(cls, name: str = DEFAULT_NAME) -> Lab:
        """The lab ``name`` that ``up`` built (from its state file); ConfigError if none."""
        validate_name(name)
        st = statemod.load(name)
        if st is None:
            raise ConfigError(f"no lab named {name!r} is up",
                              f"start one: ddpnet lab up --name {name} --nodes N")
        s = st.spec
        return cls(name=s.name, nodes=s.nodes, subnet=s.subnet, rate=s.rate, delay=s.delay,
                   loss=s.loss, mtu=s.mtu, ifname=s.ifname, behind=s.behind, router=s.router,
                   forwards=s.forwards, second_net=s.second_net,
                   second_ifname=s.second_ifname, second_rate=s.second_rate,
                   second_first=s.second_first)

    # ---- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> Lab:
        # up() removes what it half-built itself; a lab of this name with another shape is
        # someone else's and is left alone
        self.up()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.down()

    def is_up(self) -> bool:
        st = statemod.load(self.name)
        return bool(st and st.complete and st.spec == self.spec
                    and set(self.plan.namespaces) <= system.existing_namespaces())

    def up(self) -> bool:
        """Build the lab; returns False when it was already up with this shape (a no-op).
        ConfigError when a lab of this name exists with another shape."""
        system.require_root(("ip", "tc", "unshare", "nft") if self.plan.router
                            else ("ip", "tc", "unshare"))
        with statemod.locked(self.name):
            st = statemod.load(self.name)
            if st is not None and st.spec != self.spec:
                raise ConfigError(
                    f"lab {self.name} is already up with another shape "
                    f"({_shape(st.spec)}; asked {_shape(self.spec)})",
                    f"remove it first (ddpnet lab down --name {self.name}) or pick another "
                    "--name",
                )
            if self.is_up():
                return False
            # leftovers of a half-built or crashed lab of this name: remove, then rebuild
            _teardown(self.name, st)
            st = LabState(spec=self.spec)
            statemod.save(st)
            try:
                self._build()
            except BaseException:
                _teardown(self.name, st)
                statemod.remove(self.name)
                raise
            st.complete = True
            statemod.save(st)
        return True

    def _build(self) -> None:
        p = self.plan
        system.ip_batch(netns_add_batch(p))
        system.ip_batch(switch_batch(p), p.switch)
        for node in p.nodes:
            system.write_file(_hosts_path(node), hosts_file(p, node))
            system.write_file(system.ETC_NETNS / node.namespace / "hostname", node.hostname + "\n")
        system.parallel([(system.ip_batch, node_batch(p, n), n.namespace) for n in p.nodes])
        if p.router:
            system.ip_batch(router_batch(p), p.router.namespace)
        system.ip_batch(switch_ports_batch(p), p.switch)
        if p.router:
            self._route(p.router.namespace)
        shaping = p.spec.shaping
        if shaping.delay_ms or shaping.loss_pct:
            st = LabState(spec=p.spec)  # no faults yet: _apply builds the base shaping
            system.parallel([(self._apply, n, st) for n in p.nodes])
        else:
            system.parallel(rate_calls(p, [(n.ifname, n.port, n.namespace) for n in p.nodes],
                                       shaping))
        system.parallel(rate_calls(p, [(n.second_ifname, n.second_port, n.namespace)
                                       for n in p.nodes if n.second_ifname],
                                   p.spec.second_shaping))

    def _route(self, namespace: str) -> None:
        """Turn the router namespace into a router: forwarding on, its NAT ruleset loaded."""
        system.run(["ip", "netns", "exec", namespace, "sysctl", "-qw",
                    "net.ipv4.ip_forward=1"])
        script = router_nft(self.plan)
        if script:
            system.run(["ip", "netns", "exec", namespace, "nft", "-f", "-"], input=script)

    def down(self) -> None:
        """Remove every namespace, veth, /etc/netns entry, process and state file of this lab
        (works on a half-built lab and on one that is already gone)."""
        for proc in self._popens:
            _kill_group(proc)
        remove_lab(self.name)
        for proc in self._popens:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        self._popens.clear()

    # ---- running commands ----------------------------------------------------------------------

    def node_command(self, node: int, argv: Sequence[str], *,
                     keep_cgroup: bool = False) -> list[str]:
        """The command line that runs ``argv`` as node ``node`` (its network namespace, /sys,
        /etc/hosts and hostname); for launching through your own process machinery.
        ``keep_cgroup=True`` keeps /sys/fs/cgroup visible (daemons such as slurmd)."""
        n = self.node(node)
        return node_argv(n.namespace, n.hostname, list(argv), keep_cgroup=keep_cgroup)

    def _spawn(self, node: LabNode, argv: Sequence[str], env: Mapping[str, str] | None,
               keep_cgroup: bool = False, **kwargs: Any) -> subprocess.Popen[Any]:
        full_env = dict(os.environ)
        full_env.update(env or {})
        kwargs.setdefault("start_new_session", True)
        return subprocess.Popen(
            node_argv(node.namespace, node.hostname, list(argv), keep_cgroup=keep_cgroup),
            env=full_env, **kwargs)

    def exec(self, node: int, argv: Sequence[str], env: Mapping[str, str] | None = None,
             timeout: float | None = 60, input: str | None = None,
             ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in one node and wait (no lab variables beyond ``env``). Raises
        ``subprocess.TimeoutExpired`` after killing it at ``timeout``."""
        n = self.node(node)
        argv = list(argv)
        proc = self._spawn(n, argv, env, stdin=subprocess.PIPE if input is not None else
                           subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
        try:
            out, err = proc.communicate(input=input, timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out, err = proc.communicate()
            raise subprocess.TimeoutExpired(argv, timeout or 0, out, err) from None
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)

    def popen(self, node: int, argv: Sequence[str], env: Mapping[str, str] | None = None,
              *, keep_cgroup: bool = False, **popen_kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` in one node in the background (in its own session); ``down`` kills
        it and everything else left in the node. ``keep_cgroup`` as in :meth:`node_command`."""
        proc = self._spawn(self.node(node), argv, env, keep_cgroup, **popen_kwargs)
        self._popens.append(proc)
        return proc

    def run(self, argv: Sequence[str], nodes: str | Sequence[int] | None = None,
            env: Mapping[str, str] | None = None, timeout: float | None = 60,
            master_port: int = DEFAULT_MASTER_PORT,
            on_line: LineSink | None = None) -> list[NodeResult]:
        """Run ``argv`` concurrently in the chosen nodes (None = all) with NNODES, NODE_RANK,
        MASTER_ADDR (the first chosen node, node 0 when all run), MASTER_PORT, RANK and
        WORLD_SIZE exported (``env`` wins over them). A node still running at ``timeout`` is
        killed and reports exit 124. ``on_line`` streams output lines as they come."""
        chosen = parse_nodes(nodes, len(self.nodes))
        argv = list(argv)
        starts = time.monotonic()
        procs: list[tuple[LabNode, subprocess.Popen[str]]] = []
        try:
            for pos, idx in enumerate(chosen):
                node_env = run_environ(self.plan, chosen, pos, master_port)
                node_env.update(env or {})
                procs.append((self.nodes[idx], self._spawn(
                    self.nodes[idx], argv, node_env, stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)))
            return _collect(procs, starts, timeout, on_line)
        finally:
            for _, proc in procs:
                if proc.poll() is None:
                    _kill_group(proc)

    # ---- faults -----------------------------------------------------------------------------

    def fault(self, kind: str, node: int, **opts: Any) -> dict[str, Any]:
        """Inject a fault on one node (see :data:`ddpnet.lab.faults.KINDS`); returns its record.
        Faults stay until :meth:`clear` (or ``down``)."""
        n = self.node(node)
        rec = faultmod.normalize(kind, opts)
        if rec.get("iface") in (n.ifname, n.second_ifname):
            raise ConfigError(f"extra-iface {rec['iface']!r} is {n.name}'s lab interface",
                              "name the extra interface differently, e.g. --iface docker0")
        system.require_root(("ip", "tc", "nft"))
        with statemod.locked(self.name):
            st = self._state()
            st.faults[n.index] = faultmod.add(st.faults.get(n.index, []), rec)
            self._apply(n, st)
            statemod.save(st)
        if kind == "address":
            self._flush_neighbours()
        return rec

    def clear(self, node: int | None = None) -> None:
        """Undo every fault of one node (None = all nodes)."""
        targets = self.nodes if node is None else (self.node(node),)
        with statemod.locked(self.name):
            st = self._state()
            # a node without faults is already in its base state: nothing to undo
            targets = tuple(n for n in targets if st.faults.get(n.index))
            moved = any(f["kind"] == "address" for n in targets for f in st.faults[n.index])
            for n in targets:
                st.faults.pop(n.index, None)
            system.parallel([(self._apply, n, st) for n in targets])
            statemod.save(st)
        if moved:
            self._flush_neighbours()

    def _flush_neighbours(self) -> None:
        """An address moved between nodes: every node forgets the MACs it had learnt (a real
        network waits for the entries to go stale; the lab's next test should not)."""
        system.parallel([(system.ip_batch, ["neigh flush all"], n.namespace)
                         for n in self.nodes])

    def add_address(self, node: int, cidr: str) -> None:
        """Add ``cidr`` (inside 198.18.0.0/15, or 2001:2::/48) on the node's lab interface."""
        n = self.node(node)
        iface = check_lab_cidr(cidr)
        with statemod.locked(self.name):
            st = self._state()
            nodad = " nodad" if iface.version == 6 else ""  # usable at once, no DAD wait
            system.ip_batch([f"addr replace {iface.with_prefixlen} dev {n.ifname}{nodad}"],
                            n.namespace)
            have = st.addresses.setdefault(n.index, [])
            if iface.with_prefixlen not in have:
                have.append(iface.with_prefixlen)
            statemod.save(st)

    def faults(self, node: int) -> list[dict[str, Any]]:
        st = statemod.load(self.name)
        return faultmod.active(st.faults.get(node, [])) if st else []

    def _state(self) -> LabState:
        st = statemod.load(self.name)
        if st is None or not st.complete:
            raise ConfigError(f"lab {self.name} is not up", f"ddpnet lab up --name {self.name}")
        return st

    def _apply(self, n: LabNode, st: LabState) -> None:
        """Rebuild node ``n``'s fault state from its fault list (idempotent)."""
        p = self.plan
        recs = st.faults.get(n.index, [])
        nf = faultmod.combine(p, n.index, recs)
        _kill_timers(n)
        # firewall
        table = f"inet {faultmod.NFT_TABLE}"
        script = f"table {table}\ndelete table {table}\n" + (nf.nft or "")
        system.run(node_argv(n.namespace, n.hostname, ["nft", "-f", "-"]), input=script)
        # addresses and routes first: a decoy added below routes after the lab interface
        self._routing(n, nf, st)
        # links: mtu, decoy interface, up/down
        lines = [f"link set {n.ifname} mtu {nf.mtu}"]
        extra_names = {f.get("iface", faultmod.EXTRA_IFACE) for f in recs
                       if f["kind"] == "extra-iface"} | {faultmod.EXTRA_IFACE}
        system.ip_batch([f"link del {name}" for name in sorted(extra_names)], n.namespace,
                        force=True)
        # an extra-iface of another name cleared earlier is gone only with its switch end
        system.ip_batch([f"link del x{n.index}"], p.switch, force=True)
        if nf.extra_iface:
            # a veth whose peer sits unattached in the switch namespace: up, with carrier and
            # an address, but leading nowhere (no dummy driver needed)
            name, cidr = nf.extra_iface
            lines += [f"link add {name} type veth peer name x{n.index} netns {p.switch}",
                      f"addr add {cidr} dev {name}", f"link set {name} up"]
        lines.append(f"link set {n.ifname} {'up' if nf.link_up else 'down'}")
        system.ip_batch(lines, n.namespace)
        switch = [f"link set {n.port} mtu {nf.port_mtu or p.spec.mtu}"]
        if nf.extra_iface:
            switch.append(f"link set x{n.index} up")
        system.ip_batch(switch, p.switch)
        # shaping: the node's egress (rate, delay) and its switch port (rate); loss is in nft
        netem = bool(nf.shaping.delay_ms) and system.netem_available()
        system.tc_batch(qdisc_lines(n.ifname, nf.shaping, egress_netem=netem), n.namespace)
        system.tc_batch(qdisc_lines(n.port, nf.shaping, egress_netem=False), p.switch)
        self._delayline(n, 0.0 if netem else (nf.shaping.delay_ms or 0.0),
                        nf.shaping.jitter_ms or 0.0)
        # hosts file
        system.write_file(_hosts_path(n), hosts_file(p, n, hostname_loopback=nf.hostname_loopback,
                                                     entries=nf.hosts_entries))
        # a timed link-down: a sleeper inside the node (so down kills it) brings the link back
        for f in faultmod.active(recs):
            if f["kind"] == "link-down" and "until" in f and not nf.link_up:
                wait = max(0.0, float(f["until"]) - time.time())
                subprocess.Popen(
                    node_argv(n.namespace, n.hostname,
                              ["sh", "-c", f"sleep {wait:.3f}; ip link set {n.ifname} up",
                               _TIMER_TAG]),
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL, start_new_session=True)

    def _routing(self, n: LabNode, nf: faultmod.NodeFaults, st: LabState) -> None:
        """Rebuild the node's addresses, routes, policy rules and second NICs from its faults
        (``faults.routing_lines``): an ``address``, ``twin-nic``, ``policy-route`` or
        ``no-route`` fault, or none of them."""
        r = faultmod.routing_lines(self.plan, n, nf, st.addresses.get(n.index, []))
        system.ip_batch(r.undo_switch, self.plan.switch, force=True)
        system.ip_batch(r.undo_node, n.namespace, force=True)
        system.ip_batch(r.node, n.namespace)
        if r.switch:
            system.ip_batch(r.switch, self.plan.switch)
        system.run(node_argv(n.namespace, n.hostname, ["sysctl", "-qw", *r.sysctl]))

    def _delayline(self, n: LabNode, delay_ms: float, jitter_ms: float = 0.0) -> None:
        """Without netem: hold what node ``n`` receives for ``delay_ms`` (± ``jitter_ms``) in a
        userspace delay line (NFQUEUE); 0 removes it. See :mod:`ddpnet.lab.delayline` for why
        ingress."""
        had = _kill_tagged(n, _DELAY_TAG)
        rule = ["-t", "mangle", "PREROUTING", "-i", n.ifname, "-j", "NFQUEUE",
                "--queue-num", "0", "--queue-bypass"]
        delete = ["iptables", *rule[:2], "-D", *rule[2:]]
        if had:
            system.run(node_argv(n.namespace, n.hostname, delete), check=False)
        if not delay_ms:
            return
        system.require_root(("iptables",))
        daemon = subprocess.Popen(
            node_argv(n.namespace, n.hostname,
                      [sys.executable, "-m", "ddpnet.lab.delayline", "--ms", f"{delay_ms:g}",
                       "--jitter-ms", f"{jitter_ms:g}",
                       "--tag", _DELAY_TAG]),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, start_new_session=True)
        ready = _read_line(daemon, timeout=15)
        if ready != "ready":
            _kill_group(daemon)
            err = daemon.stderr.read() if daemon.stderr else ""
            raise system.LabError(f"{n.name}: the delay line did not start: "
                                  f"{(err or ready).strip()[-300:]}",
                                  "the kernel needs NFQUEUE (CONFIG_NETFILTER_NETLINK_QUEUE) "
                                  "or sch_netem for delay")
        system.run(node_argv(n.namespace, n.hostname, ["iptables", *rule[:2], "-A", *rule[2:]]))

    # ---- status --------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """The ``ddpnet lab status --json`` object."""
        st = statemod.load(self.name)
        recs = st.faults if st else {}
        nodes = []
        for n in self.nodes:
            fs = faultmod.active(recs.get(n.index, []))
            shaping = faultmod.combine(self.plan, n.index, fs).shaping
            nodes.append({
                "name": n.name, "namespace": n.namespace, "hostname": n.hostname,
                "ifname": n.ifname, "address": n.address,
                "second_ifname": n.second_ifname or None,
                "second_address": n.second_address or None,
                "second_shaping": self.spec.second_shaping.to_dict() if n.second_address
                else None,
                "extra_addresses": list(st.addresses.get(n.index, [])) if st else [],
                "shaping": shaping.to_dict(), "faults": fs,
            })
        return {
            "name": self.name, "subnet": self.spec.subnet, "second_net": self.spec.second_net,
            "up": bool(st and st.complete),
            "master_addr": self.master_addr, "switch": self.plan.switch,
            "router": self.plan.router.to_dict() if self.plan.router else None,
            "spec": self.spec.to_dict(), "nodes": nodes,
        }


def rate_calls(p: Plan, nics: Sequence[tuple[str, str, str]],
               shaping: Shaping) -> list[tuple[object, ...]]:
    """``tc`` calls that shape NICs, each (interface, its switch port, node namespace): the
    node's egress, and for a rate its switch port too (both directions); none if unshaped."""
    if shaping.empty or not nics:
        return []
    calls: list[tuple[object, ...]] = [
        (system.tc_batch, qdisc_lines(ifname, shaping), ns) for ifname, _, ns in nics]
    if shaping.rate:
        sw_lines: list[str] = []
        for _, port, _ in nics:
            sw_lines += qdisc_lines(port, shaping, egress_netem=False)
        calls.append((system.tc_batch, sw_lines, p.switch))
    return calls


_TIMER_TAG = "ddpnet-lab-link-timer"
_DELAY_TAG = "ddpnet-lab-delayline"


def _read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    """The first stdout line of ``proc`` within ``timeout`` s ("" if none)."""
    out: list[str] = []
    reader = threading.Thread(
        target=lambda: out.append(proc.stdout.readline() if proc.stdout else ""), daemon=True)
    reader.start()
    reader.join(timeout)
    return out[0].strip() if out else ""


def _kill_timers(n: LabNode) -> None:
    """Stop a pending ``link-down --for`` timer of node ``n`` (a sleeper in its namespace)."""
    _kill_tagged(n, _TIMER_TAG)


def _kill_tagged(n: LabNode, tag: str) -> int:
    """Kill the helper processes of node ``n`` whose command line carries ``tag``; how many."""
    killed = 0
    for pid in system.pids_in([n.namespace]):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read()
        except OSError:
            continue
        if tag.encode() in cmd.split(b"\0"):
            killed += 1
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)  # the sh and its sleep (own session)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return killed


def _shape(spec: LabSpec) -> str:
    parts = [f"nodes={spec.nodes}", f"subnet={spec.subnet}", f"mtu={spec.mtu}",
             f"ifname={spec.ifname}"]
    parts += [f"{k}={v}" for k, v in (("rate", spec.rate), ("delay", spec.delay),
                                      ("loss", spec.loss)) if v]
    if spec.second_net:
        parts += [f"second-net={spec.second_net}", f"second-ifname={spec.second_ifname}"]
        parts += [f"second-rate={spec.second_rate}"] if spec.second_rate else []
        parts += [f"second-first={','.join(map(str, spec.second_first))}"] \
            if spec.second_first else []
    if spec.behind:
        parts.append(f"{spec.router}={','.join(map(str, spec.behind))}")
        parts += [f"port-forward={p}:{n}" for p, n in spec.forwards]
    return " ".join(parts)


def remove_lab(name: str) -> None:
    """Remove lab ``name`` whatever its state (up, half-built, gone): the engine of ``down``."""
    system.require_root()
    validate_name(name)
    with statemod.locked(name):
        _teardown(name, statemod.load(name))
        statemod.remove(name)


def _teardown(name: str, st: LabState | None) -> None:
    """Remove everything lab ``name`` may have created: its processes, namespaces (found by
    the state's plan and by name pattern, so a half-built lab goes too) and /etc/netns dirs."""
    pattern = namespace_pattern(name)
    namespaces = {ns for ns in system.existing_namespaces() if pattern.match(ns)}
    if st is not None:
        with contextlib.suppress(ConfigError):
            namespaces |= set(plan(st.spec).namespaces) & system.existing_namespaces()
    if namespaces:
        system.kill_namespaces(sorted(namespaces))
        system.ip_batch(netns_del_batch(sorted(namespaces)), force=True)
    with contextlib.suppress(FileNotFoundError):
        for entry in system.ETC_NETNS.iterdir():
            if pattern.match(entry.name):
                system.remove_tree(entry)
    system.remove_empty_dir(system.ETC_NETNS)
    left = {ns for ns in system.existing_namespaces() if pattern.match(ns)}
    if left:
        raise system.LabError(f"lab {name}: could not remove namespaces {sorted(left)}",
                              "a process may still hold them; see: ip netns pids NS")


_Buffers = dict[tuple[int, str], list[str]]


def _collect(procs: Sequence[tuple[LabNode, subprocess.Popen[str]]], started: float,
             timeout: float | None, on_line: LineSink | None) -> list[NodeResult]:
    """Read every node's stdout/stderr concurrently (line by line when streaming) and wait,
    killing whatever still runs at the deadline."""
    bufs, threads = _start_readers(procs, on_line)
    waited = _wait_all(procs, started, timeout)
    for t in threads:
        t.join(timeout=5)
    out = []
    for node, proc, timed_out, took in waited:
        stderr = "".join(bufs[(node.index, "stderr")])
        if timed_out:
            stderr += f"ddpnet lab: killed on {node.name} after the {timeout:g} s timeout\n"
        out.append(NodeResult(node=node, returncode=TIMEOUT_EXIT if timed_out else proc.returncode,
                              stdout="".join(bufs[(node.index, "stdout")]), stderr=stderr,
                              duration_s=took, timed_out=timed_out))
    return out


def _start_readers(procs: Sequence[tuple[LabNode, subprocess.Popen[str]]],
                   on_line: LineSink | None) -> tuple[_Buffers, list[threading.Thread]]:
    """One thread per node and stream, filling a buffer (and ``on_line`` when streaming)."""
    bufs: _Buffers = {}
    threads = []

    def reader(node: LabNode, stream: str, pipe: Any) -> None:
        buf = bufs[(node.index, stream)]
        for line in pipe:
            buf.append(line)
            if on_line is not None:
                on_line(node, stream, line.rstrip("\n"))
        pipe.close()

    for node, proc in procs:
        for stream, pipe in (("stdout", proc.stdout), ("stderr", proc.stderr)):
            bufs[(node.index, stream)] = []
            t = threading.Thread(target=reader, args=(node, stream, pipe), daemon=True)
            t.start()
            threads.append(t)
    return bufs, threads


def _wait_all(procs: Sequence[tuple[LabNode, subprocess.Popen[str]]], started: float,
              timeout: float | None
              ) -> list[tuple[LabNode, subprocess.Popen[str], bool, float]]:
    """(node, process, timed out, seconds) for each, killing the group at the deadline."""
    deadline = None if timeout is None else started + timeout
    results = []
    for node, proc in procs:
        timed_out = False
        try:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            proc.wait()
        results.append((node, proc, timed_out, time.monotonic() - started))
    return results

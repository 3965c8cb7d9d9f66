"""Stage 1, pure part: judge who registered at rendezvous.

Every process publishes a :class:`Registration` under its own arrival number (not under its
rank, so two processes claiming one rank are both seen). Rank 0 judges the list against its
own world size and port: missing ranks, duplicate ranks, differing WORLD_SIZE / MASTER_PORT.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass

from ddpnet.check.causes import Cause, host_label
from ddpnet.output import rank_ranges


@dataclass(frozen=True)
class Registration:
    """What one process says about itself when it joins."""

    rank: int
    world_size: int
    master_port: int
    host: str
    address: str
    interface: str
    pid: int
    uid: str
    launcher: str = ""

    @property
    def label(self) -> str:
        return host_label(self.host, self.address)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Registration:
        data = json.loads(text)
        return cls(**data)


@dataclass(frozen=True)
class RosterVerdict:
    """The judged registration: ``roster`` holds one registration per rank (the first to
    arrive when a rank is duplicated); ``causes`` is empty when everyone is there."""

    roster: tuple[Registration, ...]
    causes: tuple[Cause, ...]
    missing: tuple[int, ...]

    @property
    def ok(self) -> bool:
        return not self.causes


def _ranks(ranks: list[int]) -> str:
    return rank_ranges(ranks)


def judge_registrations(
    own: Registration, arrivals: list[Registration], *, waited_s: float
) -> RosterVerdict:
    """Compare every arrival with rank 0's own view (``own``) of world size and port."""
    world = own.world_size
    by_rank: dict[int, list[Registration]] = defaultdict(list)
    for reg in arrivals:
        by_rank[reg.rank].append(reg)
    missing = tuple(r for r in range(world) if r not in by_rank)
    found = (_wrong_world(own, arrivals), _wrong_port(own, arrivals), _duplicates(by_rank),
             _missing(own, arrivals, by_rank, missing, waited_s), _out_of_range(own, by_rank))
    roster = tuple(by_rank[r][0] for r in sorted(by_rank) if 0 <= r < world)
    return RosterVerdict(roster=roster, causes=tuple(c for c in found if c is not None),
                         missing=missing)


def _wrong_world(own: Registration, arrivals: list[Registration]) -> Cause | None:
    world = own.world_size
    wrong_world = [r for r in arrivals if r.world_size != world]
    if not wrong_world:
        return None
    seen = sorted({r.world_size for r in arrivals})
    return Cause(
        id="world-size-mismatch",
        stage="rendezvous",
        hosts=tuple(r.label for r in wrong_world),
        ranks=tuple(sorted(r.rank for r in wrong_world)),
        detail=(
            f"rank 0 has WORLD_SIZE={world} but "
            + "; ".join(f"rank {r.rank} on {r.label} has WORLD_SIZE={r.world_size}"
                        for r in wrong_world)
            + f" (values seen: {', '.join(map(str, seen))})"
        ),
        fix=f"export WORLD_SIZE={world} on every node (or pass the same --nnodes/"
            "--nproc-per-node to the launcher everywhere)",
        evidence=(f"rank 0 registered WORLD_SIZE={world}",
                  *(f"rank {r.rank} on {r.label} registered WORLD_SIZE={r.world_size}"
                    for r in wrong_world)),
        see_for_yourself="echo $WORLD_SIZE $RANK  # in the job's environment, each node",
    )


def _wrong_port(own: Registration, arrivals: list[Registration]) -> Cause | None:
    wrong_port = [r for r in arrivals if r.master_port != own.master_port]
    if not wrong_port:
        return None
    return Cause(
        id="master-port-mismatch",
        stage="rendezvous",
        hosts=tuple(r.label for r in wrong_port),
        ranks=tuple(sorted(r.rank for r in wrong_port)),
        detail="; ".join(f"rank {r.rank} on {r.label} has MASTER_PORT={r.master_port}"
                         for r in wrong_port)
               + f", rank 0 listens on {own.master_port}",
        fix=f"export MASTER_PORT={own.master_port} on every node",
        evidence=(f"rank 0 listens on {own.master_port}",
                  *(f"rank {r.rank} on {r.label} registered MASTER_PORT={r.master_port}"
                    for r in wrong_port)),
        ruled_out=("a blocked port: these ranks reached rank 0 and said which port they "
                   "were given",),
        see_for_yourself="echo $MASTER_ADDR $MASTER_PORT  # each node",
    )


def _duplicates(by_rank: dict[int, list[Registration]]) -> Cause | None:
    dups = {r: regs for r, regs in sorted(by_rank.items()) if len(regs) > 1}
    if not dups:
        return None
    hosts: list[str] = []
    parts: list[str] = []
    for r, regs in dups.items():
        hosts.extend(x.label for x in regs)
        parts.append(f"rank {r} claimed by {len(regs)} processes: "
                     + ", ".join(f"{x.label} pid {x.pid}" for x in regs))
    return Cause(
        id="duplicate-rank",
        stage="rendezvous",
        hosts=tuple(hosts),
        ranks=tuple(dups),
        detail="; ".join(parts),
        fix="give every process a distinct RANK (0..WORLD_SIZE-1): on each node "
            "RANK = NODE_RANK * nproc_per_node + LOCAL_RANK, or let torchrun/srun set it",
        evidence=tuple(parts),
        see_for_yourself="echo $RANK $NODE_RANK $LOCAL_RANK  # each process",
    )


def _missing(own: Registration, arrivals: list[Registration],
             by_rank: dict[int, list[Registration]], missing: tuple[int, ...],
             waited_s: float) -> Cause | None:
    if not missing:
        return None
    world = own.world_size
    present = sorted(by_rank)
    hosts_seen = sorted({r.label for r in arrivals})
    return Cause(
        id="missing-ranks",
        stage="rendezvous",
        ranks=missing,
        hosts=(),
        detail=(
            f"{len(missing)} of {world} ranks never joined within {waited_s:.1f} s: "
            f"rank(s) {_ranks(list(missing))}; joined: rank(s) {_ranks(present)} "
            f"on {', '.join(hosts_seen) if len(hosts_seen) <= 8 else f'{len(hosts_seen)} hosts'}"
        ),
        fix=(
            "start `ddpnet check` on the missing rank(s) with the same MASTER_ADDR/"
            f"MASTER_PORT={own.master_port}/WORLD_SIZE={world}; if it runs there, run "
            "`ddpnet doctor` on that node: it cannot reach the master port"
        ),
        evidence=(f"rank(s) {_ranks(present)} registered with rank 0's store within "
                  f"{waited_s:.1f} s", f"rank(s) {_ranks(list(missing))}: no registration"),
        ruled_out=("a crash after joining: a rank that joined and died is registered",),
        confidence="medium",  # never started, or started and could not reach the store
        see_for_yourself=f"nc -zv $MASTER_ADDR {own.master_port}  # on the missing node",
    )


def _out_of_range(own: Registration, by_rank: dict[int, list[Registration]]) -> Cause | None:
    world = own.world_size
    out_of_range = sorted(r for r in by_rank if r < 0 or r >= world)
    if not out_of_range:
        return None
    return Cause(
        id="world-size-mismatch",
        stage="rendezvous",
        ranks=tuple(out_of_range),
        hosts=tuple(x.label for r in out_of_range for x in by_rank[r]),
        detail=f"rank(s) {_ranks(out_of_range)} are outside 0..{world - 1} "
               f"(WORLD_SIZE={world} on rank 0)",
        fix=f"export WORLD_SIZE={world} and a RANK below it on every node",
        evidence=(*(f"rank {r} registered from {x.label}" for r in out_of_range
                    for x in by_rank[r]), f"rank 0's WORLD_SIZE={world}"),
        see_for_yourself="echo $WORLD_SIZE $RANK  # each node",
    )

"""Whether a rank whose side channel closed without a goodbye is gone, or only its channel (edge):
two connects :data:`AGAIN_S` apart to its ``side`` port (a killed process closes its files one by
one). docs/watch.md, "How it works"."""

from __future__ import annotations

import queue
import socket
import threading
import time
from dataclasses import dataclass

from ddpnet.watch.probe import SIDE, ports_of
from ddpnet.watch.state import RankState

#: the bound on one check's connect, and the pause before the second
CHECK_S = 1.0
AGAIN_S = 0.5


@dataclass(frozen=True)
class Checked:
    rank: int
    alive: bool
    detail: str


def side_port(state: RankState | None) -> tuple[str, int] | None:
    """Where ``state``'s process answers (its address and side port), None if it said not."""
    if state is None or not state.address:
        return None
    port = ports_of(state).get(SIDE)
    return (state.address, port) if port else None


def check(rank: int, where: tuple[str, int], timeout: float = CHECK_S,
          again: float = AGAIN_S) -> Checked:
    """Two connects to ``where``, ``again`` s apart (edge, each bounded by ``timeout``)."""
    for attempt in range(2):
        if attempt:
            time.sleep(again)
        try:
            with socket.create_connection(where, timeout=timeout):
                pass
        except OSError as exc:
            return Checked(rank, False, f"its side port {where[1]}: {exc.strerror or exc}")
    return Checked(rank, True, f"its side port {where[1]} answers")


class Checks:
    """Checks under way, each in a daemon thread; :meth:`done` hands back the answers."""

    def __init__(self) -> None:
        self.answers: queue.SimpleQueue[Checked] = queue.SimpleQueue()
        self.running: set[int] = set()

    def start(self, rank: int, where: tuple[str, int]) -> None:
        self.running.add(rank)
        threading.Thread(target=lambda: self.answers.put(check(rank, where)),
                         name="ddpnet-watch-channel", daemon=True).start()

    def done(self) -> list[Checked]:
        out = []
        while not self.answers.empty():
            answer = self.answers.get_nowait()
            self.running.discard(answer.rank)
            out.append(answer)
        return out

"""The side channel's messages: one JSON object per line, each at most :data:`MAX_LINE`
bytes (pure). Ranks send ``hello``/``state``/``call``/``bye``; the hub answers ``verdict`` or
``bye``; ``ddpnet diagnose`` sends ``snapshot`` and reads one back."""

from __future__ import annotations

import json
from typing import Any

#: no message may be longer (a 32-record state is ~10 KB; a 1000-rank snapshot ~10 MB)
MAX_LINE = 1 << 20
MAX_SNAPSHOT = 64 << 20


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


class Lines:
    """Bytes in, complete messages out; a line longer than ``limit`` is a broken peer."""

    def __init__(self, limit: int = MAX_LINE) -> None:
        self.buffer = b""
        self.limit = limit

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        if len(self.buffer) > self.limit:
            raise ValueError(f"a side-channel message is longer than {self.limit} bytes")
        out = []
        for line in lines:
            if line.strip():
                message = json.loads(line)
                if isinstance(message, dict):
                    out.append(message)
        return out

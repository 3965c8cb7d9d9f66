"""Several ranks' ``ddpnet env --json`` objects, concatenated on one stream."""

from __future__ import annotations

import json
from typing import Any


def json_objects(text: str) -> list[dict[str, Any]]:
    """The pretty-printed JSON objects of ``text``, in order."""
    decoder = json.JSONDecoder()
    objs, i = [], 0
    while i < len(text):
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            break
        obj, i = decoder.raw_decode(text, i)
        objs.append(obj)
    return objs

"""Transparent huge pages for torch's large CPU tensors (``THP_MEM_ALLOC_ENABLE``).

On CPU every fresh tensor above glibc's mmap threshold (at most 32 MB) is new memory from the
kernel, faulted in 4 KB at a time: ~50 ms for 100 MB here, against ~10 ms with 2 MB pages. A
training step makes several such tensors (the weight gradients backward returns, a hook's
16-bit copy), so in the comm-bound benchmark this was a visible part of the step. torch aligns
allocations of 2 MB and more to huge pages and ``madvise``s them when ``THP_MEM_ALLOC_ENABLE``
is set, which works with the kernel's default THP mode (``madvise``).

torch reads the variable once, at its first allocation, so it must be in the environment
before torch is imported: ``ddpnet train`` sets it at its entry point unless the user did.
"""

from __future__ import annotations

from collections.abc import Mapping

VAR = "THP_MEM_ALLOC_ENABLE"


def default_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What ``ddpnet train`` adds to the environment: the variable on, unless the user set it."""
    return {} if VAR in environ else {VAR: "1"}


def enabled(environ: Mapping[str, str]) -> bool:
    return environ.get(VAR, "").strip() not in ("", "0")


def describe(environ: Mapping[str, str]) -> str:
    """One line for the run's notes."""
    if enabled(environ):
        return f"{VAR}={environ[VAR]}: torch puts large CPU tensors on huge pages"
    return (f"{VAR} is off: large CPU tensors are faulted in 4 KB at a time "
            f"(ddpnet train turns it on unless {VAR} is set)")

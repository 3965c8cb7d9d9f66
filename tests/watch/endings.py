"""Who ended a rank, from its exit code and its own stderr (issue 56): a test that accepted
"4 or -6" could not tell a rank the watch ended from one that crashed for another reason.

- the watch: exit 4 and the rank's own line ``ddpnet: watch: rank N exits (4): KIND: ...``
  naming the cause the hub named;
- gloo: a rank that receives the other collective's bytes (a skipped call, another shape) is
  aborted from gloo's own thread, where nothing can catch it: SIGABRT (-6, or 134 from a
  launcher that reports 128 + the signal), with the C++ runtime's ``terminate called`` line.
"""

from __future__ import annotations

#: the C++ runtime's last words when gloo's thread throws (its enforce, an I/O error)
GLOO_ABORT = "terminate called after throwing an instance of 'gloo::"
#: SIGABRT as the rank's own exit code, and as a launcher (torchrun) reports it
ABORTED = frozenset({-6, 134})


def ended_by(rank: int, code: int, stderr: str, kind: str) -> str:
    """``"watch"`` or ``"gloo"``; AssertionError with the rank's stderr when neither ended
    it as they do (another code, or the code without its line)."""
    if code == 4 and f"ddpnet: watch: rank {rank} exits (4): {kind}: " in stderr:
        return "watch"
    if code in ABORTED and GLOO_ABORT in stderr:
        return "gloo"
    raise AssertionError(f"rank {rank} exited {code}, ended by neither the watch's {kind} "
                         f"verdict nor gloo's abort:\n{stderr[-2000:]}")

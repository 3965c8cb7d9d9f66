"""``ddpnet check``: the whole cluster checked at once, root cause first.

Stages (each bounded in time, run on every rank, judged on rank 0): rendezvous over torch's
TCPStore, facts comparison, full-mesh reachability, process group + checked all_reduce,
bandwidth tournament, optional collective bench.

- ``options``: what a run is asked to do; ``run``: ``run(options) -> CheckResult`` (the
  edge: sockets, torch, ``--local`` workers through ``ddpnet.local``); ``__main__``: the
  ``--local`` worker entry.
- ``store``: the key/value protocol over the TCPStore; ``context``: what every stage works
  with; ``coordinator`` (rank 0) and ``worker`` (ranks > 0) run ``stages/`` in order.
- pure judges: ``registration``, ``compare``, ``mesh``, ``tournament``; the report:
  ``report``, ``result``, ``render_text``, ``render_html``; ``tools``: the injectable
  pieces borrowed from ``net``, ``doctor`` and ``bench``.
"""

from __future__ import annotations

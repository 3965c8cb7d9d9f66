"""``ddpnet check``: the whole cluster checked at once, root cause first.

Stages (each bounded in time, run on every rank, judged on rank 0): rendezvous over torch's
TCPStore, facts comparison, full-mesh reachability, process group + checked all_reduce,
bandwidth tournament, optional collective bench. Pure analysis lives in ``registration``,
``compare``, ``mesh``, ``tournament``; sockets and the store live in ``runner``.
"""

from __future__ import annotations

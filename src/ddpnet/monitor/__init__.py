"""Live network, GPU and training telemetry for one node (nload + iftop + nvidia-smi in one).

``sources`` reads raw counters (files and tools at the edge, parsers pure), ``rates`` turns two
snapshots into a :class:`~ddpnet.monitor.rates.Sample`, ``view`` renders it, ``record`` and
``plot`` keep it, ``recorder`` samples in the background during training.
"""

from __future__ import annotations

"""``ddpnet lab``: a virtual multi-node cluster in Linux network namespaces, with faults.

>>> with Lab(name="x1", nodes=3, rate="1gbit") as lab:      # doctest: +SKIP
...     results = lab.run(["hostname"])
"""

from __future__ import annotations

from ddpnet.lab.lab import Lab, NodeResult
from ddpnet.lab.topology import LabNode, LabSpec

__all__ = ["Lab", "LabNode", "LabSpec", "NodeResult"]

"""``ddpnet tune``: the guides' system set-up rendered per distribution, applied safely,
reversible.

Every part (sysctl, firewall, SELinux, static IP, /etc/hosts, env file) is a pure renderer
from a :class:`~ddpnet.tune.model.TuneRequest` and :class:`~ddpnet.tune.model.HostFacts` to a
:class:`~ddpnet.tune.model.Part`; :mod:`ddpnet.tune.plan` assembles them, :mod:`ddpnet.tune.facts`
reads the host (the edge) and :mod:`ddpnet.tune.apply` writes, journals and reverts.
"""

from __future__ import annotations

"""The hub's metrics view (``DDPNET_METRICS_PORT``): what a scrape renders
(:mod:`ddpnet.watch.metrics`), served on the socket rank 0 bound for it from a thread of its
own, as copies of what the hub's thread changes.
"""

from __future__ import annotations

import socket
import time

from ddpnet.watch import straggler
from ddpnet.watch.hubstore import HubState
from ddpnet.watch.metrics import JobView
from ddpnet.watch.state import Snapshot


class MetricsView(HubState):
    """Serving the job's metrics."""

    def serve_metrics(self, sock: socket.socket) -> None:
        """Serve the job's metrics on ``sock`` (bound by rank 0) from a thread of its own."""
        from prometheus_client import CollectorRegistry

        from ddpnet.net.exposition import Server
        from ddpnet.watch.metrics import JobCollector

        registry = CollectorRegistry(auto_describe=False)
        registry.register(JobCollector(self.metrics_view))
        # a verdict (or the job moving again) shows in the very next scrape, never a render
        # from before it (net.exposition serves a costly render again for a while)
        self.metrics = Server(sock, registry,
                              lambda: (len(self.verdicts), self.watchdog.fired))

    def metrics_view(self) -> JobView:
        """What a scrape renders (the server's thread: copies, each one atomic under the
        GIL, of what the hub's thread changes)."""
        now = time.monotonic()
        states = dict(self.states)
        verdicts = list(self.verdicts)
        threshold = self.watchdog.threshold
        snapshot = Snapshot(self.options.world_size, time.time(), dict(states))
        return JobView(
            job_id=self.options.job_id, world_size=self.options.world_size,
            started=time.time() - (now - self.started), states=states,
            heard_ago={r: now - at for r, at in dict(self.heard).items()},
            threshold_s=threshold.seconds, threshold_source=threshold.source,
            warnings=tuple(w.kind for w in list(self.warnings)),
            verdicts=tuple(v.kind for v in verdicts),
            standing=verdicts[-1] if verdicts and self.watchdog.fired else None,
            probes=dict(self.link_probes), straggler_scores=straggler.scores(snapshot),
            version=self.options.version)

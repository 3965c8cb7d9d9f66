"""Serve a ``prometheus_client`` registry over HTTP on one socket bound beforehand (edge).

The watch's hub (the job's metrics) and ``ddpnet monitor --metrics-port`` (the node's) both
serve through here. The socket is bound by the caller's process first (:func:`bind`), so a
port in use is a user error said at start-up (one line, a hint, exit 2) and not a warning lost
in a background thread; the hub receives it already bound from rank 0. What is served is
rendered by the registry's collectors when Prometheus scrapes, nothing in between; a render
answers the scrapes that come within ten times its own cost (:data:`RENDER_SHARE`), so however
often and however many scrape, rendering takes at most a tenth of the process's time.
"""

from __future__ import annotations

import errno
import itertools
import socket
import statistics
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from typing import Any

from ddpnet.errors import ConfigError

#: seconds a scrape's connection may sit idle before the server drops it
REQUEST_TIMEOUT_S = 10.0
#: scrapes remembered (their start times) to learn the scraper's pace
SCRAPES_KEPT = 8
#: a scraper is taken as gone once this many of its own intervals passed without a scrape
#: (Prometheus jitters its scrapes by a fraction of one), plus SCRAPE_SLACK_S
SCRAPE_MISSED = 2.0
SCRAPE_SLACK_S = 1.0
#: the most of the serving process's time rendering may take whoever scrapes how often: a
#: render is served again to scrapes within its own cost / RENDER_SHARE (4 ms at 8 ranks:
#: 40 ms, no cache in practice; 0.3 s at 1,024: 3 s), unless what it rendered changed its
#: generation (the hub: a verdict)
RENDER_SHARE = 0.1


def bind(address: str, port: int, what: str) -> socket.socket:
    """A socket listening on ``address``:``port`` for ``what`` (e.g. "--metrics-port");
    ConfigError (exit 2) when it cannot be bound."""
    from ddpnet.net.ports import listen_socket

    if not 0 <= port < 65536:
        raise ConfigError(f"{what} {port} is not a TCP port", "use a port in 1..65535, e.g. 9464")
    try:
        return listen_socket(address, port, backlog=64)
    except OSError as exc:
        shown = f"[{address}]" if ":" in address else (address or "*")
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(f"{what} {port}: {shown}:{port} is already in use on "
                              f"{socket.gethostname()}",
                              f"pick another port, or stop what holds it (`ss -ltnp "
                              f"'sport = :{port}'`)") from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise ConfigError(f"{what} {port}: {shown} is not an address of "
                              f"{socket.gethostname()}",
                              "give one of this host's addresses (`ip -brief address`), or "
                              "leave --listen out") from None
        raise ConfigError(f"{what} {port}: cannot listen on {shown}:{port} on "
                          f"{socket.gethostname()}: {exc.strerror or exc}",
                          "pick another port (below 1024 needs root)") from None


def seen_by_scrape(scrapes: Sequence[float], rendered: float, event_at: float, now: float,
                   bound: float) -> bool:
    """Whether waiting longer for a scrape to render what changed at ``event_at`` is pointless
    (pure; monotonic seconds; ``scrapes``: when the last scrapes came, oldest first;
    ``rendered``: the state the freshest answer rendered, as of then): one rendered after it;
    none ever came (nothing scrapes); the scraper's own pace (:data:`SCRAPE_MISSED` times its
    median interval, learned from two or more scrapes) passed since its last scrape without
    another (it stopped); or ``bound`` seconds passed since the event."""
    if not scrapes or rendered > event_at or now - event_at >= bound:
        return True
    if len(scrapes) < 2:
        return False
    pace = statistics.median(b - a for a, b in itertools.pairwise(scrapes))
    return now - scrapes[-1] > SCRAPE_MISSED * pace + SCRAPE_SLACK_S


@dataclass(frozen=True)
class Render:
    """One rendered answer: the state as of ``as_of`` (monotonic), what it cost (seconds),
    the generation it rendered, the bytes."""

    as_of: float
    took: float
    generation: Hashable
    body: bytes


def still_fresh(render: Render | None, generation: Hashable, now: float,
                share: float = RENDER_SHARE) -> bool:
    """Whether ``render`` may answer a scrape at ``now`` (pure): its generation still stands
    and it is younger than its own cost over ``share``."""
    return render is not None and render.generation == generation and \
        now - render.as_of < render.took / share


def _constant() -> Hashable:
    return None


class Server:
    """A ``prometheus_client`` registry served on ``sock`` from a daemon thread, rendered at
    most once per :func:`still_fresh` window per format (``generation``: a value that changes
    when something must show in the very next scrape)."""

    def __init__(self, sock: socket.socket, registry: Any,
                 generation: Callable[[], Hashable] = _constant) -> None:
        from prometheus_client import MetricsHandler

        self.registry = registry
        self.generation = generation
        #: when the last scrapes came (monotonic, oldest first); the state the freshest answer
        #: rendered, as of when (-inf: none)
        self.scrapes: deque[float] = deque(maxlen=SCRAPES_KEPT)
        self.rendered = float("-inf")
        self.renders: dict[tuple[str, bool], Render] = {}
        self.lock = threading.Lock()

        def do_GET(handler: Any) -> None:
            self.answer(handler)

        handler = type("Handler", (MetricsHandler,), {"timeout": REQUEST_TIMEOUT_S,
                                                       "log_message": _quiet, "do_GET": do_GET})
        server = _Quiet(sock.getsockname()[:2], handler, bind_and_activate=False)
        server.socket.close()
        server.socket = sock
        server.daemon_threads = True
        self.server = server
        self.port = int(sock.getsockname()[1])
        self.thread = threading.Thread(target=server.serve_forever, name="ddpnet-metrics",
                                       kwargs={"poll_interval": 0.5}, daemon=True)
        self.thread.start()

    def answer(self, handler: Any) -> None:
        """One scrape (the handler's ``do_GET``): the format it accepts, gzip if it may."""
        from prometheus_client.exposition import choose_encoder, gzip_accepted

        self.scrapes.append(time.monotonic())
        encoder, content_type = choose_encoder(handler.headers.get("Accept"))
        zipped = gzip_accepted(handler.headers.get("Accept-Encoding"))
        body = self.body(encoder, content_type, zipped)
        handler.send_response(200)
        handler.send_header("Content-Type", content_type)
        if zipped:
            handler.send_header("Content-Encoding", "gzip")
        handler.end_headers()
        handler.wfile.write(body)

    def body(self, encoder: Callable[[Any], bytes], content_type: str, zipped: bool) -> bytes:
        """The last render in this format while :func:`still_fresh`, else a new one (one
        scrape renders at a time: others wait for it and take it)."""
        import gzip

        with self.lock:
            generation, key = self.generation(), (content_type, zipped)
            render = self.renders.get(key)
            if not still_fresh(render, generation, time.monotonic()):
                began = time.monotonic()
                body = encoder(self.registry)
                render = Render(began, time.monotonic() - began, generation,
                                gzip.compress(body) if zipped else body)
                self.renders[key] = render
            assert render is not None
            self.rendered = max(self.rendered, render.as_of)
            return render.body

    @property
    def scraped(self) -> float:
        """When the last scrape came (monotonic; -inf: never)."""
        return self.scrapes[-1] if self.scrapes else float("-inf")

    def seen(self, event_at: float, now: float, bound: float) -> bool:
        """:func:`seen_by_scrape` over this server's scrapes."""
        return seen_by_scrape(list(self.scrapes), self.rendered, event_at, now, bound)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _quiet(self: Any, format: str, *args: Any) -> None:
    """No line per scrape on stderr (the hub's stderr is rank 0's)."""


class _Quiet(ThreadingHTTPServer):
    """No traceback on the hub's stderr (rank 0's) when a scraper hangs up mid-answer (its
    scrape timeout on a slow render: a broken pipe, a reset) or stalls past
    :data:`REQUEST_TIMEOUT_S`; other errors still print."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            super().handle_error(request, client_address)

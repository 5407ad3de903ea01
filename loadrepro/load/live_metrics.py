"""loadrepro's own metrics on 127.0.0.1:PORT/metrics while a run goes on (`--serve-metrics`), for a dashboard
during a soak: requests by outcome, in flight, TTFT / ITL / end-to-end histograms, output tokens, /health as polled,
the engine's KV usage and waiting requests as read, the rules fired so far, the run's phase. prometheus_client with
a registry of its own (nothing global), named as Prometheus asks: loadrepro_*, seconds, _total for counters."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref.types import WSGIApplication as WSGIApp

from prometheus_client import CollectorRegistry, Counter, Enum, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from loadrepro.records import KV_USAGE, WAITING, HealthSample, MetricsSample, RequestRecord, Sample

PHASES = ["starting", "planning", "loading", "judging", "done"]
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
LINGER_S = 15.0  # at the end, how long the last values wait for a scraper that was scraping to take them, at least
LINGER_INTERVALS, LINGER_MAX_S = 2.5, 60.0  # and at most: two and a half of its intervals (a busy scraper is late)


class _Scrapes(Collector):
    """Counts the scrapes as they begin, and knows which have been written whole to their scraper, so that the end
    can wait for one that began after the last values were set (it read them) and reached its scraper (a response
    cut short by the process's exit, or begun before the last values, gives a dashboard a last point that is not
    the report's). Prometheus gives up on a scrape after its timeout (the scrape interval, when that is shorter)
    and stores nothing of it, however whole the server later writes it: a scrape that says its timeout is taken
    only when written within half of it (the time it waited to be accepted is not seen here)."""

    def __init__(self) -> None:
        self.count = 0  # begun
        self.taken = 0  # the latest begun (its number) that was written whole
        self.changed = threading.Condition()
        self.begun: list[float] = []  # when the last scrapes began (monotonic): the scraper's interval
        self.prometheus = False  # a scrape said its timeout, as Prometheus's do: a scraper is scraping, however few

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily("loadrepro_metrics_scrapes", "Scrapes of these metrics served.", value=self.count)

    def counted(self, app: WSGIApp) -> WSGIApp:
        """`app` with each request numbered as it begins and marked taken when its response was written whole (the
        server closes the response's body after writing it: WSGI's close)."""
        def serve(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
            with self.changed:
                self.count += 1
                number = self.count
                self.begun = [*self.begun[-3:], time.monotonic()]
            said = environ.get("HTTP_X_PROMETHEUS_SCRAPE_TIMEOUT_SECONDS")
            self.prometheus |= said is not None
            deadline = _deadline(said)
            return _Closing(app(environ, start_response), lambda: self._took(number, deadline))

        return serve

    def _took(self, number: int, deadline: float | None) -> None:
        if deadline is not None and time.monotonic() > deadline:
            return  # its scraper had given up on it
        with self.changed:
            self.taken = max(self.taken, number)
            self.changed.notify_all()

    def scraping(self) -> bool:
        """Whether a scraper is scraping (Prometheus, or more than one scrape: not a one-off look), so that the end
        waits for it to take the last values. Prometheus with a long interval may have scraped a short run once."""
        return self.prometheus or self.count > 1

    def taken_since(self, seen: int) -> bool:
        """A scrape begun after the first `seen` was written whole."""
        return self.taken > seen

    def linger_s(self, least_s: float) -> float:
        """How long to wait for the scraper's next scrape: `least_s`, or two and a half of its interval (the longest
        gap between its last scrapes), up to LINGER_MAX_S."""
        gaps = [b - a for a, b in zip(self.begun, self.begun[1:])]
        return min(max(least_s, LINGER_INTERVALS * max(gaps, default=0.0)), max(least_s, LINGER_MAX_S))


def _deadline(timeout: str | None) -> float | None:
    """When a scrape whose scraper said `timeout` (seconds) must be written by, to be taken."""
    try:
        seconds = float(timeout) if timeout else None
    except ValueError:
        return None
    return None if seconds is None or seconds <= 0 else time.monotonic() + seconds / 2


class _Closing:
    """A WSGI response body that calls `then` when the server closes it, after writing it whole."""

    def __init__(self, body: Iterable[bytes], then: Callable[[], None]) -> None:
        self._body, self._then = body, then

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._body)

    def close(self) -> None:
        close = getattr(self._body, "close", None)
        if close is not None:
            close()
        self._then()


class LiveMetrics:
    """Started before the run is planned, stopped after it is judged; told each record and sample by the runner
    (load/runner.py) and each judgement (runs/session.py)."""

    def __init__(self, port: int, endpoint: str, linger_s: float = LINGER_S) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        # Each scrape counted as it begins, before any value is read: the end waits for one that began after the
        # last values were set, not for one that read them before and ended after (a busy machine can hold a scrape
        # that long), and that was written whole.
        self._scrapes, self._linger_s = _Scrapes(), linger_s
        r.register(self._scrapes)
        self.endpoint = endpoint
        self.requests = Counter("loadrepro_requests", "Requests that ended, by outcome.", ["outcome"], registry=r)
        self.in_flight = Gauge("loadrepro_requests_in_flight", "Requests loadrepro has sent and not yet seen end.",
                               registry=r)
        self.ttft = Histogram("loadrepro_ttft_seconds", "Sent -> first token, of each request that got one.",
                              buckets=LATENCY_BUCKETS, registry=r)
        self.itl = Histogram("loadrepro_itl_seconds", "Each request's mean gap between token chunks.",
                             buckets=LATENCY_BUCKETS, registry=r)
        self.e2e = Histogram("loadrepro_e2e_seconds", "Sent -> end, of each request sent, whatever its outcome.",
                             buckets=LATENCY_BUCKETS, registry=r)
        self.output_tokens = Counter("loadrepro_output_tokens", "Output tokens received.", registry=r)
        self.health_status = Gauge("loadrepro_health_status", "The HTTP status of the last /health poll (0: no "
                                   "answer).", ["endpoint"], registry=r)
        self.health_latency = Histogram("loadrepro_health_latency_seconds", "How long each /health poll took.",
                                        ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        self.kv_usage = Gauge("loadrepro_engine_kv_usage_ratio", "The engine's KV-cache usage (0-1), as last read "
                              "from its metrics.", ["endpoint"], registry=r)
        self.waiting = Gauge("loadrepro_engine_requests_waiting", "The engine's waiting requests, as last read.",
                             ["endpoint"], registry=r)
        self.rule_fired = Gauge("loadrepro_rule_fired", "1 when the rule has fired so far in the run (judged at each "
                                "checkpoint and at the end), 0 when not.", ["rule", "severity"], registry=r)
        self.phase = Enum("loadrepro_run_phase", "What the run is doing.", states=PHASES, registry=r)
        self._server, self._thread = start_http_server(port, addr="127.0.0.1", registry=r)
        served = self._server.get_app()
        assert served is not None, "start_http_server sets its application"
        self._server.set_app(self._scrapes.counted(served))
        self.port = int(self._server.server_port)
        self.url = f"http://127.0.0.1:{self.port}/metrics"
        self.phase.state("starting")

    def in_flight_from(self, read: Callable[[], float]) -> None:
        """The in-flight gauge reads the runner's live count when scraped."""
        self.in_flight.set_function(read)

    def record(self, r: RequestRecord) -> None:
        self.requests.labels(r.outcome.value).inc()
        for histogram, ms in ((self.ttft, r.ttft_ms), (self.e2e, r.e2e_ms)):
            if ms is not None:
                histogram.observe(ms / 1000)
        if (itl := r.mean_itl_ms) is not None:
            self.itl.observe(itl / 1000)
        self.output_tokens.inc(r.completion_tokens if r.completion_tokens is not None else len(r.chunk_ns))

    def sample(self, sample: Sample, endpoint: str | None = None) -> None:
        """The target's sample, or a watched endpoint's (by its name)."""
        where = endpoint or self.endpoint
        match sample:
            case HealthSample():
                self.health_status.labels(where).set(sample.status if isinstance(sample.status, int) else 0)
                self.health_latency.labels(where).observe(sample.latency_ns / 1e9)
            case MetricsSample(values=values):
                if (usage := values.get(KV_USAGE)) is not None:
                    self.kv_usage.labels(where).set(usage)
                if (waiting := values.get(WAITING)) is not None:
                    self.waiting.labels(where).set(waiting)

    def rules(self, fired: Iterable[tuple[str, str | None]]) -> None:
        """Each rule's name and the severity it fired with (None: not fired)."""
        for name, severity in fired:
            for level in ("fail", "info"):
                self.rule_fired.labels(name, level).set(1 if severity == level else 0)

    def phased(self, phase: str) -> None:
        self.phase.state(phase)

    def close(self) -> None:
        """Stops serving; when something was scraping (_Scrapes.scraping), first lets it take the last values (one
        more scrape begun after them and written whole, up to `linger_s` or longer for a slow scraper: linger_s()),
        so that a dashboard's last point is the report's."""
        self.phase.state("done")
        with self._scrapes.changed:
            seen = self._scrapes.count
            if self._scrapes.scraping():
                self._scrapes.changed.wait_for(lambda: self._scrapes.taken_since(seen),
                                               timeout=self._scrapes.linger_s(self._linger_s))
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self) -> LiveMetrics:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

"""Prometheus metrics of one server: latency histograms, live gauges, counters, and build information.

TTFT, inter-token latency and end-to-end time are measured separately (a slow first token and a stuttering
stream are different failures). Each app gets its own registry, so two servers in one process (tests) never
share numbers.

What a dashboard needs from the first scrape: every series carries a ``model`` label (one Prometheus can
scrape several servers; vLLM labels its series by model the same way); every counter, error types included,
is present at zero before anything happened (a rate over a series that appears only after the first error
misses that error); ``tokenrelay_build_info`` says which version runs. The ``*_created`` series that
prometheus_client adds to every counter and histogram are left out: they double the output and no
dashboard of ours reads them (and the library's own switch for that is process-wide).

Several worker processes (``serve --workers N``) are one server to whoever scrapes any of them: with
``multiprocess=True`` the counters and histograms are prometheus_client's multiprocess values (a file per
process in ``PROMETHEUS_MULTIPROC_DIR``, summed at each scrape by its ``MultiProcessCollector``; a replaced
worker's files stay, so no total goes down), and the gauges and the engine's collectors read the workers'
shared board (``server.board``) through the readers they are given.
"""

from __future__ import annotations

import math
import os
import platform
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram, Info, generate_latest
from prometheus_client import values as shared_values
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from tokenrelay import __version__
from tokenrelay._errors import ConfigError

__all__ = ["CONTENT_TYPE", "ERROR_TYPES", "Latency", "ServerMetrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_LATENCY_LABELS = ("model", "endpoint")
_GAPS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5)

#: The OpenAI error types of the ``_errors`` tree: each gets a ``tokenrelay_errors_total`` series at zero.
ERROR_TYPES = (
    "authentication_error",
    "invalid_request_error",
    "not_found_error",
    "rate_limit_error",
    "server_error",
)


class _ForModel:
    """A labelled counter seen from one model: ``labels(kind)`` is ``labels(model, kind)``."""

    def __init__(self, metric: Counter, model: str) -> None:
        self._metric = metric
        self._model = model

    def labels(self, *values: str) -> Counter:
        child: Counter = self._metric.labels(self._model, *values)
        return child


class _ManyAtOnce:
    """A histogram that takes a reply's observations in one call: every gap between its deltas.

    ``Histogram.observe`` takes a lock and searches the buckets per value (about 1.5 µs); a reply's hundreds
    of gaps, counted when it ends, cost a tenth of that here (one ``bisect`` each, on the event loop, so no
    lock). Collected as the same ``_bucket``/``_count``/``_sum`` series, labelled ``model`` and ``endpoint``
    (``labels(endpoint)`` gives that series' cells, made once).
    """

    def __init__(
        self,
        name: str,
        doc: str,
        model: str,
        buckets: Sequence[float],
        registry: CollectorRegistry,
        endpoints: Iterable[str],
        *,
        multiprocess: bool = False,
    ):
        self._name, self._doc, self._model = name, doc, model
        self._bounds = tuple(sorted(buckets))
        self._multiprocess = multiprocess
        self._series = {endpoint: self._cells((model, endpoint)) for endpoint in endpoints}
        if not multiprocess:
            registry.register(self)

    def _cells(self, labels: tuple[str, ...]) -> _Cells:
        shared: list[shared_values.ValueClass] | None = None
        if self._multiprocess:
            # The cells prometheus_client's own Histogram writes in multiprocess mode (one per bucket, not
            # cumulative, and the sum), so MultiProcessCollector merges them as it merges a Histogram's.
            names, name, doc = _LATENCY_LABELS, self._name, self._doc
            bucket = [(*labels, repr(float(b))) for b in self._bounds] + [(*labels, "+Inf")]
            shared = [
                *(
                    shared_values.ValueClass("histogram", name, name + "_bucket", (*names, "le"), v, doc)
                    for v in bucket
                ),
                shared_values.ValueClass("histogram", name, name + "_sum", names, labels, doc),
            ]
        return _Cells(labels, self._bounds, shared)

    def labels(self, endpoint: str) -> _Cells:
        return self._series[endpoint]

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self._name, self._doc, labels=list(_LATENCY_LABELS))
        for cells in self._series.values():
            cumulative, seen = [], 0
            for bound, count in zip((*self._bounds, math.inf), cells.counts, strict=True):
                seen += count
                cumulative.append(("+Inf" if bound == math.inf else repr(float(bound)), float(seen)))
            family.add_metric(list(cells.labels), cumulative, cells.sum)
        yield family


class _Cells:
    """One series of a ``_ManyAtOnce``: its bucket counts and sum, here or in the shared multiprocess cells."""

    __slots__ = ("_bounds", "_shared", "counts", "labels", "sum")

    def __init__(
        self,
        labels: tuple[str, ...],
        bounds: tuple[float, ...],
        shared: list[shared_values.ValueClass] | None,
    ) -> None:
        self.labels, self._bounds, self._shared = labels, bounds, shared
        self.counts = [0] * (len(bounds) + 1)  # the last: above every bound (+Inf)
        self.sum = 0.0

    def observe_many(self, values: Iterable[float]) -> None:
        counts, bounds = self.counts, self._bounds
        if self._shared is None:
            total = self.sum
            for value in values:
                counts[bisect_left(bounds, value)] += 1  # the first bound ≥ value: buckets are "≤ le"
                total += value  # value by value, as Histogram.observe adds them
            self.sum = total
            return
        mine, total = [0] * len(counts), 0.0  # this reply's, then added to the shared cells
        for value in values:
            mine[bisect_left(bounds, value)] += 1
            total += value
        for cell, count in zip(self._shared, mine, strict=False):
            if count:
                cell.inc(count)
        self._shared[-1].inc(total)


class Latency:
    """One endpoint's latency histograms: time to first token, the gaps between deltas, request start to end."""

    __slots__ = ("e2e", "inter_token", "ttft")

    def __init__(self, ttft: Histogram, inter_token: _Cells, e2e: Histogram) -> None:
        self.ttft, self.inter_token, self.e2e = ttft, inter_token, e2e


class _WithoutCreated:
    """A registry's metrics with the ``*_created`` samples dropped (what ``generate_latest`` reads)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for metric in self._registry.collect():
            metric.samples = [s for s in metric.samples if not s.name.endswith("_created")]
            yield metric


class _Live:
    """The gauges read when scraped (nothing on the request path): running and queued generations."""

    def __init__(self, model: str) -> None:
        self._model = model
        self.active: Callable[[], float] = lambda: 0
        self.queued: Callable[[], float] = lambda: 0

    def collect(self) -> Iterator[Metric]:
        for name, doc, read in (
            ("tokenrelay_active_generations", "Generations running now", self.active),
            ("tokenrelay_queued_generations", "Generations waiting for a slot", self.queued),
        ):
            family = GaugeMetricFamily(name, doc, labels=["model"])
            family.add_metric([self._model], float(read()))
            yield family


class ServerMetrics:
    """The metrics of a server for ``model``; ``endpoints`` are the generation paths its requests are counted
    by (``generation.ENDPOINTS``), each with a series at zero. ``multiprocess``: one of several worker
    processes (see the module docstring)."""

    def __init__(self, model: str, endpoints: Iterable[str], *, multiprocess: bool = False) -> None:
        if multiprocess and not getattr(shared_values.ValueClass, "_multiprocess", False):
            raise ConfigError(
                "multiprocess metrics need PROMETHEUS_MULTIPROC_DIR set before prometheus_client is imported"
            )
        self.multiprocess = multiprocess
        self.registry = CollectorRegistry()
        r = self.registry
        m = ["model"]

        def histogram(name: str, doc: str, buckets: Iterable[float]) -> Histogram:
            return Histogram(name, doc, [*m, "endpoint"], buckets=tuple(buckets), registry=r)

        def counter(name: str, doc: str) -> Counter:
            child: Counter = Counter(name, doc, m, registry=r).labels(model)
            return child

        endpoints = tuple(endpoints)
        # TTFT, gaps and end-to-end time per endpoint (a Messages client's stutter is not a chat client's).
        ttft = histogram("tokenrelay_ttft_seconds", "Time to first token", _LATENCY)
        inter_token = _ManyAtOnce(
            "tokenrelay_inter_token_seconds",
            "Gap between visible deltas",
            model,
            _GAPS,
            r,
            endpoints,
            multiprocess=multiprocess,
        )
        e2e = histogram("tokenrelay_e2e_seconds", "Request start to end", _LATENCY)
        #: Each endpoint's histograms, looked up once (and so present at zero).
        self.latency = {
            endpoint: Latency(
                ttft.labels(model, endpoint), inter_token.labels(endpoint), e2e.labels(model, endpoint)
            )
            for endpoint in endpoints
        }
        self.live = _Live(model)
        self.cancellations = counter(
            "tokenrelay_cancellations", "Generations stopped because the client went away"
        )
        self.rejected = counter("tokenrelay_rejected", "Requests refused because the queue was full")
        self.tokens = _ForModel(
            Counter("tokenrelay_tokens", "Tokens processed", [*m, "kind"], registry=r), model
        )
        self.errors = _ForModel(
            Counter("tokenrelay_errors", "Requests that ended in an error", [*m, "type"], registry=r), model
        )
        self.requests = _ForModel(
            Counter("tokenrelay_requests", "Generation requests", [*m, "endpoint", "stream"], registry=r),
            model,
        )
        build = Info("tokenrelay_build", "The tokenrelay build serving", m, registry=r)
        build.labels(model).info(
            {
                "version": __version__,
                "python": platform.python_version(),
                "implementation": platform.python_implementation(),
            }
        )
        # Label children looked up once (every request counts into them), and so present at zero.
        self.prompt_tokens = self.tokens.labels("prompt")
        self.completion_tokens = self.tokens.labels("completion")
        self.requests_by_route = {
            (endpoint, stream): self.requests.labels(endpoint, "true" if stream else "false")
            for endpoint in endpoints
            for stream in (True, False)
        }
        for error_type in ERROR_TYPES:
            self.errors.labels(error_type)
        # What no multiprocess file holds: read in this process at each scrape, in either mode.
        self._here: list[Collector] = [self.live, _Only(r, "tokenrelay_build")]
        if not multiprocess:
            r.register(self.live)

    def watch(self, active: Callable[[], float], queued: Callable[[], float]) -> None:
        """Where the running and queued gauges are read from at each scrape."""
        self.live.active, self.live.queued = active, queued

    def add_collector(self, collector: Collector) -> None:
        """Another source of series read at each scrape (an engine's own numbers)."""
        if self.multiprocess:
            self._here.append(collector)
        else:
            self.registry.register(collector)

    def render(self) -> bytes:
        if not self.multiprocess:
            return generate_latest(_WithoutCreated(self.registry))
        scrape = CollectorRegistry()
        MultiProcessCollector(scrape, os.environ["PROMETHEUS_MULTIPROC_DIR"])  # type: ignore[no-untyped-call]
        for collector in self._here:
            scrape.register(collector)
        return generate_latest(_WithoutCreated(scrape))


class _Only:
    """The metrics of ``registry`` named ``name`` (the build info, which multiprocess files do not hold)."""

    def __init__(self, registry: CollectorRegistry, name: str) -> None:
        self._registry, self._name = registry, name

    def collect(self) -> Iterator[Metric]:
        return (m for m in self._registry.collect() if m.name == self._name)

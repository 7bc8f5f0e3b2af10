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
"""

from __future__ import annotations

import math
import platform
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import HistogramMetricFamily, Metric

from tokenrelay import __version__

__all__ = ["CONTENT_TYPE", "ERROR_TYPES", "ServerMetrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
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
    lock). Collected as the same ``_bucket``/``_count``/``_sum`` series, ``model`` label included.
    """

    def __init__(
        self, name: str, doc: str, model: str, buckets: Sequence[float], registry: CollectorRegistry
    ):
        self._name, self._doc, self._model = name, doc, model
        self._bounds = tuple(sorted(buckets))
        self._counts = [0] * (len(self._bounds) + 1)  # the last: above every bound (+Inf)
        self._sum = 0.0
        registry.register(self)

    def observe_many(self, values: Iterable[float]) -> None:
        counts, bounds, total = self._counts, self._bounds, self._sum
        for value in values:
            counts[bisect_left(bounds, value)] += 1  # the first bound ≥ value: Prometheus buckets are "≤ le"
            total += value  # value by value, as Histogram.observe adds them
        self._sum = total

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self._name, self._doc, labels=["model"])
        cumulative, seen = [], 0
        for bound, count in zip((*self._bounds, math.inf), self._counts, strict=True):
            seen += count
            cumulative.append(("+Inf" if bound == math.inf else repr(float(bound)), float(seen)))
        family.add_metric([self._model], cumulative, self._sum)
        yield family


class _WithoutCreated:
    """A registry's metrics with the ``*_created`` samples dropped (what ``generate_latest`` reads)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for metric in self._registry.collect():
            metric.samples = [s for s in metric.samples if not s.name.endswith("_created")]
            yield metric


class ServerMetrics:
    """The metrics of a server for ``model``; ``endpoints`` are the generation paths its requests are counted
    by (``generation.ENDPOINTS``), each with a series at zero."""

    def __init__(self, model: str, endpoints: Iterable[str]) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        m = ["model"]

        def histogram(name: str, doc: str, buckets: Iterable[float]) -> Histogram:
            child: Histogram = Histogram(name, doc, m, buckets=tuple(buckets), registry=r).labels(model)
            return child

        def gauge(name: str, doc: str) -> Gauge:
            child: Gauge = Gauge(name, doc, m, registry=r).labels(model)
            return child

        def counter(name: str, doc: str) -> Counter:
            child: Counter = Counter(name, doc, m, registry=r).labels(model)
            return child

        self.ttft = histogram("tokenrelay_ttft_seconds", "Time to first token", _LATENCY)
        self.inter_token = _ManyAtOnce(
            "tokenrelay_inter_token_seconds", "Gap between visible deltas", model, _GAPS, r
        )
        self.e2e = histogram("tokenrelay_e2e_seconds", "Request start to end", _LATENCY)
        self.active = gauge("tokenrelay_active_generations", "Generations running now")
        self.queued = gauge("tokenrelay_queued_generations", "Generations waiting for a slot")
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

    def render(self) -> bytes:
        return generate_latest(_WithoutCreated(self.registry))

"""Prometheus metrics of one server: latency histograms, live gauges, and counters.

TTFT, inter-token latency and end-to-end time are measured separately (a slow first token and a stuttering
stream are different failures). Each app gets its own registry, so two servers in one process (tests) never
share numbers.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE", "ServerMetrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_GAPS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5)


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.ttft = Histogram("tokenrelay_ttft_seconds", "Time to first token", buckets=_LATENCY, registry=r)
        self.inter_token = Histogram(
            "tokenrelay_inter_token_seconds", "Gap between visible deltas", buckets=_GAPS, registry=r
        )
        self.e2e = Histogram("tokenrelay_e2e_seconds", "Request start to end", buckets=_LATENCY, registry=r)
        self.active = Gauge("tokenrelay_active_generations", "Generations running now", registry=r)
        self.queued = Gauge("tokenrelay_queued_generations", "Generations waiting for a slot", registry=r)
        self.cancellations = Counter(
            "tokenrelay_cancellations", "Generations stopped because the client went away", registry=r
        )
        self.tokens = Counter("tokenrelay_tokens", "Tokens processed", ["kind"], registry=r)
        self.errors = Counter("tokenrelay_errors", "Requests that ended in an error", ["type"], registry=r)
        self.requests = Counter(
            "tokenrelay_requests", "Generation requests", ["endpoint", "stream"], registry=r
        )
        self.rejected = Counter(
            "tokenrelay_rejected", "Requests refused because the queue was full", registry=r
        )
        # Label children looked up once: every request counts into them.
        self.prompt_tokens = self.tokens.labels("prompt")
        self.completion_tokens = self.tokens.labels("completion")
        self.requests_by_route = {
            (endpoint, stream): self.requests.labels(endpoint, stream)
            for endpoint in ("/v1/chat/completions", "/v1/completions")
            for stream in ("true", "false")
        }

    def render(self) -> bytes:
        return generate_latest(self.registry)

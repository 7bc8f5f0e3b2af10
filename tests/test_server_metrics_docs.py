"""``/metrics`` as a dashboard reads it, and ``/docs`` / ``/redoc`` offline: never a blank page."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from _uvicorn import serve
from server_helpers import replay_app
from tokenrelay import __version__
from tokenrelay.server.generation import ENDPOINTS
from tokenrelay.server.metrics import ERROR_TYPES


def scrape(url: str, api_key: str | None = None) -> list[tuple[str, dict[str, str], float]]:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    text = httpx.get(url + "/metrics", headers=headers).text
    return [
        (sample.name, sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


def test_metrics_before_any_request() -> None:
    app, _ = replay_app("m")
    with serve(app) as url:
        samples = scrape(url)
    names = {name for name, _, _ in samples}
    assert not [n for n in names if n.endswith("_created")]
    assert all(labels.get("model") == "replay" for _, labels, _ in samples)  # every series says its model
    errors = {labels["type"]: value for name, labels, value in samples if name == "tokenrelay_errors_total"}
    assert errors == dict.fromkeys(ERROR_TYPES, 0.0)  # present at zero, every type the server can answer
    for counter in ("tokenrelay_cancellations_total", "tokenrelay_rejected_total"):
        assert (counter, {"model": "replay"}, 0.0) in samples
    requests = [labels for name, labels, _ in samples if name == "tokenrelay_requests_total"]
    assert len(requests) == 2 * len(ENDPOINTS)  # every generation endpoint, streamed and not
    (build,) = [labels for name, labels, _ in samples if name == "tokenrelay_build_info"]
    assert build["version"] == __version__ and re.fullmatch(r"\d+\.\d+\.\d+", build["python"])


def test_metrics_count_errors_by_type_with_the_model_label() -> None:
    app, _ = replay_app("m", api_key="k")
    with serve(app) as url:
        body = {"model": "replay", "messages": [{"role": "user", "content": "x"}], "stream": True}
        assert httpx.post(url + "/v1/chat/completions", json=body).status_code == 401
        ok = httpx.post(url + "/v1/chat/completions", json=body, headers={"Authorization": "Bearer k"})
        assert ok.status_code == 200
        samples = scrape(url, "k")
    assert ("tokenrelay_requests_total", {"model": "replay", "endpoint": "/v1/chat/completions", "stream": "true"}, 1.0) in samples  # fmt: skip
    ttft = {labels["endpoint"]: v for n, labels, v in samples if n == "tokenrelay_ttft_seconds_count"}
    assert ttft == {**dict.fromkeys(ENDPOINTS, 0.0), "/v1/chat/completions": 1.0}


def test_latency_histograms_are_labelled_by_endpoint() -> None:
    """TTFT, inter-token and end-to-end time per endpoint: one reply on each dialect counts in its own series,
    and every endpoint's series is there at zero before its first request."""
    app, _ = replay_app("hello there, world")
    message = [{"role": "user", "content": "x"}]
    requests = {
        "/v1/chat/completions": {"model": "replay", "messages": message, "stream": True},
        "/v1/responses": {"model": "replay", "input": "x", "stream": True},
        "/v1/messages": {"model": "replay", "messages": message, "max_tokens": 20, "stream": True},
    }
    with serve(app) as url:
        before = scrape(url)
        for path, body in requests.items():
            with httpx.stream("POST", url + path, json=body) as response:
                assert response.status_code == 200 and response.read()
        after = scrape(url)
    for name in ("tokenrelay_ttft_seconds", "tokenrelay_inter_token_seconds", "tokenrelay_e2e_seconds"):
        zero = {labels["endpoint"]: v for n, labels, v in before if n == name + "_count"}
        assert zero == dict.fromkeys(ENDPOINTS, 0.0), name
        counts = {labels["endpoint"]: v for n, labels, v in after if n == name + "_count"}
        assert {path for path, count in counts.items() if count} == set(requests), name
        assert counts["/v1/completions"] == 0.0
    gaps = {labels["endpoint"]: v for n, labels, v in after if n == "tokenrelay_inter_token_seconds_count"}
    assert gaps["/v1/chat/completions"] == gaps["/v1/responses"] == gaps["/v1/messages"] >= 2


def test_docs_and_redoc_render_without_the_network() -> None:
    app, _ = replay_app("m")
    with serve(app) as url:
        pages = [httpx.get(url + path) for path in ("/docs", "/redoc")]
        spec = httpx.get(url + "/openapi.json").json()
    assert spec["info"]["version"] == __version__
    for page in pages:
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "script-src" not in page.headers["content-security-policy"]  # default-src 'none': no script
        html = page.text
        assert "<script" not in html and not re.search(r"(src|href)=\"(https?:)?//", html)  # nothing fetched
        for path in ("/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics"):
            assert f"<code>{path}</code>" in html
        assert "<code>messages</code>*" in html  # the request body's fields, required ones starred


def test_docs_page_is_not_blank_in_chromium() -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("Chromium is not installed (make test installs it)")
    app, _ = replay_app("m")
    with serve(app) as url, tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
             "--virtual-time-budget=3000", "--dump-dom", url + "/docs"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
    body = re.sub(r"<script.*?</script>|<[^>]+>", " ", dom.partition("<body>")[2], flags=re.S)  # shown text
    assert "/v1/chat/completions" in body and "OpenAI-compatible endpoints" in body


def test_gaps_counted_at_once_expose_as_prometheus_client_would() -> None:
    """The inter-token histogram takes a reply's gaps in one call; its series equal a Histogram's, bucket
    edges included (a gap equal to a bound counts in that bound's bucket)."""
    from random import Random

    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    from tokenrelay.server.metrics import _GAPS, _ManyAtOnce, _WithoutCreated

    rng = Random(7)
    values = [*_GAPS, 0.0, 99.0, *(rng.expovariate(20) for _ in range(300))]
    reference = CollectorRegistry()
    labels = ["model", "endpoint"]
    histogram = Histogram("t_seconds", "gaps", labels, buckets=_GAPS, registry=reference).labels("m", "/e")
    for value in values:
        histogram.observe(value)
    ours = CollectorRegistry()
    many = _ManyAtOnce("t_seconds", "gaps", "m", _GAPS, ours, ["/e"]).labels("/e")
    many.observe_many(values[:100])
    many.observe_many(values[100:])
    assert generate_latest(_WithoutCreated(ours)) == generate_latest(_WithoutCreated(reference))

"""The diagnostic stream and status endpoints on real uvicorn: one HTTP chunk per planned write, on schedule,
the schedule at the end, a client's close seen at once, OpenAI-shaped errors for bad parameters; offered as a
POST with a chat stream's exact headers and opening; memory bounded whatever the parameters."""

from __future__ import annotations

import asyncio
import base64
import gc
import importlib.util
import json
import socket
import sys
import time
import types
from collections.abc import Iterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount, Router

from _uvicorn import serve
from tokenrelay.doctor._payload import DiagnosticPlan, parse_schedule
from tokenrelay.server.diagnostics import DiagnosticsRegistry, add_diagnostics_routes, diagnostics_routes
from tokenrelay.server.responses import OPENING, STREAM_HEADERS
from tokenrelay.wire._sse import SSEParser

PROTOCOLS = ["h11"] + (["httptools"] if importlib.util.find_spec("httptools") else [])


@pytest.fixture(scope="module", params=PROTOCOLS)
def base(request: pytest.FixtureRequest) -> Iterator[str]:
    app = Starlette()
    add_diagnostics_routes(app)
    with serve(app, http=request.param) as url:
        yield url


def raw_chunks(base: str, target: str, body: bytes | None = None) -> tuple[bytes, list[bytes]]:
    """GET (or POST ``body``) over a bare socket; the response head and every HTTP/1.1 chunk, in order."""
    host, port = base.removeprefix("http://").split(":")
    method = "GET" if body is None else "POST"
    extra = "" if body is None else f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            f"{method} {target} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n".encode()
            + (body or b"")
        )
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    chunks: list[bytes] = []
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return head, chunks
        chunks.append(rest[:size])
        assert rest[size : size + 2] == b"\r\n"
        rest = rest[size + 2 :]


def test_every_planned_write_is_one_chunk_on_the_wire(base: str) -> None:
    plan = DiagnosticPlan("wire-1", seed=5, events=25, cadence_ms=2.0)
    query = "&".join(f"{k}={v}" for k, v in plan.query().items())
    head, chunks = raw_chunks(base, f"/v1/diagnostics/stream?{query}")
    assert head.startswith(b"HTTP/1.1 200")
    for header in (b"content-type: text/event-stream", b"cache-control: no-cache", b"x-accel-buffering: no"):
        assert header in head.lower()
    assert [len(c) for c in chunks[:-1]] == [size for _, size in plan.cuts]
    assert b"".join(chunks[:-1]) == plan.body
    events = SSEParser().feed(chunks[-1])
    assert [e.event for e in events] == ["schedule", "message"] and events[1].data == "[DONE]"
    schedule = parse_schedule(events[0].data)
    assert schedule.plan == plan and [(o, s) for _, o, s in schedule.writes] == list(plan.cuts)


def test_a_post_gets_a_chat_streams_exact_headers_and_small_opening(base: str) -> None:
    plan = DiagnosticPlan("post-1", seed=9, events=8, cadence_ms=1.0, eol="lf")
    head, chunks = raw_chunks(base, "/v1/diagnostics/stream", json.dumps(plan.request_json()).encode())
    assert head.startswith(b"HTTP/1.1 200")
    lines = [line.split(b":", 1) for line in head.split(b"\r\n")[1:]]
    sent = [(k.strip().lower(), v.strip()) for k, v in lines]
    ours = [h for h in sent if h[0] in {k for k, _ in STREAM_HEADERS} | {b"x-tokenrelay-stream"}]
    assert ours == [*STREAM_HEADERS, (b"x-tokenrelay-stream", b"post-1")]  # the same list, in the same order
    assert chunks[0] == OPENING  # the first write is a chat stream's opening comment, byte for byte
    assert b"".join(chunks[:-1]) == plan.body and len(chunks) - 1 == len(plan.cuts) == plan.events + 1


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"[1, 2]", 400),
        (b"{not json", 400),
        (b'{"events": 2.5}', 400),
        (b'{"events": true}', 400),
        (b'{"colour": "blue"}', 400),
        (b'{"stream": "' + b"x" * 5000 + b'"}', 413),
    ],
)
def test_bad_post_bodies_are_openai_shaped_errors(base: str, body: bytes, status: int) -> None:
    response = httpx.post(f"{base}/v1/diagnostics/stream", content=body, timeout=10)
    assert response.status_code == status and response.json()["error"]["message"]


def test_an_empty_post_gets_the_defaults(base: str) -> None:
    with httpx.stream("POST", f"{base}/v1/diagnostics/stream", timeout=10) as response:
        assert response.status_code == 200
        stream = response.headers["x-tokenrelay-stream"]
        status = httpx.get(f"{base}/v1/diagnostics/streams/{stream}", timeout=10).json()
    assert status["events"] == 60 and status["cadence_ms"] == 50.0 and status["eol"] == "crlf"


def test_writes_keep_their_cadence(base: str) -> None:
    plan = DiagnosticPlan("cadence-1", seed=1, events=12, cadence_ms=40.0, eol="lf")
    response = httpx.get(f"{base}/v1/diagnostics/stream", params=plan.query(), timeout=10)
    events = SSEParser().feed(response.content)
    schedule = parse_schedule(next(e.data for e in events if e.event == "schedule"))
    sent = [t for t, _, _ in schedule.writes]
    for i, t in enumerate(sent):
        assert t >= i * 40.0 - 1.0  # never early; sleeping to absolute targets keeps a late one from drifting
    assert sent[-1] < 11 * 40.0 + 250.0


def test_status_reports_the_finished_stream(base: str) -> None:
    plan = DiagnosticPlan("status-1", seed=3, events=5, cadence_ms=1.0)
    httpx.get(f"{base}/v1/diagnostics/stream", params=plan.query(), timeout=10).raise_for_status()
    status = httpx.get(f"{base}/v1/diagnostics/streams/status-1", timeout=10).json()
    assert status["state"] == "finished" and status["cancelled_after_ms"] is None
    assert status["writes_sent"] == 6 and status["bytes_sent"] == len(plan.body)  # the opening and 5
    assert parse_schedule(status).plan == plan


def test_a_client_that_leaves_stops_the_stream(base: str) -> None:
    plan = DiagnosticPlan("leave-1", seed=4, events=500, cadence_ms=20.0)
    with httpx.stream("GET", f"{base}/v1/diagnostics/stream", params=plan.query(), timeout=10) as response:
        received = 0
        for chunk in response.iter_raw():
            received += len(chunk)
            if received > len(plan.body) // 100:
                break
    left = time.monotonic()
    while True:
        status = httpx.get(f"{base}/v1/diagnostics/streams/leave-1", timeout=10).json()
        if status["state"] != "running" or time.monotonic() - left > 5:
            break
        time.sleep(0.02)
    assert status["state"] == "cancelled"
    assert status["cancelled_after_ms"] < 2000 and status["writes_sent"] < 100
    time.sleep(0.1)
    again = httpx.get(f"{base}/v1/diagnostics/streams/leave-1", timeout=10).json()
    assert again["writes_sent"] == status["writes_sent"]


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ("events=0", None),
        ("events=10001", None),
        ("events=x", None),
        ("cadence_ms=-5", None),
        ("eol=crcr", None),
        ("stream=a%20b", None),
        ("seed=1.5", None),
        ("colour=blue", "colour"),
    ],
)
def test_bad_parameters_are_openai_shaped_400s(base: str, query: str, param: str | None) -> None:
    response = httpx.get(f"{base}/v1/diagnostics/stream?{query}", timeout=10)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"] and error["param"] == param


def test_unknown_stream_is_404_and_defaults_are_reported(base: str) -> None:
    missing = httpx.get(f"{base}/v1/diagnostics/streams/nope", timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"
    response = httpx.get(f"{base}/v1/diagnostics/stream?events=2&cadence_ms=0", timeout=10)
    stream = response.headers["x-tokenrelay-stream"]
    schedule = parse_schedule(
        next(e.data for e in SSEParser().feed(response.content) if e.event == "schedule")
    )
    assert schedule.plan.stream == stream and schedule.plan.eol == "crlf" and schedule.plan.events == 2
    assert (
        httpx.get(f"{base}/v1/diagnostics/streams/{stream}", timeout=10).json()["seed"] == schedule.plan.seed
    )


def test_head_sends_headers_only(base: str) -> None:
    response = httpx.head(f"{base}/v1/diagnostics/stream?events=50&cadence_ms=1000", timeout=5)
    assert response.status_code == 200 and response.content == b""
    assert response.headers["content-type"].startswith("text/event-stream")


def test_routes_mount_under_any_prefix() -> None:
    app = Starlette(routes=[Mount("/api", app=Router(diagnostics_routes(prefix="/diag")))])
    with serve(app, http="h11") as url:
        response = httpx.get(f"{url}/api/diag/stream?stream=m1&events=3&cadence_ms=0", timeout=10)
        assert response.status_code == 200 and response.content.endswith(b"data: [DONE]\r\n\r\n")
        assert json.loads(httpx.get(f"{url}/api/diag/streams/m1", timeout=10).text)["state"] == "finished"


def deep_size(root: object) -> int:
    """Bytes held by ``root`` and everything it reaches (classes and modules aside)."""
    seen: set[int] = set()
    todo, total = [root], 0
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, (type, types.ModuleType, types.FunctionType)):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        todo.extend(gc.get_referents(obj))
    return total


def test_the_registry_keeps_no_body_and_is_bounded_in_writes() -> None:
    """Issue 12: 300 requests kept 256 plans of ~4.4 MB each (1.26 GB). Finished records now hold three
    flat arrays and no body, and the oldest go once the writes kept pass ``keep_writes``."""
    registry = DiagnosticsRegistry(keep=256, keep_writes=20_000)
    body_bytes = 0
    for i in range(300):
        plan = DiagnosticPlan(f"m{i}", seed=i, events=300, cadence_ms=0.0)
        record = registry.start(plan)
        body_bytes += len(plan.body)
        for offset, size in plan.cuts:
            record.add_write(1.0, offset, size)
        record.state = "finished"
        registry.finish(record)
    kept = [r for r in (registry.get(f"m{i}") for i in range(300)) if r is not None]
    assert sum(len(r.sent_ms) for r in kept) <= 20_000 and 40 <= len(kept) < 80
    assert registry.get("m299") is kept[-1] and registry.get("m0") is None
    assert all("body" not in vars(r.plan) for r in kept)
    # ~30 MB of bodies went through; what is kept is the arrays (16 bytes a write) and small objects.
    size = deep_size(registry)
    assert body_bytes > 25_000_000 and size < 1_000_000, size


def test_streams_beyond_max_running_get_429_with_retry_after() -> None:
    app = Starlette()
    registry = DiagnosticsRegistry(max_running=2)
    app.router.routes.extend(diagnostics_routes(registry))

    async def scenario(url: str) -> tuple[list[int], int, int]:
        slow = {"events": 50, "cadence_ms": 100}
        stream = f"{url}/v1/diagnostics/stream"
        async with (
            httpx.AsyncClient(timeout=10) as client,
            client.stream("POST", stream, json=slow) as first,
            client.stream("POST", stream, json=slow) as second,
        ):
            third = await client.post(stream, json=slow)
            statuses = [first.status_code, second.status_code, third.status_code]
            retry = int(third.headers.get("retry-after", "0"))
        for _ in range(100):  # both closed: the slots come back
            if registry.running == 0:
                break
            await asyncio.sleep(0.02)
        return statuses, retry, registry.running

    with serve(app, http="h11") as url:
        statuses, retry, running = asyncio.run(scenario(url))
        after = httpx.post(f"{url}/v1/diagnostics/stream", json={"events": 2, "cadence_ms": 0}, timeout=10)
    assert statuses == [200, 200, 429] and retry >= 1 and running == 0
    assert after.status_code == 200


def test_the_report_endpoint_judges_a_recording_like_the_cli() -> None:
    """What the doctor page posts: the chunks it read (base64) with their times, the headers, the plan."""
    app = Starlette()
    add_diagnostics_routes(app)
    plan = DiagnosticPlan("rep-1", seed=2, events=6, cadence_ms=20.0)
    with serve(app, http="h11") as url:
        chunks: list[list[object]] = []
        start = time.perf_counter()
        with httpx.stream("POST", f"{url}/v1/diagnostics/stream", json=plan.request_json(), timeout=10) as r:
            headers = dict(r.headers)
            headers_ms = (time.perf_counter() - start) * 1000
            for raw in r.iter_raw():
                chunks.append([(time.perf_counter() - start) * 1000, base64.b64encode(raw).decode()])
        recording = {
            "plan": plan.request_json(),
            "url": url,
            "status": 200,
            "headers": headers,
            "headers_ms": headers_ms,
            "chunks": chunks,
            "lanes": {"network": {"max_ms": 3.0, "p90_ms": 2.0}, "paint": {"max_ms": 16.0, "p90_ms": 9.0}},
        }
        report = httpx.post(f"{url}/v1/diagnostics/report", json=recording, timeout=10).json()
        bad = httpx.post(f"{url}/v1/diagnostics/report", content=b'{"plan": 1}', timeout=10)
        page = httpx.get(f"{url}/doctor", timeout=10)
    checks = {c["check"]: c for c in report["checks"]}
    assert report["mode"] == "browser" and report["ok"] is True, report["text"]
    for name in ("timing", "bytes", "text", "end"):
        assert checks[name]["status"] == "PASS", report["text"]
    assert checks["browser"]["message"] == "held per hop: network max 3 ms p90 2 ms; paint max 16 ms p90 9 ms"
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")

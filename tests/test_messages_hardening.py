"""Hostile input on the Messages API (issue 30 §3): always Anthropic's error shape with a 4xx naming what is
wrong, never a 5xx, never a hang; a client that leaves mid-stream stops its generation; a full queue is a
429 ``rate_limit_error``, a server shutting down a 529 ``overloaded_error``.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from _uvicorn import serve
from server_helpers import asgi_client, raw_post, read_timed, replay_app, serve_process, split_response
from tokenrelay.wire._sse import SSEParser

OK: dict[str, Any] = {"model": "replay", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
CALL = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}
TOOL = {"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}


def body(**fields: Any) -> bytes:
    out = {**OK, **fields}
    for name, value in fields.items():
        if value is ...:  # leave the field out
            del out[name]
    return json.dumps(out).encode()


def user(*blocks: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


# (what, body, status, param or None, a word the message must hold or None)
CASES: list[tuple[str, bytes, int, str | None, str | None]] = [
    ("missing max_tokens", body(max_tokens=...), 400, "max_tokens", None),
    ("missing messages", body(messages=...), 400, "messages", None),
    ("empty messages", body(messages=[]), 400, "messages", None),
    ("max_tokens 0", body(max_tokens=0), 400, "max_tokens", None),
    ("max_tokens too large", body(max_tokens=10**6), 400, "max_tokens", None),
    ("max_tokens as a string", body(max_tokens="16"), 400, "max_tokens", None),
    ("stream as a string", body(stream="yes"), 400, "stream", None),
    ("unknown model", body(model="claude-9"), 404, "model", "claude-9"),
    (
        "a role that is not one",
        body(messages=[{"role": "wizard", "content": "hi"}]),
        400,
        "messages.0.role",
        None,
    ),
    (
        "a tool_result for no tool_use",
        body(messages=[user(RESULT)]),
        400,
        "messages.0.content.0.tool_use_id",
        None,
    ),
    (
        "a tool_use id given twice",
        body(
            messages=[
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": [CALL, CALL]},
                user(RESULT),
            ]
        ),
        400,
        "messages.1.content.1.id",
        "twice",
    ),
    (
        "an unknown block type",
        body(messages=[user({"type": "hologram"})]),
        400,
        "messages.0.content.0.type",
        None,
    ),
    (
        "an image",
        body(messages=[user({"type": "image", "source": {"type": "url", "url": "http://x/y.png"}})]),
        400,
        "messages.0.content.0.type",
        "image",
    ),
    (
        "a document",
        body(messages=[user({"type": "document", "source": {"type": "text", "data": "x"}})]),
        400,
        "messages.0.content.0.type",
        "document",
    ),
    (
        "a server tool",
        body(tools=[{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}]),
        400,
        "tools.0.type",
        "web_search_20250305",
    ),
    ("a tool without input_schema", body(tools=[{"name": "f"}]), 400, "tools.0.input_schema", None),
    (
        "a tool schema that is not an object's",
        body(tools=[{"name": "f", "input_schema": {"type": "string"}}]),
        400,
        "tools.0.input_schema",
        None,
    ),
    ("tool_choice any without tools", body(tool_choice={"type": "any"}), 400, "tool_choice", None),
    (
        "tool_choice naming an unknown tool",
        body(tools=[TOOL], tool_choice={"type": "tool", "name": "nope"}),
        400,
        "tool_choice.name",
        None,
    ),
    (
        "a bad tool_choice type",
        body(tools=[TOOL], tool_choice={"type": "maybe"}),
        400,
        "tool_choice.type",
        None,
    ),
    (
        "a thinking budget under 1024",
        body(thinking={"type": "enabled", "budget_tokens": 100}),
        400,
        None,
        None,
    ),
    (
        "a thinking budget over max_tokens",
        body(max_tokens=2000, thinking={"type": "enabled", "budget_tokens": 4000}),
        400,
        "thinking.budget_tokens",
        None,
    ),
    ("temperature over 1", body(temperature=1.5), 400, "temperature", None),
    ("top_k", body(top_k=40), 400, "top_k", None),
    ("output_config.format", body(output_config={"format": {"type": "json_schema"}}), 400, None, None),
    ("a 600 KB system prompt", body(system="s" * 600_000), 400, "messages", "max_prompt_chars"),
    (
        "a lone surrogate in system",
        b'{"model":"replay","max_tokens":4,"system":"\\ud800","messages":[{"role":"user","content":"hi"}]}',
        400,
        "system",
        None,
    ),
    ("stop_sequences with an empty one", body(stop_sequences=[""]), 400, None, None),
    ("not JSON", b"{this is not json", 400, None, None),
    ("empty", b"", 400, None, None),
    ("null", b"null", 400, None, None),
    ("an array", b"[]", 400, None, None),
    ("deep nesting", b'{"metadata":' + b"[" * 5000 + b"]" * 5000 + b"}", 400, None, None),
    ("invalid UTF-8", b"\xff\xfe\x00", 400, None, None),
    ("a 3 MB body", b'{"system":"' + b"q" * (3 << 20) + b'"}', 413, None, None),
]


def assert_anthropic_error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, (r.status_code, r.text[:300])
    assert r.headers["content-type"].startswith("application/json")
    data = r.json()
    assert set(data) == {"type", "error"} and data["type"] == "error", data
    error = data["error"]
    assert set(error) >= {"type", "message"} and isinstance(error["message"], str) and error["message"]
    kinds = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error"}
    assert error["type"] == kinds.get(status, "invalid_request_error")
    return error  # type: ignore[no-any-return]


@pytest.mark.parametrize("stream", [False, True])
async def test_hostile_messages_get_anthropic_shaped_4xx(stream: bool) -> None:
    app, _ = replay_app("All is well 🦙.", rate=None)
    async with asgi_client(app) as client:
        for what, raw, status, param, word in CASES:
            if stream and raw.startswith(b'{"'):
                raw = b'{"stream":true,' + raw[1:]
            r = await asyncio.wait_for(client.post("/v1/messages", content=raw), 30)
            error = assert_anthropic_error(r, status)
            if param is not None:
                assert param in error["message"], (what, error)
            if word is not None:
                assert word in error["message"], (what, error)
        r = await client.post("/v1/messages", content=body(stream=stream))  # the server keeps serving
        assert r.status_code == 200 and "🦙" in r.text


async def test_count_tokens_refuses_as_messages_does() -> None:
    app, _ = replay_app("ok", rate=None)
    async with asgi_client(app) as client:
        assert_anthropic_error(await client.post("/v1/messages/count_tokens", content=b"{nope"), 400)
        missing = {"model": "gpt-9", "messages": [{"role": "user", "content": "hi"}]}
        assert_anthropic_error(await client.post("/v1/messages/count_tokens", json=missing), 404)
        assert_anthropic_error(await client.post("/v1/messages/count_tokens", json={"model": "replay"}), 400)
        image = {"model": "replay", "messages": [user({"type": "image", "source": {}})]}
        error = assert_anthropic_error(await client.post("/v1/messages/count_tokens", json=image), 400)
        assert "image" in error["message"]


async def test_a_missing_key_is_an_anthropic_401_on_both_paths_and_either_header_passes() -> None:
    app, _ = replay_app("ok", rate=None, api_key="sk-k")
    async with asgi_client(app) as client:
        for path in ("/v1/messages", "/v1/messages/count_tokens"):
            assert_anthropic_error(await client.post(path, content=body()), 401)
            assert_anthropic_error(
                await client.post(path, content=body(), headers={"x-api-key": "nope"}), 401
            )
        for headers in ({"x-api-key": "sk-k"}, {"authorization": "Bearer sk-k"}):
            r = await client.post("/v1/messages", content=body(), headers=headers)
            assert r.status_code == 200, r.text
        chat = {"messages": [{"role": "user", "content": "hi"}]}  # the OpenAI paths keep OpenAI's shape
        r = await client.post("/v1/chat/completions", json=chat)
        assert r.status_code == 401 and set(r.json()["error"]) == {"message", "type", "param", "code"}
        r = await client.post("/v1/chat/completions", json=chat, headers={"x-api-key": "sk-k"})
        assert r.status_code == 200


async def test_shutting_down_is_a_529_overloaded_error() -> None:
    app, _ = replay_app("ok", rate=None)
    app.state.tokenrelay.draining = True
    async with asgi_client(app) as client:
        r = await client.post("/v1/messages", content=body())
        assert r.status_code == 529
        assert r.json()["error"]["type"] == "overloaded_error"
        r = await client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 503  # the OpenAI endpoints keep theirs


# In the whole suite (never alone) a client socket left by an earlier module's SDK client is finalized by the
# collector during this test's many allocations, and pytest charges its ResourceWarning here; the assertions
# below are what this test checks.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_full_queue_is_a_429_rate_limit_error_and_a_client_leaving_stops_its_generation() -> None:
    app, engine = replay_app("word " * 2000, rate=200.0, counting=True, max_active=1, max_queued=0)
    with serve(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        long = body(stream=True, max_tokens=2000)
        with client.stream("POST", "/v1/messages", content=long) as stream:
            lines = stream.iter_lines()
            events = [next(lines) for _ in range(12)]  # the stream runs: its slot is taken
            assert "event: message_start" in events
            busy = client.post("/v1/messages", content=body())
            assert busy.status_code == 429 and busy.headers["retry-after"]
            assert busy.json()["error"]["type"] == "rate_limit_error"
        # The client left mid-stream: its generation ends, and the server takes the next request.
        deadline = time.monotonic() + 10
        while client.get("/health").json()["active"]:
            assert time.monotonic() < deadline, "the generation outlived its client"
            time.sleep(0.05)
        r = client.post("/v1/messages", content=body())
        assert r.status_code == 200
        metrics = client.get("/metrics").text
    gen = next(iter(engine.generations.values()))
    assert gen.closed_at is not None and len(gen.steps) < 2000
    assert 'tokenrelay_cancellations_total{model="replay"} 1.0' in metrics
    # metrics labelled by endpoint: one streamed request, two whole ones (the 429 is counted too)
    assert 'tokenrelay_requests_total{endpoint="/v1/messages",model="replay",stream="true"} 1.0' in metrics
    assert 'tokenrelay_requests_total{endpoint="/v1/messages",model="replay",stream="false"} 2.0' in metrics


def test_shutdown_ends_a_messages_stream_with_an_overloaded_error_event(tmp_path: Path) -> None:
    text = tmp_path / "reply.txt"
    text.write_text("word " * 400)
    args = ("--engine", "replay", "--text-file", str(text), "--rate", "20", "--graceful-timeout", "0.5")
    with serve_process(*args) as server:
        sock = raw_post(server.url, "/v1/messages", body(stream=True, max_tokens=400))
        sock.settimeout(10)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        time.sleep(0.3)
        server.proc.send_signal(signal.SIGTERM)
        raw = b"".join(c for _, c in read_timed(sock))
        sock.close()
        assert raw.endswith(b"0\r\n\r\n")  # a clean end of the chunked body
        events = SSEParser().feed(b"".join(split_response(b"HTTP/1.1 200 OK\r\n\r\n" + raw)[1]))
        assert server.proc.wait(timeout=15) == 0
    last = events[-1]
    assert last.event == "error" and "[DONE]" not in raw.decode()
    assert json.loads(last.data)["error"]["type"] == "overloaded_error"
    assert any(e.event == "content_block_delta" for e in events)


def test_a_waiting_stream_gets_ping_events_that_the_sdk_skips() -> None:
    """While a request waits (its queue place, the prompt's prefill) the keep-alive is Anthropic's ``ping``."""
    anthropic = pytest.importorskip("anthropic")
    app, _ = replay_app(
        "late but whole", rate=None, keepalive_interval=0.1, engine_options={"first_token_delay": 0.6}
    )
    with serve(app) as url:
        with httpx.stream("POST", url + "/v1/messages", content=body(stream=True), timeout=10) as r:
            raw = b"".join(r.iter_bytes())
        events = SSEParser().feed(raw)
        names = [e.event for e in events]
        assert names.count("ping") >= 2 and names.index("ping") < names.index("content_block_start")
        assert all(json.loads(e.data) == {"type": "ping"} for e in events if e.event == "ping")
        with anthropic.Anthropic(
            base_url=url, api_key="x", max_retries=0, _strict_response_validation=True
        ) as c:
            message = c.messages.create(model="replay", max_tokens=16, messages=OK["messages"], stream=True)
            kinds = [event.type for event in message]
        assert "ping" not in kinds and kinds[0] == "message_start" and kinds[-1] == "message_stop"

"""``server.run``'s ``tokenrelay.body`` extension (issue 22): a stream's frames written straight to uvicorn's
transport as HTTP/1.1 chunks, on real uvicorn sockets, under both of uvicorn's HTTP/1.1 protocols.

The same bytes as through the ASGI ``send``, the connection kept for the next request, flow control (a client
that reads slowly gets every frame), a client that leaves mid-stream, keep-alives on the direct path, and the
fallback to ``send`` wherever the extension cannot be sure of uvicorn's internals or a middleware wraps
``send``.
"""

from __future__ import annotations

import json
import logging
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from starlette.types import ASGIApp, Receive, Scope, Send

from _uvicorn import _running, serve, serve_relay
from server_helpers import replay_app, split_response
from tiny_tokenizers import corpus_text
from tokenrelay.server import run
from tokenrelay.server.run import ChunkedBody, body_extension, uvicorn_server

PROTOCOLS = ["httptools", "h11"]


def chat(**overrides: object) -> bytes:
    body = {"model": "replay", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    return json.dumps({**body, **overrides}).encode()


def post(path: str, body: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def read_response(sock: socket.socket, timeout: float = 20.0) -> bytes:
    """One chunked response off ``sock`` (up to its last chunk), leaving the connection open."""
    sock.settimeout(timeout)
    data = bytearray()
    while not data.endswith(b"0\r\n\r\n"):
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection"
        data += chunk
    return bytes(data)


@contextmanager
def serve_small_buffers(app: ASGIApp, http: str) -> Iterator[str]:
    """``serve_relay``, its connections' kernel send buffers a few KB: a client that does not read fills
    them (and then uvicorn's 64 KB write buffer, its flow control's high-water mark) within a few hundred
    frames."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # inherited by each accepted socket
    sock.bind(("127.0.0.1", 0))
    server = uvicorn_server(app, port=sock.getsockname()[1], log_level="warning", http=http)
    with _running(server, sock, 10.0, join_timeout=20) as url:
        yield url


def events(chunks: list[bytes]) -> list[Any]:
    """The data events of a stream, with what differs between two requests (id, created) dropped."""
    out: list[Any] = []
    for chunk in chunks:
        if not chunk.startswith(b"data: "):
            continue
        payload = chunk.removeprefix(b"data: ").strip()
        if payload == b"[DONE]":
            out.append("[DONE]")
            continue
        fields = json.loads(payload)
        fields.pop("id"), fields.pop("created")
        out.append(fields)
    return out


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """Counts of ``ChunkedBody.write`` and ``ChunkedBody.drained`` calls (the real methods still run)."""
    counts = {"write": 0, "drained": 0}
    write, drained = ChunkedBody.write, ChunkedBody.drained

    def counting_write(self: ChunkedBody, data: bytes) -> bool:
        counts["write"] += 1
        return write(self, data)

    async def counting_drained(self: ChunkedBody) -> None:
        counts["drained"] += 1
        await drained(self)

    monkeypatch.setattr(ChunkedBody, "write", counting_write)
    monkeypatch.setattr(ChunkedBody, "drained", counting_drained)
    yield counts


@pytest.mark.parametrize("http", PROTOCOLS)
def test_direct_frames_equal_the_asgi_sends_and_the_connection_serves_the_next_request(
    http: str, counted: dict[str, int]
) -> None:
    text = corpus_text()
    request = post("/v1/chat/completions", chat(max_tokens=120, stream_options={"include_usage": True}))
    app, _ = replay_app(text, rate=None)
    with serve(app, http=http) as url:  # plain uvicorn: no extension, every frame through send
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(request)
            _, through_send = split_response(read_response(sock))
    assert counted["write"] == 0
    with serve_relay(app, http=http) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            replies = []
            for _ in range(2):  # the second request on the same connection: the first body ended cleanly
                sock.sendall(request)
                head, chunks = split_response(read_response(sock))
                assert head.startswith("HTTP/1.1 200") and "transfer-encoding: chunked" in head.lower()
                replies.append(chunks)
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
    for chunks in replies:
        assert chunks[0] == b": stream open\n\n" and chunks[-1] == b"data: [DONE]\n\n"
        assert events(chunks) == events(through_send)
        assert len(chunks) == len(through_send)  # one chunk per frame, as send writes them
    # Every frame after the opening one went straight to the transport (the empty end went through send).
    assert counted["write"] == sum(len(chunks) - 1 for chunks in replies)


@pytest.mark.parametrize("http", PROTOCOLS)
def test_a_client_that_reads_slowly_gets_every_frame(http: str, counted: dict[str, int]) -> None:
    text = corpus_text() * 6  # ~7,500 tokens, ~1 MB of frames
    app, _ = replay_app(text, rate=None, max_tokens_limit=100_000)
    request = post("/v1/chat/completions", chat(max_tokens=20_000))
    with serve(app, http=http) as url:
        expected = httpx.post(url + "/v1/chat/completions", content=chat(max_tokens=20_000), timeout=60)
    with serve_small_buffers(app, http) as url:
        host, port = url.removeprefix("http://").split(":")
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        with sock:
            sock.connect((host, int(port)))
            sock.sendall(request)
            time.sleep(0.5)  # not reading: the server's buffer fills and it waits for the client
            _, chunks = split_response(read_response(sock))
    assert counted["drained"] > 0  # flow control paused the direct writes
    assert events(chunks) == events([frame + b"\n\n" for frame in expected.content.split(b"\n\n")])
    content = "".join(e["choices"][0]["delta"].get("content", "") for e in events(chunks)[:-1])
    assert len(content) == len(text)


@pytest.mark.parametrize("http", PROTOCOLS)
def test_a_client_that_leaves_mid_stream_stops_its_generation(
    http: str, counted: dict[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    app, engine = replay_app(corpus_text() * 6, rate=200.0, counting=True, max_tokens_limit=100_000)
    with caplog.at_level(logging.INFO), serve_relay(app, http=http) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(post("/v1/chat/completions", chat(max_tokens=20_000)))
            sock.settimeout(10)
            seen = b""
            while seen.count(b"data: ") < 10:
                seen += sock.recv(65536)
        left = time.monotonic()
        deadline = left + 5
        while httpx.get(url + "/health").json()["active"]:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    (generation,) = engine.generations.values()
    assert generation.closed_at is not None and generation.closed_at - left < 2
    assert len([t for t in generation.steps if t > left + 0.1]) <= 1  # at 200 steps/s: stopped at once
    assert counted["write"] >= 10
    records = [r for r in caplog.records if r.name.startswith(("tokenrelay", "uvicorn"))]
    assert not [r for r in records if r.levelno >= logging.WARNING], [r.getMessage() for r in records]
    assert any("finish=cancelled" in r.getMessage() for r in records)


@pytest.mark.parametrize("http", PROTOCOLS)
def test_keepalives_go_straight_to_the_connection_too(http: str, counted: dict[str, int]) -> None:
    app, _ = replay_app("y", keepalive_interval=0.1, engine_options={"first_token_delay": 0.6})
    with serve_relay(app, http=http) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(post("/v1/chat/completions", chat()))
            _, chunks = split_response(read_response(sock))
    keepalives = chunks.count(b": keep-alive\n\n")
    assert keepalives >= 3
    assert events(chunks)[-1] == "[DONE]"
    assert counted["write"] == len(chunks) - 1  # keep-alives included: all but the opening frame


def test_a_middleware_that_wraps_send_sees_every_byte(counted: dict[str, int]) -> None:
    app, _ = replay_app(corpus_text(), rate=None)
    seen: list[bytes] = []

    def counting(inner: ASGIApp) -> ASGIApp:
        async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
            async def spy(message: Any) -> None:
                if message["type"] == "http.response.body":
                    seen.append(message.get("body", b""))
                await send(message)

            await inner(scope, receive, spy)

        return wrapped

    with serve_relay(counting(app)) as url:
        r = httpx.post(url + "/v1/chat/completions", content=chat(max_tokens=60), timeout=30)
    assert r.status_code == 200 and r.content.endswith(b"data: [DONE]\n\n")
    assert counted["write"] == 0  # the extension declined: this send is not uvicorn's own
    assert b"".join(seen) == r.content


class _Cycle:
    """A request cycle with what the extension reads, or without some of it (another uvicorn)."""

    transport: Any = object()

    def __init__(self, **fields: object) -> None:
        self.__dict__.update(fields)

    async def send(self, message: Any) -> None:
        raise AssertionError("not called")


def test_the_extension_declines_where_uvicorns_internals_differ() -> None:
    body_of = body_extension(_Cycle)
    ready: dict[str, object] = {
        "response_started": True,
        "response_complete": False,
        "disconnected": False,
        "scope": {"method": "POST"},
        "flow": object(),
        "chunked_encoding": True,
    }
    cycle = _Cycle(**ready)
    assert isinstance(body_of(cycle.send), ChunkedBody)

    async def wrapped(message: Any) -> None:
        await cycle.send(message)

    assert body_of(wrapped) is None  # a middleware's send
    assert body_extension(dict)(cycle.send) is None  # another protocol's cycle
    for missing in ready:
        partial = _Cycle(**{k: v for k, v in ready.items() if k != missing})
        assert body_of(partial.send) is None, missing
    for changed in (
        {"response_started": False},
        {"response_complete": True},
        {"disconnected": True},
        {"scope": {"method": "HEAD"}},
        {"chunked_encoding": False},  # a Content-Length body
        {"chunked_encoding": None, "conn": None},
    ):
        other = _Cycle(**{**ready, **changed})
        assert body_of(other.send) is None, changed


@pytest.mark.parametrize("http", PROTOCOLS)
def test_both_protocols_offer_the_extension(http: str) -> None:
    protocol: Any = run.guarded_protocol(http, 10.0)
    module = sys.modules[protocol.__mro__[1].__module__]
    seen: list[object] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope["extensions"]["tokenrelay.body"](send))  # before the headers: none yet
        await send({"type": "http.response.start", "status": 200, "headers": []})
        seen.append(scope["extensions"]["tokenrelay.body"](send))
        await send({"type": "http.response.body", "body": b"ok", "more_body": False})

    with serve_relay(app, http=http) as url:
        assert httpx.get(url + "/").text == "ok"
    assert seen[0] is None and isinstance(seen[1], ChunkedBody)
    assert isinstance(module.RequestResponseCycle, type)

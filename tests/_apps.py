"""Scripted endpoints for the client and SDK tests: an OpenAI-compatible chat API and plain SSE routes.

The frames come from tokenrelay's own builders, so the official SDK reading this app checks the shapes and the
client reading it checks the wire. ``model`` picks a scenario; see ``CHAT_SCENARIOS``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from tokenrelay._errors import EngineError, NotFoundError
from tokenrelay._stream import Usage
from tokenrelay.wire._chat import (
    DONE,
    ChatChunkWriter,
    TextChunkWriter,
    chat_completion,
    error_event,
    text_completion,
)
from tokenrelay.wire._sse import encode_event

REPLY = ["नम", "स्ते", " 👩‍💻", " 你好", "，", "世界", "!"]
USAGE = Usage(prompt_tokens=7, completion_tokens=len(REPLY))
CREATED = 1_700_000_000
CHAT_SCENARIOS = {
    "ok": "role, every delta, finish_reason, usage when asked, [DONE]",
    "no-done": "as ok, but the body ends without [DONE]",
    "cut": "role and three deltas, then the body ends",
    "cut-mid-frame": "role and the deltas, then half a frame, then the body ends",
    "broken": "role and two deltas, then the connection is dropped",
    "error": "role, one delta, then an in-stream error event",
    "slow": "as ok, with 30 ms before each delta",
    "junk-after-done": "as ok, then more deltas after [DONE]",
}


@dataclass
class Visits:
    """What the reconnecting route saw: the Last-Event-ID of each request, and when it came."""

    last_event_ids: list[str | None] = field(default_factory=list)
    times: list[float] = field(default_factory=list)


def _sse(frames: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(frames, media_type="text/event-stream")


async def _chat_frames(scenario: str, include_usage: bool, model: str) -> AsyncIterator[bytes]:
    writer = ChatChunkWriter(
        id="chatcmpl-test",
        model=model,
        created=CREATED,
        system_fingerprint="fp_test",
        include_usage=include_usage,
    )
    yield writer.role()
    pieces = {"cut": REPLY[:3], "broken": REPLY[:2], "error": REPLY[:1]}.get(scenario, REPLY)
    for piece in pieces:
        if scenario == "slow":
            await asyncio.sleep(0.03)
        yield writer.delta(piece)
    if scenario == "broken":
        raise RuntimeError("connection dropped on purpose")  # uvicorn aborts the chunked body
    if scenario == "error":
        yield error_event(EngineError("the engine crashed", code="engine_failed"))
        return
    if scenario == "cut-mid-frame":
        yield writer.finish("stop")[:20]
        return
    if scenario == "cut":
        return
    yield writer.finish("stop")
    if include_usage:
        yield writer.usage(USAGE)
    if scenario != "no-done":
        yield DONE
    if scenario == "junk-after-done":
        yield writer.delta("JUNK")


async def _chat(request: Request) -> Response:
    body = await request.json()
    model = str(body.get("model") or "ok")
    if model not in CHAT_SCENARIOS:
        return JSONResponse(NotFoundError(f"The model '{model}' does not exist").to_openai(), status_code=404)
    if not body.get("stream"):
        reply = chat_completion(
            id="chatcmpl-test",
            model=model,
            created=CREATED,
            content="".join(REPLY),
            finish_reason="stop",
            usage=USAGE,
        )
        return JSONResponse(reply)
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    return _sse(_chat_frames(model, include_usage, model))


async def _completions(request: Request) -> Response:
    body = await request.json()
    model = str(body.get("model") or "ok")
    if not body.get("stream"):
        reply = text_completion(
            id="cmpl-test",
            model=model,
            created=CREATED,
            text="".join(REPLY),
            finish_reason="length",
            usage=USAGE,
        )
        return JSONResponse(reply)

    async def frames() -> AsyncIterator[bytes]:
        writer = TextChunkWriter(id="cmpl-test", model=model, created=CREATED, include_usage=True)
        for piece in REPLY:
            yield writer.delta(piece)
        yield writer.finish("length")
        yield writer.usage(USAGE)
        yield DONE

    return _sse(frames())


def app(visits: Visits | None = None) -> Starlette:
    """The whole scripted server. ``visits`` records the reconnecting route's requests."""
    seen = visits if visits is not None else Visits()

    async def frames(*parts: bytes) -> AsyncIterator[bytes]:
        for part in parts:
            yield part
            await asyncio.sleep(0)

    async def events(request: Request) -> Response:
        return _sse(
            frames(
                encode_event(comment="ping"),
                encode_event("one", id="1", event="greeting"),
                encode_event("two\nlines", retry=2500),
                encode_event(comment="ping"),
            )
        )

    async def truncated(request: Request) -> Response:
        return _sse(frames(encode_event("a"), b"data: b"))

    async def reconnect(request: Request) -> Response:
        last = request.headers.get("last-event-id")
        seen.last_event_ids.append(last)
        seen.times.append(time.monotonic())
        if last is None:
            return _sse(frames(b"retry: 100\n", encode_event("one", id="1")))
        if last == "1":  # the second connection ends mid-event: the client drops it and comes back
            return _sse(frames(encode_event("two", id="2"), b"id: 3\ndata: lost"))
        return Response(status_code=204)

    async def json_error(request: Request) -> Response:
        error = {
            "message": "model 'nope' is not loaded",
            "type": "invalid_request_error",
            "param": "model",
            "code": None,
        }
        return JSONResponse({"error": error}, status_code=400)

    async def html(request: Request) -> Response:
        return Response("<html><body>Welcome to nginx!</body></html>", media_type="text/html")

    async def plain_500(request: Request) -> Response:
        return PlainTextResponse("upstream exploded", status_code=503)

    return Starlette(
        routes=[
            Route("/v1/chat/completions", _chat, methods=["POST"]),
            Route("/v1/completions", _completions, methods=["POST"]),
            Route("/events", events),
            Route("/truncated", truncated),
            Route("/reconnect", reconnect),
            Route("/json-error", json_error, methods=["GET", "POST"]),
            Route("/html", html, methods=["GET", "POST"]),
            Route("/plain-500", plain_500),
        ]
    )

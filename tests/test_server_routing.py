"""The generation endpoints go around the middleware stack; everything else goes through it (gzip included).

Through an ASGI transport: what is checked is which layers an ASGI message passes, not the socket.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from starlette.types import ASGIApp, Receive, Scope, Send

from server_helpers import replay_app
from tokenrelay.server.generation import ENDPOINTS

REPLY = "Hello, world! " * 60  # long enough (> 500 bytes) that gzip would compress it
CHAT = {"model": "replay", "messages": [{"role": "user", "content": "hi"}]}
TEXT = {"model": "replay", "prompt": "hi"}
RESPONSES = {"model": "replay", "input": "hi", "max_output_tokens": 1000}
#: Each endpoint kind's body, and how its stream ends.
BODIES: dict[str, tuple[dict[str, Any], str]] = {
    "chat": ({**CHAT, "max_tokens": 200}, "data: [DONE]\n\n"),
    "completion": ({**TEXT, "max_tokens": 200}, "data: [DONE]\n\n"),
    "responses": (RESPONSES, "event: response.completed\n"),
    "messages": ({**CHAT, "max_tokens": 200}, 'event: message_stop\ndata: {"type":"message_stop"}\n\n'),
}


class _Seen:
    """A middleware that notes the path of every request and every message it is handed to send."""

    def __init__(self, app: ASGIApp, seen: list[str]) -> None:
        self.app, self.seen = app, seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.seen.append(scope["path"])
        await self.app(scope, receive, send)


def _client(**config: Any) -> tuple[httpx.AsyncClient, list[str]]:
    app, _ = replay_app(REPLY, rate=None, **config)
    seen: list[str] = []
    app.add_middleware(_Seen, seen=seen)
    transport = httpx.ASGITransport(app=app)
    return httpx.AsyncClient(transport=transport, base_url="http://test"), seen


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("path", sorted(ENDPOINTS))
async def test_generations_skip_the_middleware_and_are_never_compressed(path: str, stream: bool) -> None:
    client, seen = _client()
    base, end = BODIES[ENDPOINTS[path].kind]
    body = {**base, "stream": stream}
    async with client:
        r = await client.post(path, json=body, headers={"Accept-Encoding": "gzip"})
    assert r.status_code == 200, r.text
    assert "content-encoding" not in r.headers
    assert len(r.content) > 500  # big enough that gzip would have taken it
    assert seen == []  # no middleware layer saw the request (or wrapped its sends)
    if stream:
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.text.endswith("\n\n") and end in r.text
    else:
        json.loads(r.content)


async def test_other_routes_go_through_the_middleware_and_are_compressed() -> None:
    client, seen = _client()
    async with client:
        r = await client.get("/openapi.json", headers={"Accept-Encoding": "gzip"})
        assert r.status_code == 200 and r.headers["content-encoding"] == "gzip"
        assert "/v1/chat/completions" in r.json()["paths"]  # the generation routes are still documented
        # A GET to a generation path is not a generation: FastAPI answers it (405), through the stack.
        wrong = await client.get("/v1/chat/completions")
        assert wrong.status_code == 405 and wrong.json()["error"]["type"] == "invalid_request_error"
    assert seen == ["/openapi.json", "/v1/chat/completions"]


async def test_gzip_off_compresses_nothing() -> None:
    client, _ = _client(gzip=False)
    async with client:
        r = await client.get("/openapi.json", headers={"Accept-Encoding": "gzip"})
    assert r.status_code == 200 and "content-encoding" not in r.headers

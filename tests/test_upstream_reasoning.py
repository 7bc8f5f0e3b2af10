"""Reasoning a text replica sends apart (llama-server's ``delta.reasoning_content``), relayed by the front
(issue 31 §2): ``LlamaCppTextReader`` writes it back as ``<think>`` markup (``RELAYED_REASONING``), which the
front's one reasoning splitter cuts again, so the client gets the replica's reasoning and answer field for
field, exactly (whitespace included), in whichever dialect it asked for.

The replica here streams llama-server's chunk shapes (``reasoning_content`` deltas, then ``content``); the
real binary with the embedded SmolLM2 does not reason (and did not take a hand-written ``<think>`` template as
a reasoning one), so its shapes are written out as llama-server documents them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from _uvicorn import serve
from server_helpers import asgi_client
from tokenrelay import load_tokenizer
from tokenrelay._reasoning import ReasoningSplitter, join_reasoning
from tokenrelay.engines._upstream_wire import RELAYED_REASONING, LlamaCppTextReader

THINKING = ["\n  Hmm", ", 🤔 ", "विचार", " <think> inside\n"]
ANSWER = ["  Paris", " 🇫🇷", ".\n"]


def chunk(
    reasoning: str | None = None, content: str | None = None, finish: str | None = None, n: int = 0
) -> str:
    delta: dict[str, Any] = {}
    if reasoning is not None:
        delta["reasoning_content"] = reasoning
    if content is not None:
        delta["content"] = content
    obj = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], "timings": {"predicted_n": n}}
    return json.dumps(obj, ensure_ascii=False)


def stream(thinking: list[str], answer: list[str], finish: str = "stop") -> list[str]:
    parts = [chunk(reasoning=t, n=i + 1) for i, t in enumerate(thinking)]
    parts += [chunk(content=a, n=len(thinking) + i + 1) for i, a in enumerate(answer)]
    return [*parts, chunk(finish=finish, n=len(thinking) + len(answer))]


def split(events: list[str]) -> tuple[str, str]:
    reader = LlamaCppTextReader(max_tokens=100)
    splitter = ReasoningSplitter(RELAYED_REASONING)
    out = [e for data in events for e in splitter.feed(reader.feed(data).text)] + splitter.finish()
    joined = join_reasoning(out)
    reasoning = "".join(e.text for e in joined if type(e).__name__ == "ReasoningDelta")
    answer = "".join(e.text for e in joined if type(e).__name__ == "ContentDelta")
    return reasoning, answer


def test_the_reader_writes_reasoning_back_and_the_splitter_gets_it_exactly() -> None:
    assert split(stream(THINKING, ANSWER)) == ("".join(THINKING), "".join(ANSWER))
    # no reasoning at all: the answer, leading whitespace and a literal <think> later included, as sent
    assert split(stream([], ["  a <think> b"])) == ("", "  a <think> b")
    # cut while thinking: it stays reasoning, no answer made up
    assert split(stream(THINKING[:2], [], finish="length")) == ("".join(THINKING[:2]), "")


def replica(events: list[str]) -> Starlette:
    async def chat(request: Request) -> Response:
        async def frames() -> AsyncIterator[bytes]:
            for data in events:
                yield f"data: {data}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(frames(), media_type="text/event-stream")

    async def health(request: Request) -> Response:
        return Response(b'{"status":"ok"}', media_type="application/json")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/health", health)])


async def test_the_front_relays_a_text_replicas_reasoning_field_for_field() -> None:
    from tokenrelay.engines.upstream import UpstreamEngine
    from tokenrelay.server import ServerConfig, create_app

    with serve(replica(stream(THINKING, ANSWER))) as url:
        engine = UpstreamEngine(
            [url], load_tokenizer("smollm2"), protocol="llamacpp", model="smol", health_interval=0
        )
        request = {"model": "smol", "messages": [{"role": "user", "content": "Capital of France?"}]}
        async with asgi_client(create_app(engine, ServerConfig())) as client:
            whole = (await client.post("/v1/chat/completions", json=request)).json()
            streamed = await client.post("/v1/chat/completions", json={**request, "stream": True})
        await engine.aclose()
    message = whole["choices"][0]["message"]
    assert (message["reasoning_content"], message["content"]) == ("".join(THINKING), "".join(ANSWER))
    deltas = [
        json.loads(line[6:])["choices"][0]["delta"]
        for line in streamed.text.splitlines()
        if line.startswith("data: {") and '"choices":[{' in line
    ]
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    content = "".join(d.get("content") or "" for d in deltas)
    assert (reasoning, content) == ("".join(THINKING), "".join(ANSWER))

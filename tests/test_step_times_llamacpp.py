"""Step times from the embedded engine on the real SmolLM2-135M-Instruct GGUF: each token carries the time of
the ``llama_decode`` that made it, on the server's clock, up to the chunk that sends it."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Iterator

import httpx
import pytest

pytest.importorskip("llama_cpp")

from _uvicorn import serve
from tokenrelay._stream import Event, Finished, StepTime
from tokenrelay.engines.base import ChatMessage, SamplingParams, stream_events
from tokenrelay.engines.llamacpp import LlamaCppEngine
from tokenrelay.server import ServerConfig, create_app
from tokenrelay.wire._sse import SSEParser

CHAT: list[ChatMessage] = [{"role": "user", "content": "Write a haiku about tea ☕."}]
GREEDY = SamplingParams(max_tokens=20, temperature=0.0)


@pytest.fixture(scope="module")
def engine() -> Iterator[LlamaCppEngine]:
    eng = LlamaCppEngine.load(n_ctx=512, n_parallel=2)
    yield eng
    asyncio.run(eng.aclose())


async def test_each_token_carries_the_decode_that_made_it(engine: LlamaCppEngine) -> None:
    started = time.perf_counter()
    seen: list[tuple[Event, float]] = []
    async for event in stream_events(engine, CHAT, GREEDY, step_times=True):
        seen.append((event, time.perf_counter()))
    steps: list[StepTime] = []
    for event, arrived in seen:
        assert event.steps is not None and len(event.steps) == len(event.token_ids)
        for step in event.steps:
            assert step.measured
            assert started < step.start < step.end <= arrived  # made before it reached the consumer
        steps.extend(event.steps)
    final = seen[-1][0]
    assert isinstance(final, Finished)
    assert len(steps) == final.usage.completion_tokens  # every token, an end-of-sequence one included
    # One request alone: each token is its own decode step, one after the other on the worker thread.
    assert all(a.end <= b.start for a, b in itertools.pairwise(steps))
    assert len({s.start for s in steps}) == len(steps)


def test_the_server_stamps_real_decode_times(engine: LlamaCppEngine) -> None:
    with serve(create_app(engine, ServerConfig())) as url:
        body = {
            "messages": CHAT,
            "stream": True,
            "max_tokens": 12,
            "temperature": 0,
            "stream_options": {"include_step_times": True},
            "return_token_ids": True,
        }
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as response:
            raw = response.read()
    parser = SSEParser()
    chunks = [json.loads(e.data) for e in parser.feed(raw) if e.data != "[DONE]"]
    tokens = 0
    for chunk in chunks[1:]:
        timing = chunk["tokenrelay"]
        assert len(timing["steps_ms"]) == len(chunk["choices"][0]["token_ids"])
        assert timing.get("source") == ("engine" if timing["steps_ms"] else None)
        for start, end in timing["steps_ms"]:
            assert 0 < start < end <= timing["sent_ms"]
        tokens += len(timing["steps_ms"])
    assert tokens == 12 or chunks[-1]["choices"][0]["finish_reason"] == "stop"

"""`tokenrelay serve` on the real model with several chats at once (issue 10): all stream together, exactly."""

from __future__ import annotations

import asyncio
import signal
import time

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from server_helpers import serve_process

pytest.importorskip("llama_cpp")

QUESTIONS = [
    "Say hello in one short sentence.",
    "Name three colours.",
    "What is the capital of France?",
    "Write one line about the sea.",
]


async def stream_one(client: openai.AsyncOpenAI, question: str, max_tokens: int) -> tuple[str, float, float]:
    """The streamed text, when its first content arrived and when the stream ended (monotonic seconds)."""
    stream = await client.chat.completions.create(
        model="SmolLM2-135M-Instruct",
        messages=[{"role": "user", "content": question}],
        stream=True,
        temperature=0,
        max_tokens=max_tokens,
    )
    text, first = "", 0.0
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            first = first or time.monotonic()
            text += chunk.choices[0].delta.content
    return text, first, time.monotonic()


def test_concurrent_chats_stream_together_exactly_and_one_can_leave() -> None:
    with serve_process("--threads", "2", "--parallel", "4", "--n-ctx", "512") as server:
        url, proc = server.url, server.proc

        async def scenario() -> None:
            async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client:
                alone = []
                for q in QUESTIONS:
                    reply = await client.chat.completions.create(
                        model="SmolLM2-135M-Instruct",
                        messages=[{"role": "user", "content": q}],
                        temperature=0,
                        max_tokens=32,
                    )
                    alone.append(reply.choices[0].message.content)

                results = await asyncio.gather(*(stream_one(client, q, 32) for q in QUESTIONS))
                # Every first token arrives before any reply ends: the four share the decode steps.
                assert max(first for _, first, _ in results) < min(end for _, _, end in results)
                # Each streamed reply is exactly the one the same request gets alone, whole.
                assert [text for text, _, _ in results] == alone

                async def leaver() -> None:
                    stream = await client.chat.completions.create(
                        model="SmolLM2-135M-Instruct",
                        messages=[{"role": "user", "content": "Count from one to one hundred."}],
                        stream=True,
                        max_tokens=400,
                    )
                    seen = 0
                    async for _ in stream:
                        seen += 1
                        if seen == 3:
                            await stream.close()  # the client goes away mid-reply
                            return

                leaving = asyncio.ensure_future(leaver())
                outcome = await asyncio.gather(*(stream_one(client, q, 32) for q in QUESTIONS[:3]))
                await leaving
                assert [text for text, _, _ in outcome] == alone[:3]

        asyncio.run(scenario())
        # /metrics: every prompt token was either read or found in the prefix cache (the chats share the
        # template's system prompt, and the questions came twice).
        samples = {
            (s.name, s.labels.get("kind")): s.value
            for family in text_string_to_metric_families(httpx.get(url + "/metrics").text)
            for s in family.samples
        }
        read = samples["tokenrelay_engine_prompt_tokens_read_total", None]
        reused = samples["tokenrelay_engine_prompt_tokens_reused_total", None]
        assert reused > 0
        assert read + reused == samples["tokenrelay_tokens_total", "prompt"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        log = server.output()
        assert "finish=cancelled" in log
        assert "4 parallel" in log

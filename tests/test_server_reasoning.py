"""Reasoning apart from the answer on the chat endpoint (issue 31 §2): the replay engine with ``--reasoning-parser``.

The replayed reply is SmolLM2's tokens of a ``<think>`` reply, so the tags arrive cut into several tokens; the
stream carries reasoning in ``delta.reasoning_content`` and the answer in ``delta.content``, never both in one
chunk; the whole reply says the same; usage counts the reasoning tokens; the official SDK and the AI SDK's
reading (either field) see the two apart; a reply cut while thinking ends as reasoning with ``length``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from _uvicorn import serve_relay
from server_helpers import asgi_client, replay_app
from tokenrelay import load_tokenizer

THINKING = "Hmm, 🤔 विचार: <tool_call>{} is not a call here</tool_call> and <think> stays reasoning"
ANSWER = "Paris is the capital of France 🇫🇷. A second <think> is answer text."
REPLY = f"<think>\n{THINKING}\n</think>\n\n{ANSWER}"
MESSAGES = [{"role": "user", "content": "Capital of France?"}]


def chat(stream: bool, **fields: Any) -> dict[str, Any]:
    return {"model": "replay", "messages": MESSAGES, "stream": stream, **fields}


def frames(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


async def test_the_stream_carries_reasoning_and_answer_apart_and_the_body_agrees() -> None:
    app = replay_app(REPLY, rate=None, reasoning_parser="qwen3")[0]
    async with asgi_client(app) as client:
        r = await client.post("/v1/chat/completions", json=chat(True, stream_options={"include_usage": True}))
        whole = (await client.post("/v1/chat/completions", json=chat(False))).json()
    chunks = frames(r.text)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert all(not ("content" in d and "reasoning_content" in d) for d in deltas)  # never both in one chunk
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    content = "".join(d.get("content") or "" for d in deltas)
    assert (reasoning, content) == (
        THINKING + "\n",
        ANSWER,
    )  # whitespace before the closing tag is the model's
    # every reasoning chunk comes before the first content text
    kinds = [
        ("r" if "reasoning_content" in d else "c")
        for d in deltas
        if d.get("reasoning_content") or d.get("content")
    ]
    assert kinds == sorted(kinds, key=lambda k: k == "c")
    usage = chunks[-1]["usage"]
    reasoning_ids = len(load_tokenizer("smollm2").encode(f"<think>\n{THINKING}\n</think>\n\n"))
    assert 0 < usage["completion_tokens_details"]["reasoning_tokens"] <= reasoning_ids
    message = whole["choices"][0]["message"]
    assert (message["reasoning_content"], message["content"]) == (THINKING + "\n", ANSWER)
    assert whole["usage"]["completion_tokens_details"] == usage["completion_tokens_details"]


async def test_a_reply_cut_while_thinking_ends_as_reasoning_with_length() -> None:
    app = replay_app(REPLY, rate=None, reasoning_parser="qwen3")[0]
    async with asgi_client(app) as client:
        r = await client.post("/v1/chat/completions", json=chat(True, max_tokens=8))
        whole = (await client.post("/v1/chat/completions", json=chat(False, max_tokens=8))).json()
    deltas = [c["choices"][0] for c in frames(r.text) if c["choices"]]
    assert not any(d["delta"].get("content") for d in deltas)
    assert "".join(d["delta"].get("reasoning_content", "") for d in deltas)
    assert deltas[-1]["finish_reason"] == "length"
    message = whole["choices"][0]["message"]
    assert (
        message["content"] == ""
        and message["reasoning_content"]
        and whole["choices"][0]["finish_reason"] == "length"
    )


async def test_without_a_parser_the_markup_is_the_answer_as_before() -> None:
    app = replay_app(REPLY, rate=None)[0]
    async with asgi_client(app) as client:
        whole = (await client.post("/v1/chat/completions", json=chat(False))).json()
    message = whole["choices"][0]["message"]
    assert message["content"] == REPLY and "reasoning_content" not in message


async def test_tool_calls_are_read_from_the_answer_only() -> None:
    reply = f'<think>\n{THINKING}\n</think>\n\n<tool_call>\n{{"name": "f", "arguments": {{"x": "é"}}}}\n</tool_call>'
    app = replay_app(reply, rate=None, reasoning_parser="deepseek_r1")[0]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    async with asgi_client(app) as client:
        whole = (await client.post("/v1/chat/completions", json=chat(False, tools=tools))).json()
    choice = whole["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["reasoning_content"] == THINKING + "\n"
    [call] = choice["message"]["tool_calls"]
    assert (call["function"]["name"], call["function"]["arguments"]) == ("f", '{"x": "é"}')


async def test_stop_strings_end_the_answer_not_the_reasoning_on_every_dialect() -> None:
    """``stop`` / ``stop_sequences``: the ``<tool_call>`` written while thinking is reasoning; the first one in
    the answer ends it. Chat and Messages (the Responses API has no stop strings), streamed and whole."""
    reply = f"<think>\n{THINKING}\n</think>\n\nParis 🇫🇷 it is. <tool_call> never shown"
    app = replay_app(reply, rate=None, reasoning_parser="qwen3")[0]
    stop = "<tool_call>"
    async with asgi_client(app) as client:
        streamed = await client.post("/v1/chat/completions", json=chat(True, stop=[stop]))
        whole = (await client.post("/v1/chat/completions", json=chat(False, stop=[stop]))).json()
        anthropic = {"model": "replay", "messages": MESSAGES, "max_tokens": 200, "stop_sequences": [stop]}
        message = (await client.post("/v1/messages", json=anthropic)).json()
        messages_stream = await client.post("/v1/messages", json={**anthropic, "stream": True})
    deltas = [c["choices"][0] for c in frames(streamed.text) if c["choices"]]
    reasoning = "".join(d["delta"].get("reasoning_content", "") for d in deltas)
    content = "".join(d["delta"].get("content") or "" for d in deltas)
    assert (reasoning, content) == (THINKING + "\n", "Paris 🇫🇷 it is. ")
    assert deltas[-1]["finish_reason"] == "stop"
    choice = whole["choices"][0]
    assert (choice["message"]["reasoning_content"], choice["message"]["content"]) == (reasoning, content)
    assert choice["finish_reason"] == "stop"
    assert [b["type"] for b in message["content"]] == ["thinking", "text"]
    assert message["content"][1]["text"] == content and message["content"][0]["thinking"] == reasoning
    assert (message["stop_reason"], message["stop_sequence"]) == ("stop_sequence", stop)
    events = frames(messages_stream.text)
    texts = [
        e["delta"]["text"] for e in events if e["type"] == "content_block_delta" and "text" in e["delta"]
    ]
    assert "".join(texts) == content
    [end] = [e for e in events if e["type"] == "message_delta"]
    assert end["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": stop}


@pytest.fixture(scope="module")
def sdk() -> Iterator[openai.OpenAI]:
    with serve_relay(replay_app(REPLY, rate=None, reasoning_parser="qwen3")[0]) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        yield client
        client.close()


def test_the_official_sdk_reads_reasoning_content_as_an_extra_field(sdk: openai.OpenAI) -> None:
    reasoning, content = "", ""
    chunks: Any = sdk.chat.completions.create(model="replay", messages=MESSAGES, stream=True)  # type: ignore[arg-type]
    for chunk in chunks:
        if chunk.choices:
            delta = chunk.choices[0].delta
            reasoning += getattr(delta, "reasoning_content", None) or ""
            content += delta.content or ""
    assert (reasoning, content) == (THINKING + "\n", ANSWER)


async def test_asking_for_thinking_from_a_model_that_does_not_think_says_so_in_a_header() -> None:
    app = replay_app("No thoughts, only this.", rate=None)[0]  # no reasoning format: SmolLM2's template
    asks = [
        ("/v1/chat/completions", chat(False, reasoning_effort="high")),
        ("/v1/chat/completions", chat(True, chat_template_kwargs={"enable_thinking": True})),
        ("/v1/responses", {"model": "replay", "input": "hi", "reasoning": {"effort": "low"}, "stream": True}),
        (
            "/v1/messages",
            {
                "model": "replay",
                "max_tokens": 2048,
                "messages": MESSAGES,
                "thinking": {"type": "enabled", "budget_tokens": 1024},
            },
        ),
    ]
    async with asgi_client(app) as client:
        for path, body in asks:
            r = await client.post(path, json=body)
            assert r.status_code == 200, r.text
            assert r.headers["x-tokenrelay-reasoning"] == "unavailable", path
            assert "only" in r.text  # answered all the same
        plain = await client.post("/v1/chat/completions", json=chat(False))
        reasoning_app = replay_app(REPLY, rate=None, reasoning_parser="qwen3")[0]
    assert "x-tokenrelay-reasoning" not in plain.headers
    async with asgi_client(reasoning_app) as client:
        r = await client.post("/v1/chat/completions", json=chat(False, reasoning_effort="high"))
    assert "x-tokenrelay-reasoning" not in r.headers

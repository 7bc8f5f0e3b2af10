"""``"return_token_ids": true``: vLLM's shapes from tokenrelay's own server, read by the official SDK."""

from __future__ import annotations

import json

import httpx
import openai
from openai.types.chat import ChatCompletionChunk, ChatCompletionMessageParam

from _uvicorn import serve
from server_helpers import replay_app
from tokenrelay import Detokenizer
from tokenrelay.wire._chat import ChatChunkWriter, TextChunkWriter
from tokenrelay.wire._sse import SSEParser

TEXT = "Tea ☕ for 🦙 llamas, नमस्ते.\nDone"
MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


def chunks_of(frames: list[bytes]) -> list[dict[str, object]]:
    parser = SSEParser()
    events = [e for frame in frames for e in parser.feed(frame)]
    return [json.loads(e.data) for e in events if e.data != "[DONE]"]


def test_writers_put_prompt_ids_in_the_first_chunk_and_ids_in_every_choice() -> None:
    chat = ChatChunkWriter(id="c", model="m", created=1, include_usage=True)
    chat.prompt_token_ids([1, 2, 3])
    frames = [chat.role(), chat.delta_with_ids("a☕", [7, 8]), chat.finish("stop", [2])]
    first, delta, last = chunks_of(frames)
    assert first["prompt_token_ids"] == [1, 2, 3] and first["usage"] is None
    assert "prompt_token_ids" not in delta and "prompt_token_ids" not in last
    assert delta["choices"][0]["token_ids"] == [7, 8]  # type: ignore[index]
    assert last["choices"][0]["token_ids"] == [2]  # type: ignore[index]
    for chunk in (first, delta, last):
        ChatCompletionChunk.model_validate(chunk)  # the SDK still reads every chunk
    text = TextChunkWriter(id="t", model="m", created=1)
    text.prompt_token_ids([5])
    first_text, second = chunks_of([text.delta_with_ids("x", [9]), text.finish("length", [])])
    assert first_text["choices"][0]["prompt_token_ids"] == [5]  # type: ignore[index]
    assert first_text["choices"][0]["token_ids"] == [9]  # type: ignore[index]
    assert "prompt_token_ids" not in second["choices"][0]  # type: ignore[index]


def test_server_streams_every_id_and_the_prompt_ids_to_the_sdk() -> None:
    app, engine = replay_app(TEXT, rate=None)
    with serve(app) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        stream = client.chat.completions.create(
            model="replay",
            messages=MESSAGES,
            stream=True,
            extra_body={"return_token_ids": True},
        )
        chunks = [c.model_dump() for c in stream]
        assert chunks[0]["prompt_token_ids"] == engine.prompt_ids(MESSAGES)
        assert all("prompt_token_ids" not in c for c in chunks[1:])
        ids = [i for c in chunks[1:] for i in c["choices"][0]["token_ids"]]
        assert ids == engine.reply_ids(MESSAGES)  # every id, the end-of-sequence one included, in order
        text = "".join(c["choices"][0]["delta"]["content"] or "" for c in chunks)
        assert text == TEXT
        detok = Detokenizer(engine.tokenizer, prompt_ids=chunks[0]["prompt_token_ids"])
        assert "".join(detok.feed(i) for i in ids) + detok.finish() == TEXT  # what a downstream relay does

        legacy = list(
            openai.OpenAI(
                base_url=url + "/v1", api_key="x", max_retries=0, _strict_response_validation=False
            ).completions.create(
                model="replay", prompt="p", stream=True, extra_body={"return_token_ids": True}
            )
        )
        dumped = [c.model_dump() for c in legacy]
        assert dumped[0]["choices"][0]["prompt_token_ids"] == engine.prompt_ids("p")
        assert [i for c in dumped for i in c["choices"][0]["token_ids"]] == engine.reply_ids("p")

        whole = httpx.post(
            url + "/v1/chat/completions",
            json={"messages": MESSAGES, "return_token_ids": True, "max_tokens": 5},
        ).json()
        assert whole["prompt_token_ids"] == engine.prompt_ids(MESSAGES)
        assert whole["choices"][0]["token_ids"] == engine.reply_ids(MESSAGES)[:5]


def test_without_the_flag_chunks_carry_no_ids() -> None:
    app, _ = replay_app(TEXT, rate=None)
    with (
        serve(app) as url,
        httpx.stream("POST", url + "/v1/chat/completions", json={"messages": MESSAGES, "stream": True}) as r,
    ):
        body = r.read()
    assert b"token_ids" not in body and b"prompt_token_ids" not in body and b'"content":"' in body

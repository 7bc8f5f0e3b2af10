"""Issue 21 §1–2 on the server: a reply that calls tools, streamed and whole, read by the official SDK.

The replay engine replays a reply in the generic format (Hermes markup) through SmolLM2's real tokenizer, one
token per step: every chunk boundary is a token boundary, as from a model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, cast

import openai
import pydantic
import pytest

from _uvicorn import serve_relay
from server_helpers import asgi_client, replay_app
from tokenrelay import load_tokenizer
from tokenrelay.wire._chat_reader import ChatStreamDecoder
from tokenrelay.wire._sse import SSEParser

WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["C", "F"]}},
            "required": ["city"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
}
ARGUMENTS = '{"city": "東京 🗼", "unit": "C"}'
REPLY = (
    'Let me check. <tool_call>\n{"name": "get_weather", "arguments": '
    + ARGUMENTS
    + '}\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
)
MESSAGES = [{"role": "user", "content": "Weather and time in Tokyo?"}]


def chat(stream: bool, **fields: Any) -> dict[str, Any]:
    return {"model": "replay", "messages": MESSAGES, "tools": [WEATHER, TIME], "stream": stream, **fields}


def read_stream(text: str) -> ChatStreamDecoder:
    decoder = ChatStreamDecoder()
    parser = SSEParser()
    for event in parser.feed(text.encode()):
        decoder.feed(event)
    return decoder


async def post(app: Any, body: dict[str, Any]) -> Any:
    async with asgi_client(app) as client:
        return await client.post("/v1/chat/completions", json=body)


@pytest.fixture(scope="module")
def app() -> Any:
    return replay_app(REPLY, rate=None)[0]


async def test_a_streamed_reply_with_calls_has_the_openai_shape(app: Any) -> None:
    r = await post(app, chat(True, stream_options={"include_usage": True}))
    chunks = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    firsts = [c for c in calls if "id" in c]
    assert [(c["index"], c["type"], c["function"]) for c in firsts] == [
        (0, "function", {"name": "get_weather", "arguments": ""}),
        (1, "function", {"name": "get_time", "arguments": ""}),
    ]
    assert (
        all(c["id"].startswith("call_") and len(c["id"]) == 29 for c in firsts)
        and firsts[0]["id"] != firsts[1]["id"]
    )
    later = [c for c in calls if "id" not in c]
    assert all(set(c) == {"index", "function"} and set(c["function"]) == {"arguments"} for c in later)
    assert "".join(c["function"]["arguments"] for c in later if c["index"] == 0) == ARGUMENTS
    assert "".join(c["function"]["arguments"] for c in later if c["index"] == 1) == "{}"
    assert len([c for c in later if c["index"] == 0]) > 3  # fragments as the tokens come, not one lump
    assert "".join(d.get("content") or "" for d in deltas) == "Let me check. "
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "tool_calls"
    usage = chunks[-1]["usage"]
    replayed = load_tokenizer("smollm2").encode(REPLY)
    assert usage["completion_tokens"] == len(replayed) + 1  # every token, the end of sequence included
    assert r.text.endswith("data: [DONE]\n\n")


async def test_the_whole_reply_has_the_same_calls_as_the_stream(app: Any) -> None:
    whole = (await post(app, chat(False))).json()
    message = whole["choices"][0]["message"]
    assert whole["choices"][0]["finish_reason"] == "tool_calls"
    assert message["content"] == "Let me check. "
    assert [
        (c["type"], c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]
    ] == [
        ("function", "get_weather", ARGUMENTS),
        ("function", "get_time", "{}"),
    ]
    streamed = read_stream((await post(app, chat(True))).text)
    assert [(c.name, c.arguments) for c in streamed.tool_calls] == [
        (c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]
    ]
    assert whole["usage"]["completion_tokens"] == len(load_tokenizer("smollm2").encode(REPLY)) + 1


async def test_token_ids_ride_on_the_tool_call_chunks(app: Any) -> None:
    r = await post(app, chat(True, return_token_ids=True))
    chunks = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    ids = [i for c in chunks if c["choices"] for i in c["choices"][0].get("token_ids", [])]
    tok = load_tokenizer("smollm2")
    assert ids[:-1] == tok.encode(REPLY) and ids[-1] in tok.eos_token_ids  # every id, once, in order
    whole = (await post(app, chat(False, return_token_ids=True))).json()
    assert whole["choices"][0]["token_ids"] == ids


async def test_without_parallel_calls_the_reply_ends_after_the_first() -> None:
    app = replay_app(REPLY, rate=None)[0]
    for stream in (True, False):
        r = await post(app, chat(stream, parallel_tool_calls=False))
        if stream:
            decoder = read_stream(r.text)
            calls, reason = [(c.name, c.arguments) for c in decoder.tool_calls], decoder.finish_reason
        else:
            choice = r.json()["choices"][0]
            calls = [
                (c["function"]["name"], c["function"]["arguments"]) for c in choice["message"]["tool_calls"]
            ]
            reason = choice["finish_reason"]
        assert calls == [("get_weather", ARGUMENTS)] and reason == "tool_calls"


async def test_a_reply_cut_by_max_tokens_keeps_the_call_as_it_stands() -> None:
    app = replay_app(REPLY, rate=None)[0]
    tok = load_tokenizer("smollm2")
    cut = len(tok.encode(REPLY[: REPLY.index("東")])) + 2
    whole = (await post(app, chat(False, max_tokens=cut))).json()
    choice = whole["choices"][0]
    assert choice["finish_reason"] == "length"
    [call] = choice["message"]["tool_calls"]
    assert ARGUMENTS.startswith(call["function"]["arguments"]) and call["function"]["arguments"] != ARGUMENTS
    streamed = read_stream((await post(app, chat(True, max_tokens=cut))).text)
    assert streamed.finish_reason == "length"
    assert [(c.name, c.arguments) for c in streamed.tool_calls] == [
        ("get_weather", call["function"]["arguments"])
    ]


async def test_a_malformed_call_is_an_error_event_or_an_error_response() -> None:
    app = replay_app(
        'Sure <tool_call>{"name": "get_weather", "arguments": {"city": 12]}}</tool_call>', rate=None
    )[0]
    r = await post(app, chat(True))
    *_, last, done = [line for line in r.text.splitlines() if line.startswith("data: ")]
    assert done == "data: [DONE]"  # as every failed stream ends (one writer for every reply)
    error = json.loads(last[6:])["error"]
    assert error["code"] == "invalid_tool_call" and error["type"] == "server_error"
    decoder = ChatStreamDecoder()
    with pytest.raises(Exception, match="malformed"):
        for event in SSEParser().feed(r.text.encode()):
            decoder.feed(event)
    assert [(c.name, c.arguments) for c in decoder.tool_calls] == [("get_weather", '{"city": 12')]
    assert decoder.finish_reason is None  # never a complete-looking call
    whole = await post(app, chat(False))
    assert whole.status_code == 500 and whole.json()["error"]["code"] == "invalid_tool_call"


async def test_without_tools_the_markup_is_content_and_with_none_too() -> None:
    app = replay_app(REPLY, rate=None)[0]
    for fields in ({"tools": None}, {"tool_choice": "none"}):
        body = chat(False, **fields)
        if body["tools"] is None:
            del body["tools"]
        message = (await post(app, body)).json()["choices"][0]["message"]
        assert message["content"] == REPLY and "tool_calls" not in message


async def test_a_call_of_a_tool_not_offered_is_delivered_as_the_model_wrote_it() -> None:
    # Where calls are not constrained (replicas, the replay engine) a model may name any tool: the README says
    # the call goes out as written, and the agent's loop answers it.
    reply = '<tool_call>\n{"name": "launch_rocket", "arguments": {"to": "🌕"}}\n</tool_call>'
    app = replay_app(reply, rate=None)[0]
    named = {"type": "function", "function": {"name": "get_time"}}
    for fields in ({}, {"tool_choice": "required"}, {"tool_choice": named}):
        whole = (await post(app, chat(False, **fields))).json()
        assert whole["choices"][0]["finish_reason"] == "tool_calls"
        [call] = whole["choices"][0]["message"]["tool_calls"]
        assert (call["function"]["name"], call["function"]["arguments"]) == ("launch_rocket", '{"to": "🌕"}')
        streamed = read_stream((await post(app, chat(True, **fields))).text)
        assert [(c.name, c.arguments) for c in streamed.tool_calls] == [("launch_rocket", '{"to": "🌕"}')]
        assert streamed.finish_reason == "tool_calls"


# -- the official SDK over a real socket ------------------------------------------------------------------------


class GetWeather(pydantic.BaseModel):
    """The weather in a city."""

    city: str
    unit: str


@pytest.fixture(scope="module")
def sdk() -> Iterator[openai.OpenAI]:
    reply = '<tool_call>\n{"name": "GetWeather", "arguments": ' + ARGUMENTS + "}\n</tool_call>"
    with serve_relay(replay_app(reply, rate=None)[0]) as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


def test_the_sdks_stream_helper_parses_the_arguments_into_the_model(sdk: openai.OpenAI) -> None:
    with sdk.chat.completions.stream(
        model="replay",
        messages=MESSAGES,  # type: ignore[arg-type]
        tools=[openai.pydantic_function_tool(GetWeather)],
        tool_choice="required",
    ) as stream:
        fragments = [e.arguments_delta for e in stream if e.type == "tool_calls.function.arguments.delta"]
        final = stream.get_final_completion()
    assert "".join(fragments) == ARGUMENTS and len(fragments) > 3
    [call] = final.choices[0].message.tool_calls or []
    assert call.function.parsed_arguments == GetWeather(city="東京 🗼", unit="C")
    assert final.choices[0].finish_reason == "tool_calls"


def test_the_sdks_stream_helper_leaves_a_call_of_a_tool_not_offered_unparsed() -> None:
    reply = '<tool_call>\n{"name": "launch_rocket", "arguments": {"to": "moon"}}\n</tool_call>'
    with (
        serve_relay(replay_app(reply, rate=None)[0]) as url,
        openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client,
        client.chat.completions.stream(
            model="replay",
            messages=MESSAGES,  # type: ignore[arg-type]
            tools=[openai.pydantic_function_tool(GetWeather)],
        ) as stream,
    ):
        final = stream.get_final_completion()
    [call] = final.choices[0].message.tool_calls or []
    assert call.function.name == "launch_rocket" and call.function.parsed_arguments is None


def test_the_sdks_history_of_a_call_and_its_result_is_accepted(sdk: openai.OpenAI) -> None:
    first = sdk.chat.completions.create(
        model="replay", messages=cast(Any, MESSAGES), tools=cast(Any, [WEATHER])
    )
    message = first.choices[0].message
    [call] = message.tool_calls or []
    history = [
        *MESSAGES,
        message.model_dump(exclude_none=True),  # the assistant turn as the SDK gives it back
        {"role": "tool", "tool_call_id": call.id, "content": "22 °C"},
    ]
    again = sdk.chat.completions.create(
        model="replay", messages=cast(Any, history), tools=cast(Any, [WEATHER])
    )
    assert (
        again.choices[0].finish_reason == "tool_calls"
    )  # the replay engine replays; the turns were accepted


# -- through an upstream front ----------------------------------------------------------------------------------


def test_a_front_extracts_the_calls_from_its_replicas_ids() -> None:
    from tokenrelay.engines.upstream import UpstreamEngine
    from tokenrelay.server import ServerConfig, create_app

    with serve_relay(replay_app(REPLY, rate=None)[0]) as replica:
        engine = UpstreamEngine([replica], load_tokenizer("smollm2"), model="replay", health_interval=0)
        with serve_relay(create_app(engine, ServerConfig())) as front:
            client = openai.OpenAI(base_url=front + "/v1", api_key="x", max_retries=0)
            whole = client.chat.completions.create(
                model="replay", messages=cast(Any, MESSAGES), tools=cast(Any, [WEATHER, TIME])
            )
            stream = client.chat.completions.create(
                model="replay", messages=cast(Any, MESSAGES), tools=cast(Any, [WEATHER, TIME]), stream=True
            )
            streamed: dict[int, list[str]] = {}
            for chunk in stream:
                for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                    streamed.setdefault(call.index, []).append(call.function.arguments or "")  # type: ignore[union-attr]
    calls = [c.model_dump() for c in whole.choices[0].message.tool_calls or []]
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        ("get_weather", ARGUMENTS),
        ("get_time", "{}"),
    ]
    assert ["".join(v) for _, v in sorted(streamed.items())] == [ARGUMENTS, "{}"]


def test_a_replica_gets_the_generic_formats_turns() -> None:
    from tokenrelay.engines.upstream import UpstreamEngine
    from tokenrelay.server import ServerConfig, create_app

    # A replay replica without a text replays its prompt: what the front sent it comes back as the reply.
    with serve_relay(replay_app(None, rate=None)[0]) as replica:
        engine = UpstreamEngine([replica], load_tokenizer("smollm2"), model="replay", health_interval=0)
        with serve_relay(create_app(engine, ServerConfig(default_max_tokens=2000))) as front:
            client = openai.OpenAI(base_url=front + "/v1", api_key="x", max_retries=0)
            offered = client.chat.completions.create(
                model="replay", messages=cast(Any, MESSAGES), tools=cast(Any, [WEATHER])
            )
            none = client.chat.completions.create(
                model="replay", messages=cast(Any, MESSAGES), tools=cast(Any, [WEATHER]), tool_choice="none"
            )
    # The tools described in the system turn (its example call, replayed, comes back as a call)...
    text = offered.choices[0].message.content or ""
    assert text.startswith("system: You can call functions") and '<tools>\n{"name": "get_weather"' in text
    # ...and with tool_choice none the history is rendered, the tools are not offered.
    assert (none.choices[0].message.content or "").startswith("user: Weather and time in Tokyo?")

"""Tool calls on the wire to llama.cpp's server (issue 21 §3): the OpenAI-shaped request it renders itself
(``_tools.wire_chat``, ``_upstream_wire.request``), and its parsed ``delta.tool_calls`` written back as the
generic format's markup by ``LlamaCppTextReader``, which the front's ``ToolCallExtractor`` reads into the very
names and argument text llama-server sent. ``tests/test_upstream_llama_server_tools.py`` runs the real binary.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from _uvicorn import serve
from server_helpers import asgi_client
from tokenrelay import load_tokenizer
from tokenrelay._errors import ProtocolError
from tokenrelay._tool_call_events import ContentDelta, ToolArgumentsDelta, ToolCallEnded, ToolCallStarted
from tokenrelay._tool_calls import FORMATS, ToolCallExtractor, join_events
from tokenrelay._tools import Tool, ToolRequest, chat_with_tools, wire_chat
from tokenrelay.engines._upstream_wire import LlamaCppTextReader
from tokenrelay.engines._upstream_wire import request as wire_request


def chunk(
    calls: list[dict[str, Any]] | None = None,
    content: str | None = None,
    finish: str | None = None,
    predicted: int | None = None,
) -> str:
    delta: dict[str, Any] = {}
    if calls is not None:
        delta["tool_calls"] = calls
    if content is not None:
        delta["content"] = content
    obj: dict[str, Any] = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if predicted is not None:
        obj["timings"] = {"prompt_n": 10, "cache_n": 0, "predicted_n": predicted}
    return json.dumps(obj, ensure_ascii=False)


def first(index: int, name: str, arguments: str = "") -> dict[str, Any]:
    """A call's first delta as llama-server streams it (its own id, which the front replaces)."""
    return {
        "index": index,
        "id": f"llama{index}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def more(index: int, arguments: str) -> dict[str, Any]:
    return {"index": index, "function": {"arguments": arguments}}


def relay(events: list[str]) -> tuple[str, list[Any]]:
    """The reader's text over ``events``, and what the front's extractor makes of it, joined."""
    reader = LlamaCppTextReader(max_tokens=100)
    texts = [reader.feed(e).text for e in events]
    extractor = ToolCallExtractor(FORMATS["hermes"])
    found = [e for t in texts for e in extractor.feed(t)] + extractor.finish()
    return "".join(texts), join_events(found)


# As llama-server (b1-0c1e570) streamed a call of get_weather for SmolLM2: its argument fragments as sent.
RECORDED = [
    chunk(content=None, predicted=1),
    chunk([first(0, "get_weather", "{")], predicted=14),
    *(
        chunk([more(0, piece)], predicted=15 + i)
        for i, piece in enumerate(['"', "city", '":', ' "', "London", '"', "}"])
    ),
    chunk(finish="tool_calls"),
]


def test_a_streamed_call_is_written_back_as_the_generic_formats_markup() -> None:
    text, events = relay(RECORDED)
    assert text == '<tool_call>\n{"name": "get_weather", "arguments": {"city": "London"}}\n</tool_call>'
    assert events == [
        ToolCallStarted(0, "get_weather"),
        ToolArgumentsDelta(0, '{"city": "London"}'),  # llama-server's own text, fragments joined
        ToolCallEnded(0),
    ]


def test_the_tokens_of_call_chunks_count() -> None:
    reader = LlamaCppTextReader(max_tokens=100)
    tokens = [reader.feed(e).tokens for e in RECORDED]
    assert sum(tokens) == 21  # every token llama-server generated: the markup it parsed away too
    usage = json.dumps({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 22}})
    assert reader.feed(usage).tokens == 1  # the end-of-sequence token after a call, under max_tokens


def test_content_then_two_calls_one_without_arguments() -> None:
    text, events = relay(
        [
            chunk(content="Checking. "),
            chunk([first(0, "get_weather", '{"city": "東京 🗼"'), more(0, "}")]),
            chunk([first(1, "get_time")]),  # no arguments at all: {}
            chunk(finish="tool_calls"),
        ]
    )
    assert events == [
        ContentDelta("Checking. "),
        ToolCallStarted(0, "get_weather"),
        ToolArgumentsDelta(0, '{"city": "東京 🗼"}'),
        ToolCallEnded(0),
        ToolCallStarted(1, "get_time"),
        ToolArgumentsDelta(1, "{}"),
        ToolCallEnded(1),
    ]
    assert text.count("<tool_call>") == 2 and text.endswith("</tool_call>")


def test_a_name_that_needs_escaping_comes_back_as_sent() -> None:
    _, events = relay([chunk([first(0, 'say "hi"\\', "{}")]), chunk(finish="tool_calls")])
    assert events[0] == ToolCallStarted(0, 'say "hi"\\')


def test_content_after_a_call_ends_it() -> None:
    _, events = relay([chunk([first(0, "f", "{}")]), chunk(content=" done"), chunk(finish="stop")])
    assert events == [
        ToolCallStarted(0, "f"),
        ToolArgumentsDelta(0, "{}"),
        ToolCallEnded(0),
        ContentDelta("done"),
    ]


@pytest.mark.parametrize(
    "calls",
    [
        [{"index": 0, "function": {"arguments": "{}"}}],  # a first delta without a name
        "not a list",
        [{"function": {"name": "f"}}],  # no index
        [{"index": 0, "function": {"name": "f", "arguments": {"a": 1}}}],  # arguments not text
    ],
)
def test_a_malformed_tool_call_delta_is_a_protocol_error(calls: Any) -> None:
    reader = LlamaCppTextReader()
    with pytest.raises(ProtocolError):
        reader.feed(json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": calls}}]}))


def test_arguments_that_are_not_an_object_end_as_an_invalid_call() -> None:
    # llama-server's grammar makes them an object; a replica that sends otherwise gets invalid_tool_call.
    _, events = relay([chunk([first(0, "f", '"text"')]), chunk(finish="tool_calls")])
    assert type(events[-1]).__name__ == "ToolCallInvalid"
    assert not any(isinstance(e, ToolCallEnded) for e in events)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None)
@given(
    arguments=st.dictionaries(st.text(max_size=6), _json, max_size=4),
    ascii_only=st.booleans(),
    cuts=st.lists(st.integers(0, 10_000), max_size=8),
)
def test_any_arguments_cut_anywhere_come_back_exactly(
    arguments: dict[str, Any], ascii_only: bool, cuts: list[int]
) -> None:
    text = json.dumps(arguments, ensure_ascii=ascii_only)
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    pieces = [text[a:b] for a, b in itertools.pairwise(points)]
    events = [chunk([first(0, "f", pieces[0] if pieces else "")])]
    events += [chunk([more(0, p)]) for p in pieces[1:]]
    _, found = relay([*events, chunk(finish="tool_calls")])
    assert found == [ToolCallStarted(0, "f"), ToolArgumentsDelta(0, text), ToolCallEnded(0)]


# -- the request ------------------------------------------------------------------------------------------------

WEATHER = Tool("get_weather", "The weather", {"type": "object", "properties": {"city": {"type": "string"}}})
TIME = Tool("get_time")
TURNS: list[dict[str, object]] = [
    {"role": "user", "content": "Weather?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "x"}},
            },
            {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "not json"}},
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
]


def test_wire_chat_gives_openai_turns_with_arguments_as_text_and_the_tool_fields() -> None:
    messages, fields = wire_chat(chat_with_tools(TURNS, ToolRequest((WEATHER, TIME), "auto", None, False)))
    calls = messages[1]["tool_calls"]
    assert isinstance(calls, list)
    assert [c["function"]["arguments"] for c in calls] == ['{"city": "x"}', "not json"]
    assert messages[2] == {"role": "tool", "tool_call_id": "call_1", "content": "18 C"}
    assert fields == {
        "tools": [WEATHER.to_openai(), TIME.to_openai()],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
    }


def test_a_named_choice_goes_as_required_over_the_one_tool() -> None:
    _, fields = wire_chat(chat_with_tools(TURNS, ToolRequest((WEATHER, TIME), "function", "get_time")))
    assert fields["tools"] == [TIME.to_openai()] and fields["tool_choice"] == "required"
    _, none = wire_chat(chat_with_tools(TURNS, ToolRequest((WEATHER,), "none")))
    assert none["tool_choice"] == "none" and none["tools"] == [WEATHER.to_openai()]
    _, history_only = wire_chat(chat_with_tools(TURNS, None))
    assert history_only == {}


def test_the_tool_fields_go_to_llama_servers_chat_endpoint_only() -> None:
    fields = {"tools": [TIME.to_openai()], "tool_choice": "required", "parallel_tool_calls": True}
    common: dict[str, Any] = {"model": None, "max_tokens": 5, "temperature": 0.0, "top_p": 1.0, "seed": None}
    path, body = wire_request("llamacpp", [{"role": "user", "content": "x"}], tools=fields, **common)
    assert path == "/v1/chat/completions" and {k: body[k] for k in fields} == fields
    _, body = wire_request("openai", [{"role": "user", "content": "x"}], tools=fields, **common)
    assert not set(fields) & set(body)  # ids replicas get the generic format's turns instead


# -- a llama-server without --jinja ------------------------------------------------------------------------------

# What llama-server (b1-0c1e570, --no-jinja) answers a chat request with tools.
NO_JINJA = b'{"error":{"code":500,"message":"tools param requires --jinja flag","type":"server_error"}}'


def no_jinja_app(seen: list[int]) -> Starlette:
    async def chat(request: Request) -> Response:
        seen.append(1)
        return Response(NO_JINJA, status_code=500, media_type="application/json")

    async def health(request: Request) -> Response:
        return Response(b'{"status":"ok"}', media_type="application/json")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/health", health)])


async def test_a_llama_server_without_jinja_makes_tools_a_400_and_stays_up() -> None:
    from tokenrelay.engines.upstream import UpstreamEngine
    from tokenrelay.server import ServerConfig, create_app

    seen: list[int] = []
    with serve(no_jinja_app(seen)) as first, serve(no_jinja_app(seen)) as second:
        engine = UpstreamEngine(
            [first, second], load_tokenizer("smollm2"), protocol="llamacpp", model="smol", health_interval=0
        )
        tools = [{"type": "function", "function": {"name": "f"}}]
        request = {"model": "smol", "messages": [{"role": "user", "content": "hi"}], "tools": tools}
        async with asgi_client(create_app(engine, ServerConfig())) as client:
            r = await client.post("/v1/chat/completions", json=request)
        await engine.aclose()
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "tools" and "--jinja" in error["message"]
    assert seen == [1]  # not retried on the other replica: every one would refuse it
    assert all(replica.healthy for replica in engine.replicas)  # a request it cannot take is not a fault

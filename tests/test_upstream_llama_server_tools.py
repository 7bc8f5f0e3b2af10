"""Tool calls through a front whose replica is the real ``llama-server`` (issue 21 §3).

llama-server (built by ``make llama-server``) runs the embedded SmolLM2 GGUF with ``--jinja`` and a chat
template that takes tools (``tests/data/llama-server-tools.jinja``, written for these tests: ChatML, the tools
in the system turn, calls as ``<tool_call>`` JSON, results in a ``tool`` turn). SmolLM2's own template has
none, and llama-server then ignores ``tools`` altogether (no call even for ``tool_choice: "required"``).
llama-server renders the tools, constrains the call with its own grammar and streams it parsed; the front
(tokenrelay's upstream engine, protocol ``llamacpp``) relays it with its own framing. The checks: the front's
calls, streamed and whole, are llama-server's own non-streamed calls (name, arguments text, ``tool_calls``
finish), its usage llama-server's, and a named ``tool_choice`` (which llama-server reads as ``"auto"``) gets a
call of that tool.

A 135M model calls no tool from a bare question, even constrained (llama-server's ``"required"`` grammar lets
text come first, and SmolLM2 writes prose until ``max_tokens``): the conversation shows it one call and its
result first, and with that it calls the tool, greedily, on every run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import openai
import pytest

from _uvicorn import serve_relay
from llama_server import LlamaServer, running_llama_server
from tokenrelay import load_tokenizer

TEMPLATE = Path(__file__).parent / "data" / "llama-server-tools.jinja"

WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TIME: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Get the time in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
# One call and its result, then the question the model answers with a call of its own.
MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"},
    {"role": "assistant", "content": "It is 18 C and sunny in Paris."},
    {"role": "user", "content": "What is the weather in London?"},
]


@pytest.fixture(scope="module")
def llama() -> Iterator[LlamaServer]:
    with running_llama_server(parallel=1, extra=["--jinja", "--chat-template-file", str(TEMPLATE)]) as server:
        yield server


@pytest.fixture(scope="module")
def front(llama: LlamaServer) -> Iterator[str]:
    from tokenrelay.engines.upstream import UpstreamEngine
    from tokenrelay.server import ServerConfig, create_app

    engine = UpstreamEngine(
        [llama.url], load_tokenizer("smollm2"), protocol="llamacpp", model="smol", health_interval=0
    )
    with serve_relay(create_app(engine, ServerConfig())) as url:
        yield url


def body(**fields: Any) -> dict[str, Any]:
    return {"messages": MESSAGES, "tools": [WEATHER], "temperature": 0, "max_tokens": 40, **fields}


def own_reply(llama: LlamaServer, **fields: Any) -> dict[str, Any]:
    """llama-server's own non-streamed reply."""
    response = httpx.post(llama.url + "/v1/chat/completions", json=body(**fields), timeout=120)
    response.raise_for_status()
    return cast(dict[str, Any], response.json())


def calls_of(reply: dict[str, Any]) -> list[tuple[str, str]]:
    message = reply["choices"][0]["message"]
    return [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]


@pytest.fixture(scope="module")
def client(front: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=front + "/v1", api_key="unused", max_retries=0, timeout=120) as sdk:
        yield sdk


@pytest.mark.parametrize("choice", ["auto", "required"])
def test_the_front_relays_llama_servers_own_tool_calls(
    llama: LlamaServer, client: openai.OpenAI, choice: str
) -> None:
    own = own_reply(llama, tool_choice=choice)
    assert own["choices"][0]["finish_reason"] == "tool_calls"
    expected = calls_of(own)
    assert [name for name, _ in expected] == ["get_weather"]
    assert json.loads(expected[0][1]) == {"city": "London"}

    whole = client.chat.completions.create(model="smol", **cast(Any, body(tool_choice=choice)))
    assert whole.choices[0].finish_reason == "tool_calls"
    relayed = whole.choices[0].message.model_dump()
    assert calls_of({"choices": [{"message": relayed}]}) == expected
    assert all(c["id"].startswith("call_") and c["type"] == "function" for c in relayed["tool_calls"])
    assert not relayed["content"]
    assert whole.usage is not None
    assert whole.usage.completion_tokens == own["usage"]["completion_tokens"]
    assert whole.usage.prompt_tokens == own["usage"]["prompt_tokens"]

    stream = client.chat.completions.create(
        model="smol",
        stream=True,
        stream_options={"include_usage": True},
        **cast(Any, body(tool_choice=choice)),
    )
    names: dict[int, str] = {}
    fragments: dict[int, list[str]] = {}
    finish: list[str | None] = []
    usage = None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        if not chunk.choices:
            continue
        finish.append(chunk.choices[0].finish_reason)
        assert not chunk.choices[0].delta.content
        for call in chunk.choices[0].delta.tool_calls or []:
            assert call.function is not None
            if call.index not in names:  # a call's first delta: its id, type and name, arguments ""
                assert call.id is not None and call.id.startswith("call_") and call.type == "function"
                assert call.function.name is not None and call.function.arguments == ""
                names[call.index] = call.function.name
                fragments[call.index] = []
            else:  # later ones: only the index and a fragment
                assert call.id is None and call.function.name is None
                fragments[call.index].append(call.function.arguments or "")
    assert [(names[i], "".join(fragments[i])) for i in sorted(names)] == expected
    assert len(fragments[0]) > 1  # the arguments streamed, in fragments as llama-server sent them
    assert finish[-1] == "tool_calls" and all(f is None for f in finish[:-1])
    assert usage is not None and usage.completion_tokens == own["usage"]["completion_tokens"]


def test_a_named_tool_choice_is_called_through_the_front(client: openai.OpenAI) -> None:
    # llama-server takes no named tool_choice (it logs a warning and reads "auto"); the front sends "required"
    # over the one named tool, so the call is that tool's even with another one offered.
    named = {"type": "function", "function": {"name": "get_time"}}
    whole = client.chat.completions.create(
        model="smol", **cast(Any, body(tools=[WEATHER, TIME], tool_choice=named))
    )
    calls = calls_of({"choices": [{"message": whole.choices[0].message.model_dump()}]})
    assert whole.choices[0].finish_reason == "tool_calls"
    assert [name for name, _ in calls] == ["get_time"]
    assert json.loads(calls[0][1]) == {"city": "London"}


def test_tool_choice_none_through_the_front_is_text(llama: LlamaServer, client: openai.OpenAI) -> None:
    whole = client.chat.completions.create(model="smol", **cast(Any, body(tool_choice="none")))
    own = own_reply(llama, tool_choice="none")
    assert whole.choices[0].message.tool_calls is None
    assert whole.choices[0].message.content == own["choices"][0]["message"]["content"]

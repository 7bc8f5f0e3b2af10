"""Issue 21 §1: requests with tools. Hostile definitions get a 400 naming the field (in-process, through httpx's
ASGI transport); well-formed ones, with a conversation that holds calls and results, are served."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from server_helpers import asgi_client, replay_app
from tokenrelay._errors import InvalidRequestError
from tokenrelay._tools import ChatWithTools
from tokenrelay.server.requests import parse_generation
from tokenrelay.server.tools import MAX_TOOLS

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
USER = [{"role": "user", "content": "Weather in Paris?"}]
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
LOOP = [
    *USER,
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "22 °C, sunny"},
]


def function(name: str = "f", **fields: object) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, **fields}}


def body(**fields: object) -> dict[str, Any]:
    return {"model": "replay", "messages": USER, **fields}


# (what is wrong, the body's fields, the param the 400 must name)
HOSTILE: list[tuple[str, dict[str, Any], str]] = [
    ("an unknown tool type", body(tools=[{"type": "code_interpreter"}]), "tools.0.type"),
    ("a function tool without its function", body(tools=[{"type": "function"}]), "tools.0.function"),
    ("a name with a space", body(tools=[function("get weather")]), "tools.0.function.name"),
    ("an empty name", body(tools=[function("")]), "tools.0.function.name"),
    ("a name of 65 characters", body(tools=[function("x" * 65)]), "tools.0.function.name"),
    ("a name that is not ASCII", body(tools=[function("météo")]), "tools.0.function.name"),
    ("a name given twice", body(tools=[WEATHER, WEATHER]), "tools.1.function.name"),
    (
        "a mistyped schema type",
        body(tools=[function(parameters={"type": "strnig"})]),
        "tools.0.function.parameters.type",
    ),
    (
        "properties that are not schemas",
        body(tools=[function(parameters={"type": "object", "properties": {"a": 5}})]),
        "tools.0.function.parameters.properties.a",
    ),
    (
        "required that is not a list",
        body(tools=[function(parameters={"type": "object", "required": "city"})]),
        "tools.0.function.parameters.required",
    ),
    (
        "a schema of an array, not of an arguments object",
        body(tools=[function(parameters={"type": "array"})]),
        "tools.0.function.parameters",
    ),
    (
        "parameters that are not an object",
        body(tools=[function(parameters="{}")]),
        "tools.0.function.parameters",
    ),
    ("a strict that is not a boolean", body(tools=[function(strict="yes")]), "tools.0.function.strict"),
    (
        "tool_choice naming a missing tool",
        body(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_time"}}),
        "tool_choice.function.name",
    ),
    ("tool_choice of an unknown mode", body(tools=[WEATHER], tool_choice="sometimes"), "tool_choice"),
    (
        "tool_choice of an unknown type",
        body(tools=[WEATHER], tool_choice={"type": "magic", "function": {"name": "get_weather"}}),
        "tool_choice.type",
    ),
    ("tool_choice required with no tools", body(tool_choice="required"), "tool_choice"),
    (
        "parallel_tool_calls not a boolean",
        body(tools=[WEATHER], parallel_tool_calls="yes"),
        "parallel_tool_calls",
    ),
    (
        "a tool turn answering no call",
        body(tools=[WEATHER], messages=[*USER, {"role": "tool", "tool_call_id": "call_9", "content": "x"}]),
        "messages.1.tool_call_id",
    ),
    (
        "a tool turn answering a later call",
        body(tools=[WEATHER], messages=[*USER, LOOP[2], LOOP[1]]),
        "messages.1.tool_call_id",
    ),
    (
        "a tool turn without its tool_call_id",
        body(tools=[WEATHER], messages=[*USER, {"role": "tool", "content": "x"}]),
        "messages.1.tool_call_id",
    ),
    (
        "tool calls on a user turn",
        body(tools=[WEATHER], messages=[{"role": "user", "content": "x", "tool_calls": [CALL]}]),
        "messages.0.tool_calls",
    ),
    (
        "a call in the history of an unknown type",
        body(messages=[*USER, {"role": "assistant", "tool_calls": [{**CALL, "type": "magic"}]}]),
        "messages.1.tool_calls.0.type",
    ),
    (
        "a call in the history without arguments",
        body(messages=[*USER, {"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "f"}}]}]),
        "messages.1.tool_calls.0.function.arguments",
    ),
    (f"{MAX_TOOLS + 1} tools", body(tools=[function(f"f{i}") for i in range(MAX_TOOLS + 1)]), "tools"),
    ("1,000 tools", body(tools=[function(f"f{i}") for i in range(1000)]), "tools"),
    (
        "a 1 MB schema",
        body(
            tools=[
                function(
                    parameters={
                        "type": "object",
                        "properties": {
                            f"p{i}": {"type": "string", "description": "d" * 100} for i in range(7000)
                        },
                    }
                )
            ]
        ),
        "tools.0.function.parameters",
    ),
    (
        "schemas over the limit together",
        body(
            tools=[
                function(f"f{i}", parameters={"type": "object", "description": "d" * 30_000})
                for i in range(5)
            ]
        ),
        "tools",
    ),
    (
        "a schema 100 levels deep",
        body(
            tools=[
                function(
                    parameters=json.loads('{"type": "object", "properties": {"a": ' * 100 + "{}" + "}}" * 100)
                )
            ]
        ),
        "tools.0.function.parameters",
    ),
]


@pytest.fixture(scope="module")
def app() -> Any:
    return replay_app("Hello 🦙", rate=None)[0]


@pytest.mark.parametrize(("case", "fields", "param"), HOSTILE, ids=[c[0] for c in HOSTILE])
@pytest.mark.parametrize("stream", [False, True])
async def test_hostile_tool_definitions_get_a_400_naming_the_field(
    app: Any, case: str, fields: dict[str, Any], param: str, stream: bool
) -> None:
    started = time.perf_counter()
    async with asgi_client(app) as client:
        r = await client.post("/v1/chat/completions", json={**fields, "stream": stream})
    assert r.status_code == 400, (case, r.text[:300])
    error = r.json()["error"]
    assert error["param"] == param, (case, error)
    assert error["type"] == "invalid_request_error" and error["message"]
    assert time.perf_counter() - started < 2.0  # a 1 MB schema too: refused in well under a second


async def test_a_lone_surrogate_in_a_tool_definition_is_a_400(app: Any) -> None:
    raw = json.dumps(body(tools=[function(description="DESC")])).replace("DESC", "\\ud800").encode()
    async with asgi_client(app) as client:
        r = await client.post("/v1/chat/completions", content=raw)
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools.0.function.description"


async def test_legacy_completions_refuse_tools_by_name(app: Any) -> None:
    async with asgi_client(app) as client:
        r = await client.post("/v1/completions", json={"prompt": "hi", "tools": [WEATHER]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools"


@pytest.mark.parametrize(
    "fields",
    [
        {"tools": [WEATHER]},
        {"tools": [WEATHER], "tool_choice": "auto", "parallel_tool_calls": False},
        {"tools": [WEATHER], "tool_choice": "none"},
        {"tools": [WEATHER], "tool_choice": "required"},
        {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
        {"tools": [WEATHER, function("no_arguments")], "messages": LOOP},
        {"messages": LOOP},  # a conversation with calls, and no tools offered now
        {"tools": [], "tool_choice": "none"},
    ],
)
async def test_well_formed_tool_requests_are_served(app: Any, fields: dict[str, Any]) -> None:
    async with asgi_client(app) as client:
        r = await client.post("/v1/chat/completions", json=body(**fields))
    assert r.status_code == 200, r.text[:300]
    assert r.json()["choices"][0]["message"]["content"] == "Hello 🦙"


def parse(**fields: object) -> Any:
    return parse_generation(
        json.dumps(body(**fields)).encode(), "chat", max_tokens_limit=64, default_max_tokens=8
    )


def test_a_tool_request_is_parsed_into_its_parts() -> None:
    gen = parse(tools=[WEATHER, function("g")], tool_choice={"type": "function", "function": {"name": "g"}})
    assert gen.tools is not None
    assert [t.name for t in gen.tools.tools] == ["get_weather", "g"]
    assert gen.tools.choice == "function" and gen.tools.function == "g" and gen.tools.parallel
    assert [t.name for t in gen.tools.callable] == ["g"] and gen.tools.must_call
    assert gen.tools.tools[0].parameters == WEATHER["function"]["parameters"]
    assert parse(tools=[WEATHER], parallel_tool_calls=False).tools.parallel is False
    assert parse(tools=[WEATHER], tool_choice="none").tools is None  # no call to extract or constrain
    assert parse().tools is None and not isinstance(parse().prompt, ChatWithTools)


def test_a_conversation_with_calls_keeps_its_openai_shape_for_templates_that_take_tools() -> None:
    gen = parse(tools=[WEATHER], messages=LOOP)
    assert isinstance(gen.prompt, ChatWithTools)
    assert gen.prompt.tools is not None and gen.prompt.tools.tools[0].name == "get_weather"
    turns = gen.prompt.turns
    assert turns[1] == {
        "role": "assistant",
        "content": None,
        # Arguments as an object: what templates that write them with `tojson` expect.
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
            }
        ],
    }
    assert turns[2] == {"role": "tool", "content": "22 °C, sunny", "tool_call_id": "call_1"}
    # The tuple itself is the generic rendering: plain turns.
    assert [m["role"] for m in gen.prompt] == ["system", "user", "assistant", "user"]
    assert all(set(m) == {"role", "content"} for m in gen.prompt)


def test_the_prompt_cap_counts_the_tool_definitions() -> None:
    tools = [function(f"f{i}", description="d" * 900) for i in range(100)]
    with pytest.raises(InvalidRequestError) as refused:
        parse_generation(
            json.dumps(body(tools=tools)).encode(),
            "chat",
            max_tokens_limit=64,
            default_max_tokens=8,
            max_prompt_chars=50_000,
        )
    assert refused.value.param == "messages" and refused.value.code == "prompt_too_long"

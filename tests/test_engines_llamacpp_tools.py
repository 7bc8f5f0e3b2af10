"""The embedded engine constrained to tool calls (issue 21 §3): with ``tool_choice`` ``"required"`` or a named
tool the reply is calls, each call's arguments valid against its tool's ``parameters`` (checked with
``jsonschema``, the reference implementation); ``"auto"`` lets the model answer or call; constrained and
unconstrained requests share the decode steps. The model is the real SmolLM2-135M, through the server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("llguidance")

import jsonschema

from server_helpers import asgi_client
from tokenrelay._tools import Tool, ToolRequest, tool_grammar
from tokenrelay.engines.llamacpp import LlamaCppEngine
from tokenrelay.server import ServerConfig, create_app

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 24}, "unit": {"enum": ["C", "F"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TIME = {
    "type": "object",
    "properties": {"zone": {"type": "string", "maxLength": 16}},
    "required": ["zone"],
    "additionalProperties": False,
}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "The weather now", "parameters": WEATHER},
    },
    {"type": "function", "function": {"name": "get_time", "description": "The time now", "parameters": TIME}},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}


@pytest.fixture(scope="module")
def engine() -> Iterator[LlamaCppEngine]:
    eng = LlamaCppEngine.load(n_ctx=1024, n_parallel=4)
    yield eng
    asyncio.run(eng.aclose())


@pytest.fixture(scope="module")
def app(engine: LlamaCppEngine) -> Any:
    return create_app(engine, ServerConfig())


def chat(question: str, **fields: Any) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": question}],
        "tools": TOOLS,
        "temperature": 0,
        "max_tokens": 80,
        **fields,
    }


def assert_valid_calls(message: dict[str, Any], names: set[str]) -> list[tuple[str, Any]]:
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]]
    assert calls
    for name, arguments in calls:
        assert name in names
        jsonschema.validate(arguments, SCHEMAS[name])
    return calls


async def test_required_calls_are_valid_against_their_schemas(app: Any) -> None:
    async with asgi_client(app) as client:
        r = await client.post(
            "/v1/chat/completions",
            json=chat("What is the weather in Paris?", tool_choice="required", parallel_tool_calls=False),
        )
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls", choice
    assert choice["message"]["content"] is None
    [(name, arguments)] = assert_valid_calls(choice["message"], set(SCHEMAS))
    assert name == "get_weather" and arguments["city"] == "Paris"  # what this model answers at temperature 0


async def test_a_named_tool_is_the_one_called_streamed_and_batched_with_a_plain_reply(
    app: Any, engine: LlamaCppEngine
) -> None:
    named = chat("Weather in Oslo?", tool_choice={"type": "function", "function": {"name": "get_time"}})
    plain = {"messages": [{"role": "user", "content": "Say hello."}], "temperature": 0, "max_tokens": 24}
    async with asgi_client(app) as client:
        tools_r, plain_r = await asyncio.gather(
            client.post("/v1/chat/completions", json={**named, "stream": True, "parallel_tool_calls": False}),
            client.post("/v1/chat/completions", json=plain),
        )
    chunks = [json.loads(line[6:]) for line in tools_r.text.splitlines() if line.startswith("data: {")]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert calls[0]["function"]["name"] == "get_time"
    arguments = "".join(c["function"]["arguments"] for c in calls)
    jsonschema.validate(json.loads(arguments), TIME)
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "tool_calls"
    assert plain_r.json()["choices"][0]["message"]["content"]  # the unconstrained reply, in the same steps
    assert engine.max_batch_seen >= 2


async def test_auto_lets_the_model_answer_or_call(app: Any) -> None:
    async with asgi_client(app) as client:
        r = await client.post("/v1/chat/completions", json=chat("Tell me a joke.", max_tokens=24))
    choice = r.json()["choices"][0]
    message = choice["message"]
    # SmolLM2-135M answers in prose here (it was not trained on tools); a call, had it made one, would be valid.
    if message.get("tool_calls"):
        assert_valid_calls(message, set(SCHEMAS))
    else:
        assert message["content"] and choice["finish_reason"] in ("stop", "length")


async def test_a_strict_tool_the_engine_cannot_enforce_is_a_400_and_a_lenient_one_is_served(app: Any) -> None:
    unique = {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True, "maxItems": 2}}}
    tool: dict[str, Any] = {"type": "function", "function": {"name": "tag", "parameters": unique}}
    async with asgi_client(app) as client:
        strict = await client.post(
            "/v1/chat/completions",
            json=chat("Tag it.", tools=[{**tool, "function": {**tool["function"], "strict": True}}]),
        )
        assert strict.status_code == 400
        assert strict.json()["error"]["param"] == "tools.0.function.parameters.properties.tags.uniqueItems"
        lenient = await client.post(
            "/v1/chat/completions",
            json=chat(
                "Tag it.", tools=[tool], tool_choice="required", parallel_tool_calls=False, max_tokens=48
            ),
        )
    assert lenient.status_code == 200
    [call] = lenient.json()["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "tag" and isinstance(json.loads(call["function"]["arguments"]), dict)


def test_the_grammar_compiles_once_per_tool_set(engine: LlamaCppEngine) -> None:
    request = ToolRequest((Tool("get_weather", None, WEATHER),), "required")
    grammar = tool_grammar(request)
    assert grammar is not None
    engine.check_constraint(grammar)
    engine.check_constraint(grammar)  # from the cache
    with pytest.raises(Exception, match="tools"):
        engine.check_constraint('start: %json {"type": "strnig"}')

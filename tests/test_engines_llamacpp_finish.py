"""Constrained replies that finish, and finish the same way twice (issue 33), on the real SmolLM2-135M through
the server, the prefix cache on (the default).

The three requests the issue measured against llama-server: a ``json_schema`` City (``max_tokens`` 1000: its
population ran to 1,000 zeros before numbers were bounded), a ``json_object`` list of colours (``max_tokens``
120), and a required ``get_weather`` call (its calls repeated until ``max_tokens``, and its second run read
the cached prompt's last token alone and wrote ``"CiYi"``). All three now end on their own (``"stop"``,
``"tool_calls"``), valid: the colours since the grammar lets the model open the Markdown fence it writes JSON
in (``_json_fence``). Each is sent
again to the same server and gives the same reply. Digit runs are
capped at 16 even where no schema bounds them (a fraction). A reply cut by ``max_tokens`` stays ``"length"``.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("llguidance")

import jsonschema

from server_helpers import asgi_client
from tokenrelay.engines.llamacpp import LlamaCppEngine
from tokenrelay.server import ServerConfig, create_app

CITY = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "country": {"type": "string", "maxLength": 40},
        "population": {"type": "integer"},
    },
    "required": ["name", "country", "population"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"],
}
PARIS: dict[str, Any] = {
    "messages": [{"role": "user", "content": "Tell me about Paris as JSON."}],
    "response_format": {"type": "json_schema", "json_schema": {"name": "City", "schema": CITY}},
    "max_tokens": 1000,
    "temperature": 0,
}
COLOURS: dict[str, Any] = {
    "messages": [{"role": "user", "content": "List three colours as JSON."}],
    "response_format": {"type": "json_object"},
    "max_tokens": 120,
    "temperature": 0,
}
ZURICH: dict[str, Any] = {
    "messages": [{"role": "user", "content": "Weather in Zürich, celsius, please 🌦"}],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Get the weather in a city",
                "parameters": WEATHER,
            },
        }
    ],
    "tool_choice": "required",
    "max_tokens": 120,
    "temperature": 0,
}


@pytest.fixture(scope="module")
def app() -> Iterator[Any]:
    engine = LlamaCppEngine.load(n_ctx=2048, n_parallel=4)
    assert engine.prefix_cache
    yield create_app(engine, ServerConfig())
    asyncio.run(engine.aclose())


async def replies(app: Any, body: dict[str, Any], times: int) -> list[dict[str, Any]]:
    out = []
    async with asgi_client(app) as client:
        for _ in range(times):
            r = await client.post("/v1/chat/completions", json=body, timeout=600)
            assert r.status_code == 200, r.text
            out.append(r.json()["choices"][0])
    return out


async def test_the_city_schema_finishes_with_a_bounded_population_and_repeats(app: Any) -> None:
    first, again = await replies(app, PARIS, 2)
    assert first["finish_reason"] == "stop", first
    city = json.loads(first["message"]["content"])
    jsonschema.validate(city, CITY)
    assert abs(city["population"]) < 2**53
    assert again == first


async def test_three_colours_as_a_json_object_finish_and_the_same_way_twice(app: Any) -> None:
    """The issue's second request: with the Markdown fence the model opens a JSON answer with allowed around the
    object (``_json_fence``; it looped in a list to max_tokens when the grammar began at ``{``), it finishes
    within 120 tokens, the text is the object alone (no fence), and it is the same each time."""
    first, again = await replies(app, COLOURS, 2)
    assert first["finish_reason"] == "stop", first
    content = first["message"]["content"]
    assert isinstance(json.loads(content), dict) and not content.startswith("```")
    assert again == first


async def test_a_required_call_ends_with_tool_calls_and_repeats_the_same_four_times(app: Any) -> None:
    runs = await replies(app, ZURICH, 4)
    first = runs[0]
    assert first["finish_reason"] == "tool_calls", first
    calls = [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in first["message"]["tool_calls"]
    ]
    for name, arguments in calls:
        assert name == "get_weather"
        jsonschema.validate(arguments, WEATHER)
    assert len({json.dumps(c, sort_keys=True) for c in calls}) == len(calls)  # no call repeated
    assert calls[0][1]["city"] == "Zürich"

    def strip_ids(choice: dict[str, Any]) -> Any:
        return [(c["function"]["name"], c["function"]["arguments"]) for c in choice["message"]["tool_calls"]]

    assert all(strip_ids(run) == strip_ids(first) and run["finish_reason"] == "tool_calls" for run in runs)


async def test_a_run_of_digits_is_capped_at_16_even_in_a_fraction(app: Any) -> None:
    schema = {"type": "object", "properties": {"pi": {"type": "number"}}, "required": ["pi"]}
    body = {
        "messages": [{"role": "user", "content": "Write pi with 60 decimals, as JSON."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "Pi", "schema": schema}},
        "max_tokens": 80,
        "temperature": 0,
    }
    [choice] = await replies(app, body, 1)
    assert choice["finish_reason"] == "stop", choice
    text = choice["message"]["content"]
    assert max(len(run) for run in re.findall(r"[0-9]+", text)) <= 16, text
    jsonschema.validate(json.loads(text), schema)


async def test_a_reply_cut_by_max_tokens_is_still_length_and_not_repaired(app: Any) -> None:
    [choice] = await replies(app, {**PARIS, "max_tokens": 5}, 1)
    assert choice["finish_reason"] == "length"
    with pytest.raises(ValueError):
        json.loads(choice["message"]["content"])

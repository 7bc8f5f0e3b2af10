"""``response_format`` on the server (issue 20 §2): accepted on both endpoints, streamed and not; every bad
schema a 400 naming the place, within a second; an engine's schema check run off the event loop; the replay
engine replays its text (it does not constrain), and a reply cut by ``max_tokens`` ends with ``"length"``.

The constrained engines are tested with their own modules (the llama.cpp engine in
``test_engines_llamacpp_json.py``, vLLM in ``tests/with_vllm``, upstream replicas in ``test_upstream*``)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import openai
import pytest
from pydantic import BaseModel

from _uvicorn import serve_relay
from server_helpers import asgi_client, replay_app
from tokenrelay.engines.base import JSONConstraint

CITY = '{"name": "Zürich", "population": 421878, "tags": ["lake", "🏔"]}'
CITY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "population": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "population", "tags"],
    "additionalProperties": False,
}
FMT = {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY_SCHEMA, "strict": True}}


def body(kind: str, response_format: object, **extra: object) -> dict[str, Any]:
    base: dict[str, Any] = (
        {"messages": [{"role": "user", "content": "a city"}]} if kind == "chat" else {"prompt": "a city"}
    )
    return {**base, "response_format": response_format, **extra}


PATHS = {"chat": "/v1/chat/completions", "completion": "/v1/completions"}


@pytest.mark.parametrize("kind", ["chat", "completion"])
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("response_format", [{"type": "text"}, {"type": "json_object"}, FMT, None])
async def test_accepted_on_both_endpoints_streamed_and_not(
    kind: str, stream: bool, response_format: object
) -> None:
    app, _ = replay_app(CITY, rate=None)
    async with asgi_client(app) as client:
        r = await client.post(PATHS[kind], json=body(kind, response_format, stream=stream))
    assert r.status_code == 200, r.text
    if stream:
        chunks = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
        key = "delta" if kind == "chat" else None
        text = "".join(
            (c["choices"][0][key].get("content") or "") if key else c["choices"][0]["text"]
            for c in chunks
            if c["choices"]
        )
    else:
        choice = r.json()["choices"][0]
        text = choice["message"]["content"] if kind == "chat" else choice["text"]
    assert text == CITY  # the replay engine replays its text: it does not constrain, nor pretend to


@pytest.mark.parametrize("kind", ["chat", "completion"])
@pytest.mark.parametrize("stream", [False, True])
async def test_a_json_reply_cut_by_max_tokens_ends_with_length_and_is_not_repaired(
    kind: str, stream: bool
) -> None:
    app, _ = replay_app(CITY, rate=None)
    async with asgi_client(app) as client:
        r = await client.post(PATHS[kind], json=body(kind, FMT, stream=stream, max_tokens=5))
    assert r.status_code == 200, r.text
    if stream:
        chunks = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
        choices = [c["choices"][0] for c in chunks if c["choices"]]
        text = "".join((c["delta"].get("content") or "") if kind == "chat" else c["text"] for c in choices)
        finish = choices[-1]["finish_reason"]
    else:
        choice = r.json()["choices"][0]
        text, finish = (
            choice["message"]["content"] if kind == "chat" else choice["text"],
            choice["finish_reason"],
        )
    assert finish == "length"
    assert CITY.startswith(text) and 0 < len(text) < len(CITY)  # the cut text as made, nothing closed
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


async def test_the_constraint_reaches_the_engine_as_sampling_params() -> None:
    seen: list[JSONConstraint | None] = []
    app, engine = replay_app(CITY, rate=None)
    generate = engine.generate

    def spy(prompt: Any, params: Any, **kwargs: Any) -> Any:
        seen.append(params.constraint)
        return generate(prompt, params, **kwargs)

    engine.generate = spy
    async with asgi_client(app) as client:
        for fmt in ({"type": "json_object"}, FMT, {"type": "text"}):
            assert (await client.post(PATHS["chat"], json=body("chat", fmt))).status_code == 200
    assert seen[0] == JSONConstraint()
    assert seen[1] == JSONConstraint(
        schema=json.dumps(CITY_SCHEMA, separators=(",", ":")), name="city", strict=True
    )
    assert seen[2] is None
    assert list(json.loads(seen[1].schema or "")["properties"]) == [
        "name",
        "population",
        "tags",
    ]  # order kept


def fmt_with(schema: object) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


deep: dict[str, Any] = {"type": "string"}
for _ in range(200):
    deep = {"type": "object", "properties": {"a": deep}, "required": ["a"]}
S = "response_format.json_schema.schema"
BAD: dict[str, tuple[object, str, str]] = {
    "unknown type": ({"type": "xml"}, "response_format.type", "'json_schema'"),
    "not an object": ("json", "response_format", "dictionary"),
    "json_schema missing": ({"type": "json_schema"}, "response_format.json_schema", "is required"),
    "schema missing": ({"type": "json_schema", "json_schema": {"name": "x"}}, S, "is required"),
    "name missing": (
        {"type": "json_schema", "json_schema": {"schema": {}}},
        "response_format.json_schema.name",
        "required",
    ),
    "bad name": (
        {"type": "json_schema", "json_schema": {"name": "a city", "schema": {}}},
        "response_format.json_schema.name",
        "letters",
    ),
    "schema not an object": (fmt_with("{}"), S, "dictionary"),
    "json_schema with json_object": (
        {"type": "json_object", "json_schema": {"name": "x", "schema": {}}},
        "response_format.json_schema",
        "only for type",
    ),
    "type strnig": (fmt_with({"type": "strnig"}), f"{S}.type", "not a valid JSON Schema"),
    "nested type strnig": (
        fmt_with({"properties": {"a": {"items": {"type": "strnig"}}}}),
        f"{S}.properties.a.items.type",
        "object, array, string",
    ),
    "required not a list": (fmt_with({"required": "a"}), f"{S}.required", "not a valid JSON Schema"),
    "unknown dialect": (fmt_with({"$schema": "http://127.0.0.1:9/x"}), f"{S}.$schema", "draft"),
    "unenforceable keyword": (
        fmt_with({"type": "array", "uniqueItems": True}),
        f"{S}.uniqueItems",
        "cannot be enforced",
    ),
    "recursive ref, no base case": (
        fmt_with({"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}),
        f"{S}.properties.next.$ref",
        "no way to end",
    ),
    "remote ref": (fmt_with({"$ref": "https://example.com/s.json"}), f"{S}.$ref", "inside the schema"),
    "200 levels of nesting": (fmt_with(deep), S, "nests more than 64"),
    "1 MB schema": (fmt_with({"enum": ["x" * 98] * 9_900}), S, "bytes of JSON"),
}


@pytest.mark.parametrize("kind", ["chat", "completion"])
@pytest.mark.parametrize(("response_format", "param", "says"), BAD.values(), ids=BAD.keys())
async def test_bad_input_is_a_400_naming_the_place_within_a_second(
    kind: str, response_format: object, param: str, says: str
) -> None:
    app, _ = replay_app(CITY, rate=None)
    async with asgi_client(app) as client:
        # CPU time of this process (the app runs in it, threads included), not the wall clock: the bound is
        # what the check costs, which a busy machine's other processes do not change.
        started = time.process_time()
        r = await client.post(PATHS[kind], json=body(kind, response_format, stream=True))
        elapsed = time.process_time() - started
    assert r.status_code == 400, r.text[:300]
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param, err
    assert says in err["message"], err
    assert elapsed < 1.0


async def test_a_20000_value_enum_is_accepted_quickly() -> None:
    # Served by the replay engine (which does not constrain): the request side bounds it, it does not refuse it.
    app, _ = replay_app('"value-7"', rate=None)
    async with asgi_client(app) as client:
        started = time.process_time()  # CPU time, as above
        r = await client.post(
            PATHS["chat"], json=body("chat", fmt_with({"enum": [f"value-{i}" for i in range(20000)]}))
        )
    assert r.status_code == 200 and time.process_time() - started < 1.0


async def test_the_engines_schema_check_runs_off_the_event_loop() -> None:
    # An engine that compiles schemas (check_constraint) may take a while; the server must keep serving
    # meanwhile. This check waits until a plain request has been answered: run on the event loop, it would
    # block that request and time out (then the JSON request fails too).
    app, engine = replay_app(CITY, rate=None)
    entered, released = threading.Event(), threading.Event()
    loops: list[bool] = []

    def check_constraint(constraint: JSONConstraint) -> None:
        try:
            asyncio.get_running_loop()
            loops.append(True)
        except RuntimeError:
            loops.append(False)
        entered.set()
        if not released.wait(10):
            raise AssertionError("the plain request was not served while the schema compiled")

    engine.check_constraint = check_constraint
    async with asgi_client(app) as client:
        slow = asyncio.ensure_future(client.post(PATHS["chat"], json=body("chat", FMT)))
        assert await asyncio.to_thread(entered.wait, 10)
        plain = await asyncio.wait_for(client.post(PATHS["chat"], json=body("chat", None)), 5)
        released.set()
        assert plain.status_code == 200 and (await slow).status_code == 200
    assert loops == [False]


class City(BaseModel):
    name: str
    population: int
    tags: list[str]


def test_the_official_sdk_parses_a_replayed_json_reply_into_its_model() -> None:
    # openai's .parse() sends response_format built from the pydantic model (strict json_schema).
    app, _ = replay_app(CITY, rate=200)
    with serve_relay(app) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        completion = client.chat.completions.parse(
            model="replay", messages=[{"role": "user", "content": "a city"}], response_format=City
        )
        client.close()
    assert completion.choices[0].message.parsed == City(name="Zürich", population=421878, tags=["lake", "🏔"])

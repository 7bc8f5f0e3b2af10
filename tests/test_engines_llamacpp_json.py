"""The embedded engine constrained to JSON (issue 20 §2): every reply valid against its schema, batched with
unconstrained requests in the same steps, cut by ``max_tokens`` as "length", hostile schemas refused before
anything runs. The model is the real SmolLM2-135M; replies are checked with ``jsonschema`` (the reference
implementation, not the code under test)."""

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
from tokenrelay._errors import InvalidRequestError
from tokenrelay._stream import Finished, TextDelta
from tokenrelay.engines.base import JSONConstraint, Prompt, SamplingParams, stream_events
from tokenrelay.engines.llamacpp import LlamaCppEngine
from tokenrelay.server import ServerConfig, create_app


@pytest.fixture(scope="module")
def engine() -> Iterator[LlamaCppEngine]:
    eng = LlamaCppEngine.load(n_ctx=1024, n_parallel=4)
    yield eng
    asyncio.run(eng.aclose())


def constraint(schema: dict[str, Any] | None) -> JSONConstraint:
    return JSONConstraint(None if schema is None else json.dumps(schema, ensure_ascii=False))


async def reply(
    engine: LlamaCppEngine, prompt: Prompt, params: SamplingParams
) -> tuple[str, Finished, list[int]]:
    text, ids, final = "", list[int](), None
    async for event in stream_events(engine, prompt, params):
        ids.extend(event.token_ids)
        if isinstance(event, TextDelta):
            text += event.text
        else:
            final = event
    assert isinstance(final, Finished)
    return text, final, ids


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


# Every schema bounds its own length (maxLength, maxItems, enums), so a complete reply always fits in
# max_tokens: a "length" finish here would be a failure of the constraint to end the reply.
SCHEMAS: dict[str, dict[str, Any]] = {
    "an object": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "city": {"type": "string", "maxLength": 20},
        },
        "required": ["name", "age", "city"],
        "additionalProperties": False,
    },
    "an array of numbers": {
        "type": "array",
        "items": {"type": "number", "maximum": 1000},
        "minItems": 2,
        "maxItems": 5,
    },
    "an enum of unicode strings": {"enum": ["Zürich", "東京", "🦙 llama", "naïve café"]},
    "nested objects and arrays": {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 24},
            "steps": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "n": {"type": "integer", "minimum": 1, "maximum": 9},
                        "done": {"type": "boolean"},
                        "tag": {"enum": ["red", "green", None]},
                    },
                    "required": ["n", "done", "tag"],
                    "additionalProperties": False,
                },
                "minItems": 1,
                "maxItems": 3,
            },
        },
        "required": ["title", "steps"],
        "additionalProperties": False,
    },
    "unicode property names and a pattern": {
        "type": "object",
        "properties": {
            "städte": {"type": "array", "items": {"enum": ["München", "Köln", "Ōsaka"]}, "maxItems": 3},
            "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
        },
        "required": ["städte", "code"],
        "additionalProperties": False,
    },
}
PROMPTS = ["Describe a person as JSON.", "Tell me a story."]
TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "v": {"type": "integer", "maximum": 99},
                "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2},
            },
            "required": ["v", "kids"],
            "additionalProperties": False,
        }
    },
    "$ref": "#/$defs/node",
}


@pytest.mark.parametrize("schema", SCHEMAS.values(), ids=SCHEMAS.keys())
async def test_every_reply_is_valid_against_its_schema(
    engine: LlamaCppEngine, schema: dict[str, Any]
) -> None:
    engine.check_constraint(constraint(schema))
    for i, prompt in enumerate(PROMPTS):
        # Greedy, and sampled (a seeded temperature 1 wanders off the model's favourite tokens).
        for params in (
            SamplingParams(max_tokens=400, temperature=0.0, constraint=constraint(schema)),
            SamplingParams(max_tokens=400, temperature=1.0, seed=i, constraint=constraint(schema)),
        ):
            text, final, ids = await reply(engine, user(prompt), params)
            assert final.reason == "stop", (prompt, text)
            jsonschema.validate(json.loads(text), schema)
            assert ids[-1] in engine.stop_token_ids  # the grammar's end ended the reply


async def test_a_recursive_schema_is_valid_or_cut_never_invalid(engine: LlamaCppEngine) -> None:
    # Nothing bounds a tree's depth, and a small model may nest to max_tokens: then it is cut, never closed.
    for params in (
        SamplingParams(max_tokens=60, temperature=0.0, constraint=constraint(TREE)),
        SamplingParams(max_tokens=60, temperature=1.0, seed=3, constraint=constraint(TREE)),
    ):
        text, final, _ = await reply(engine, user(PROMPTS[0]), params)
        if final.reason == "stop":
            jsonschema.validate(json.loads(text), TREE)
        else:
            assert final.reason == "length" and "".join(text.split()).startswith(
                '{"v":'
            )  # whatever the layout


async def test_json_object_gives_an_object(engine: LlamaCppEngine) -> None:
    for prompt in ("Give me a JSON object.",):
        text, final, _ = await reply(
            engine, user(prompt), SamplingParams(max_tokens=60, temperature=0.0, constraint=JSONConstraint())
        )
        if final.reason == "stop":
            assert isinstance(json.loads(text), dict)
        else:  # any object may be long; whatever was made is a prefix of one
            assert final.reason == "length" and text.startswith("{")


async def test_a_reply_cut_by_max_tokens_is_length_and_not_repaired(engine: LlamaCppEngine) -> None:
    schema = SCHEMAS["an object"]
    whole, final, _ = await reply(
        engine,
        user(PROMPTS[0]),
        SamplingParams(max_tokens=400, temperature=0.0, constraint=constraint(schema)),
    )
    assert final.reason == "stop"
    cut, final, ids = await reply(
        engine, user(PROMPTS[0]), SamplingParams(max_tokens=6, temperature=0.0, constraint=constraint(schema))
    )
    assert final.reason == "length" and len(ids) == 6
    assert whole.startswith(cut) and cut != whole
    with pytest.raises(json.JSONDecodeError):
        json.loads(cut)


async def test_constrained_and_unconstrained_requests_share_steps_and_the_plain_one_is_unchanged(
    engine: LlamaCppEngine,
) -> None:
    plain = SamplingParams(max_tokens=40, temperature=0.0)
    schema = SCHEMAS["nested objects and arrays"]
    json_params = SamplingParams(max_tokens=400, temperature=0.0, constraint=constraint(schema))
    alone_plain = await reply(engine, user("Why is the sky blue?"), plain)
    alone_json = await reply(engine, user(PROMPTS[1]), json_params)
    engine.max_batch_seen = 0
    together = await asyncio.gather(
        reply(engine, user("Why is the sky blue?"), plain),
        reply(engine, user(PROMPTS[1]), json_params),
        reply(
            engine,
            user(PROMPTS[0]),
            SamplingParams(max_tokens=400, temperature=0.0, constraint=constraint(SCHEMAS["an object"])),
        ),
    )
    assert engine.max_batch_seen >= 2  # they really were decoded in the same steps
    assert together[0][0] == alone_plain[0] and together[0][2] == alone_plain[2]  # token for token
    assert together[1][0] == alone_json[0]
    for (text, final, _), s in zip(together[1:], (schema, SCHEMAS["an object"]), strict=True):
        assert final.reason == "stop"
        jsonschema.validate(json.loads(text), s)


async def test_an_unconstrained_engine_builds_nothing_for_json() -> None:
    eng = LlamaCppEngine.load(n_ctx=256, n_parallel=1)
    try:
        await reply(eng, user("Hi"), SamplingParams(max_tokens=4, temperature=0.0))
        assert not eng._grammars.ready  # no llguidance tokenizer, no grammar: a plain request pays nothing
    finally:
        await eng.aclose()


ENGINE_REFUSES: dict[str, tuple[dict[str, Any], str]] = {
    "overlapping oneOf": ({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]}, "oneOf"),
    "an unknown format": ({"type": "string", "format": "flavour"}, "format"),
    "minLength over maxLength": ({"type": "string", "minLength": 5, "maxLength": 2}, "minLength"),
    "an invalid pattern": ({"type": "string", "pattern": "(["}, "regex"),
}


@pytest.mark.parametrize(("schema", "says"), ENGINE_REFUSES.values(), ids=ENGINE_REFUSES.keys())
def test_what_llguidance_cannot_compile_is_a_400_naming_the_schema(
    engine: LlamaCppEngine, schema: dict[str, Any], says: str
) -> None:
    with pytest.raises(InvalidRequestError) as info:
        engine.check_constraint(constraint(schema))
    assert info.value.param == "response_format.json_schema.schema"
    assert says.lower() in info.value.message.lower()


async def test_a_20000_value_enum_is_served(engine: LlamaCppEngine) -> None:
    values = [f"value-{i}" for i in range(20000)]
    c = constraint({"enum": values})
    loop = asyncio.get_running_loop()
    started = loop.time()
    await loop.run_in_executor(None, engine.check_constraint, c)
    compiled = loop.time() - started
    text, final, _ = await reply(
        engine, user("Pick one."), SamplingParams(max_tokens=30, temperature=0.0, constraint=c)
    )
    assert final.reason == "stop" and json.loads(text) in values
    assert compiled < 10  # about 0.2 s on a quiet 2-core machine; bounded by llguidance's fuel limits


async def test_through_the_server_a_schema_llguidance_refuses_is_a_400_before_the_stream(
    engine: LlamaCppEngine,
) -> None:

    app = create_app(engine, ServerConfig())
    messages = [{"role": "user", "content": "Describe a person as JSON."}]
    async with asgi_client(app) as client:
        bad = {
            "type": "json_schema",
            "json_schema": {"name": "x", "schema": {"type": "string", "format": "flavour"}},
        }
        r = await client.post(
            "/v1/chat/completions", json={"messages": messages, "stream": True, "response_format": bad}
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == "response_format.json_schema.schema"
        fmt = {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMAS["an object"]}}
        r = await client.post(
            "/v1/chat/completions",
            json={
                "messages": messages,
                "stream": True,
                "temperature": 0,
                "max_tokens": 200,
                "response_format": fmt,
            },
        )
    assert r.status_code == 200
    chunks = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    jsonschema.validate(json.loads(text), SCHEMAS["an object"])


def sse_reply(raw: str, kind: str) -> tuple[str, str]:
    chunks = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
    choices = [c["choices"][0] for c in chunks if c["choices"]]
    text = "".join((c["delta"].get("content") or "") if kind == "chat" else c["text"] for c in choices)
    return text, choices[-1]["finish_reason"]


async def test_through_the_server_both_endpoints_stream_exactly_and_a_cut_is_length(
    engine: LlamaCppEngine,
) -> None:
    # Legacy /v1/completions accepts response_format too (as vLLM and llama-server do: README).
    schema = SCHEMAS["an object"]
    fmt = {"type": "json_schema", "json_schema": {"name": "p", "schema": schema, "strict": True}}
    requests: dict[str, tuple[str, dict[str, object]]] = {
        "chat": ("/v1/chat/completions", {"messages": user(PROMPTS[0])}),
        "completion": ("/v1/completions", {"prompt": "A person, as JSON: "}),
    }
    app = create_app(engine, ServerConfig())
    async with asgi_client(app) as client:
        for kind, (path, prompt) in requests.items():
            sent = {**prompt, "temperature": 0, "response_format": fmt}
            streamed = await client.post(path, json={**sent, "stream": True, "max_tokens": 200})
            whole = (await client.post(path, json={**sent, "max_tokens": 200})).json()["choices"][0]
            cut = await client.post(path, json={**sent, "stream": True, "max_tokens": 5})
            text, finish = sse_reply(streamed.text, kind)
            assert finish == "stop" == whole["finish_reason"], kind
            jsonschema.validate(json.loads(text), schema)
            assert text == (whole["message"]["content"] if kind == "chat" else whole["text"])  # exact
            cut_text, cut_finish = sse_reply(cut.text, kind)
            assert cut_finish == "length" and text.startswith(cut_text) and cut_text != text, kind

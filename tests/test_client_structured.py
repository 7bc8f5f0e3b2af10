"""``stream_json`` / ``astream_json`` against real uvicorn sockets: the replay server replaying JSON texts with
SmolLM2's tokenizer (cut by ``max_tokens`` at every token), and a scripted server for the ends a replay cannot
make (``content_filter``, a dropped connection)."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import itertools
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pydantic
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

from _json_replies import CITY, CITY_TEXT, EchoReplayEngine, echo_app
from _uvicorn import serve
from tokenrelay import (
    JSONSyntaxError,
    JSONValue,
    PartialJSON,
    StreamTruncated,
    StringGrew,
    TruncatedJSONError,
    ValueStarted,
    load_tokenizer,
)
from tokenrelay._extras import MissingExtraError
from tokenrelay._json_events import join_events
from tokenrelay.client import (
    JSONResult,
    JSONUpdate,
    astream_json,
    response_format_for,
    stream_json,
)
from tokenrelay.wire._chat import DONE, ChatChunkWriter


class City(pydantic.BaseModel):
    name: str
    country: str
    population: int
    area_km2: float
    tags: list[str]
    capital: bool
    mayor: str | None


@pytest.fixture(scope="module")
def echo() -> Iterator[tuple[str, EchoReplayEngine]]:
    app, engine = echo_app()
    with serve(app) as url:
        yield url + "/v1", engine


# One client for the module: a new httpx.Client loads its CA bundle (~0.2 s on this VM) and the cut test sends
# a hundred requests.
CLIENT = httpx.Client(timeout=30)


def teardown_module() -> None:
    CLIENT.close()


def ask(text: str) -> list[dict[str, object]]:
    return [{"role": "user", "content": text}]


def run(url: str, text: str, **kwargs: Any) -> tuple[list[JSONUpdate], JSONResult[Any]]:
    *updates, result = stream_json(url, ask(text), client=CLIENT, **kwargs)
    assert all(isinstance(u, JSONUpdate) for u in updates) and isinstance(result, JSONResult)
    return updates, result


def is_prefix(snapshot: JSONValue, final: JSONValue, *, cut: bool = False) -> bool:
    """Whether ``snapshot`` is a prefix of ``final`` under PartialJSON's rule. With ``cut``, a string may end in
    the U+FFFD a reply cut inside a character ends with (the tokenizer's own full decode does the same)."""
    if isinstance(snapshot, dict) and isinstance(final, dict):
        keys = list(snapshot)
        return keys == list(final)[: len(keys)] and all(
            is_prefix(snapshot[k], final[k], cut=cut) for k in keys
        )
    if isinstance(snapshot, list) and isinstance(final, list):
        return len(snapshot) <= len(final) and all(
            is_prefix(s, f, cut=cut) for s, f in zip(snapshot, final, strict=False)
        )
    if isinstance(snapshot, str) and isinstance(final, str):
        return final.startswith(snapshot) or (
            cut and snapshot.endswith("\ufffd") and final.startswith(snapshot[:-1])
        )
    return type(snapshot) is type(final) and snapshot == final


# -- a whole reply -------------------------------------------------------------------------------------------


def test_updates_grow_one_live_snapshot_to_the_final_value(echo: tuple[str, EchoReplayEngine]) -> None:
    url, engine = echo
    updates, result = run(url, CITY_TEXT, max_tokens=200)
    assert result.value == CITY == json.loads(result.chat.text)
    assert result.parsed is None and result.chat.finish_reason == "stop"
    assert engine.constraints[-1] is not None and engine.constraints[-1].schema is None  # json_object
    assert len(updates) > 10  # one per delta that changed the value
    # The same root object throughout: updated in place, never re-parsed or rebuilt.
    assert all(u.value is result.value for u in updates)
    # The events, joined, are those of the whole text read at once.
    parser = PartialJSON()
    assert join_events(e for u in updates for e in u.events) == join_events(parser.feed(CITY_TEXT))
    assert any(e == ValueStarted(("tags",), "array") for u in updates for e in u.events)
    grew = [e.text for u in updates for e in u.events if isinstance(e, StringGrew) and e.path == ("name",)]
    assert len(grew) > 1 and "".join(grew) == CITY["name"]  # the string grew in place, delta by delta


def test_each_updates_snapshot_is_a_prefix_of_the_final_value(echo: tuple[str, EchoReplayEngine]) -> None:
    seen = [
        copy.deepcopy(item.value)
        for item in stream_json(echo[0], ask(CITY_TEXT), client=CLIENT, max_tokens=200)
        if isinstance(item, JSONUpdate)
    ]
    assert len(seen) > 10 and seen[-1] == CITY
    assert all(is_prefix(s, CITY) for s in seen)
    assert all(is_prefix(a, b) for a, b in itertools.pairwise(seen))  # it only grows


def test_a_pydantic_model_is_sent_as_the_schema_and_validates_the_reply(
    echo: tuple[str, EchoReplayEngine],
) -> None:
    url, engine = echo
    _, result = run(url, CITY_TEXT, schema=City, max_tokens=200)
    assert result.parsed == City.model_validate(CITY) and isinstance(result.parsed, City)
    constraint = engine.constraints[-1]
    assert constraint is not None and constraint.name == "City" and constraint.strict is None
    assert json.loads(constraint.schema or "null") == City.model_json_schema()


def test_any_type_pydantic_knows_and_a_plain_json_schema(echo: tuple[str, EchoReplayEngine]) -> None:
    url, engine = echo

    @dataclasses.dataclass
    class Point:
        x: int
        y: int

    class Pair(TypedDict):
        a: str
        b: list[int]

    _, points = run(url, '[{"x": 1, "y": 2}, {"x": -3, "y": 40}]', schema=list[Point], max_tokens=50)
    assert points.parsed == [Point(1, 2), Point(-3, 40)]
    assert engine.constraints[-1] is not None and engine.constraints[-1].name == "list"
    _, pair = run(url, '{"a": "é", "b": [1, 2]}', schema=Pair, name="pair-1", strict=True, max_tokens=50)
    assert pair.parsed == {"a": "é", "b": [1, 2]}
    assert engine.constraints[-1] is not None and (
        engine.constraints[-1].name,
        engine.constraints[-1].strict,
    ) == ("pair-1", True)
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    _, plain = run(url, '{"ok": true}', schema=schema, max_tokens=50)
    assert (plain.value, plain.parsed) == ({"ok": True}, None)
    constraint = engine.constraints[-1]
    assert (
        constraint is not None
        and constraint.name == "reply"
        and json.loads(constraint.schema or "") == schema
    )


def test_a_reply_that_is_json_but_not_valid_raises_pydantics_error(
    echo: tuple[str, EchoReplayEngine],
) -> None:
    with pytest.raises(pydantic.ValidationError, match="population"):
        run(echo[0], '{"name": "x", "country": "y", "population": "many"}', schema=City, max_tokens=50)


def test_a_given_response_format_is_sent_as_is(echo: tuple[str, EchoReplayEngine]) -> None:
    url, engine = echo
    _, result = run(url, '{"a": 1}', response_format={"type": "json_object"}, max_tokens=20)
    assert result.value == {"a": 1} and engine.constraints[-1] is not None
    with pytest.raises(ValueError, match="not both"):
        run(url, "{}", response_format={"type": "json_object"}, schema=City)
    with pytest.raises(ValueError, match="describe a schema"):
        run(url, "{}", strict=True)


# -- the end: finish_reason before the final parse ------------------------------------------------------------


def test_every_max_tokens_cut_raises_truncated_with_the_snapshot_never_a_completed_object(
    echo: tuple[str, EchoReplayEngine],
) -> None:
    """CITY_TEXT cut after each of its tokens (inside emoji, CJK, escapes, numbers, keywords)."""
    url, _ = echo
    tokenizer = load_tokenizer("smollm2")
    ids = tokenizer.encode(CITY_TEXT)
    inside_a_character = [k for k in range(1, len(ids)) if tokenizer.decode(ids[:k]).endswith("\ufffd")]
    assert len(inside_a_character) > 5  # emoji and CJK arrive in byte tokens: many cuts fall inside one
    for max_tokens in range(1, len(ids) + 1):
        with pytest.raises(TruncatedJSONError, match="finish_reason 'length'") as caught:
            run(url, CITY_TEXT, schema=City, max_tokens=max_tokens)
        parser = PartialJSON()  # the snapshot of what the server sent: the tokenizer's decode of those ids
        parser.feed(tokenizer.decode(ids[:max_tokens]))
        assert caught.value.value == parser.value, max_tokens
        assert is_prefix(caught.value.value, CITY, cut=True), (max_tokens, caught.value.value)
    # The last cut leaves the text whole, but the server did not say the reply was done: still no value.
    assert caught.value.value == CITY
    _, result = run(url, CITY_TEXT, schema=City, max_tokens=len(ids) + 1)  # room for the end of sequence
    assert result.chat.finish_reason == "stop" and result.parsed == City.model_validate(CITY)


def test_a_stop_string_that_cuts_the_json_raises_truncated(echo: tuple[str, EchoReplayEngine]) -> None:
    with pytest.raises(TruncatedJSONError) as caught:
        run(echo[0], '{"a": [1, 2], "b": "x"}', stop=['"b"'], max_tokens=50)
    assert caught.value.value == {
        "a": [1, 2]
    }  # finish_reason "stop", and the parser says the value is not over


def test_text_that_cannot_be_json_raises_at_once_and_closes_the_stream() -> None:
    app, engine = echo_app(rate=40)  # some 5 s of reply after the error: it must not be read to its end
    reply = '{"a": 12] ' + "and then a long tail of words " * 30
    with serve(app) as base:
        seen = []
        with pytest.raises(JSONSyntaxError) as caught:
            for item in stream_json(base + "/v1", ask(reply), max_tokens=400):
                seen.append(item)
        assert caught.value.offset == 8  # the "]"
        assert [e for u in seen if isinstance(u, JSONUpdate) for e in u.events] == [
            ValueStarted((), "object")
        ]
        at_error = engine.steps_computed
        time.sleep(0.5)  # 20 steps at 40 tokens/s, had the stream been left open
        assert engine.steps_computed <= at_error + 3


async def test_astream_json(echo: tuple[str, EchoReplayEngine]) -> None:
    items = [item async for item in astream_json(echo[0], ask(CITY_TEXT), schema=City, max_tokens=200)]
    *updates, result = items
    assert isinstance(result, JSONResult) and result.parsed == City.model_validate(CITY)
    assert updates and all(isinstance(u, JSONUpdate) and u.value is result.value for u in updates)
    with pytest.raises(TruncatedJSONError) as caught:
        async for _ in astream_json(echo[0], ask(CITY_TEXT), max_tokens=5):
            pass
    assert is_prefix(caught.value.value, CITY, cut=True)


# -- ends only a scripted server makes ------------------------------------------------------------------------


def scripted() -> Starlette:
    """Streams the last message's content in 3-character deltas, ending as the request's ``model`` says:
    ``content_filter`` / ``stop`` (a finish_reason, then [DONE]) or ``dropped`` (the connection breaks)."""

    async def chat(request: Request) -> Response:
        body = await request.json()
        text, how = body["messages"][-1]["content"], body["model"]
        writer = ChatChunkWriter(id="c", model=how, created=0)

        async def frames() -> AsyncIterator[bytes]:
            yield writer.role()
            for i in range(0, len(text), 3):
                yield writer.delta(text[i : i + 3])
                await asyncio.sleep(0)
            if how == "dropped":
                raise RuntimeError("connection dropped on purpose")  # uvicorn aborts the chunked body
            yield writer.finish(how)
            yield DONE

        return StreamingResponse(frames(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


@pytest.fixture(scope="module")
def script() -> Iterator[str]:
    with serve(scripted()) as url:
        yield url + "/v1"


def test_content_filter_raises_truncated_even_for_a_whole_value(script: str) -> None:
    with pytest.raises(TruncatedJSONError, match="content_filter") as caught:
        run(script, '{"a": "b"}', model="content_filter")
    assert caught.value.value == {"a": "b"}
    assert run(script, '{"a": "b"}', model="stop")[1].value == {"a": "b"}


def test_a_dropped_connection_raises_truncated_chained_to_stream_truncated(script: str) -> None:
    with pytest.raises(TruncatedJSONError, match="stream ended") as caught:
        run(script, '{"list": [1, 2, 3], "more": "text"}', model="dropped")
    assert caught.value.value == {"list": [1, 2, 3], "more": "text"}
    assert isinstance(caught.value.__cause__, StreamTruncated)


def test_without_pydantic_a_type_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "pydantic", None)
    with pytest.raises(MissingExtraError, match="pip install pydantic"):
        response_format_for(City)
    assert response_format_for({"type": "object"})[0]["type"] == "json_schema"  # a dict needs nothing

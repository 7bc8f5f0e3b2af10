"""Real structured-output clients against ``tokenrelay serve`` on the embedded SmolLM2 model (issue 20 §3).

The openai SDK (``chat.completions.stream`` / ``parse`` with a pydantic model), instructor's partial streaming
(``Mode.JSON_SCHEMA``: ``response_format``) and LangChain's ``with_structured_output(method="json_schema")``,
streamed and not; tokenrelay's own ``stream_json`` too. None of them is written here, so they prove the wire:
the request each sends (recorded by an httpx hook), the streamed chunks they read, and the end of a reply cut by
``max_tokens``. The embedded engine constrains the reply to the schema, so every value is valid JSON of that
schema (a 135M model's values may be silly; that is not tested). One server for the module, small replies.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import httpx2
import instructor
import jsonschema
import openai
import pydantic
import pytest
from instructor.core import IncompleteOutputException
from langchain_openai import ChatOpenAI
from openai.types.chat import ChatCompletionMessageParam

from server_helpers import ServerProcess, serve_process
from tokenrelay import TruncatedJSONError
from tokenrelay.client import JSONResult, JSONUpdate, stream_json

pytest.importorskip("llama_cpp")

MODEL = "SmolLM2-135M-Instruct"
MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "Name a city in France and its country as JSON."}
]
PROMPT = "Name a city in France and its country as JSON."


class City(pydantic.BaseModel):
    name: str
    country: str


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with serve_process("--threads", "2", timeout=180) as process:
        yield process


class Wire:
    """The openai SDK's own HTTP client (httpx2 in openai 3.x), recording every request body it sends."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.http = openai.DefaultHttpxClient(timeout=120, event_hooks={"request": [self._record]})

    def _record(self, request: httpx2.Request) -> None:
        self.bodies.append(json.loads(request.content))

    def schema_sent(self) -> dict[str, Any]:
        response_format = self.bodies[-1]["response_format"]
        assert response_format["type"] == "json_schema", response_format
        return response_format["json_schema"]["schema"]  # type: ignore[no-any-return]


@pytest.fixture
def wire() -> Iterator[Wire]:
    recorder = Wire()
    yield recorder
    recorder.http.close()


@pytest.fixture
def sdk(server: ServerProcess, wire: Wire) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, http_client=wire.http)


def grows(snapshots: list[dict[str, Any]]) -> bool:
    """Each snapshot a prefix of the next: keys kept in order, string values only extended."""
    for before, after in itertools.pairwise(snapshots):
        if list(before) != list(after)[: len(before)]:
            return False
        for key, value in before.items():
            grown = after[key]
            if isinstance(value, str) and not (isinstance(grown, str) and grown.startswith(value)):
                return False
            if not isinstance(value, str) and value != grown:
                return False
    return True


# -- the openai SDK ------------------------------------------------------------------------------------------


def test_openai_stream_gives_content_deltas_parsed_snapshots_and_the_parsed_final(
    sdk: openai.OpenAI, wire: Wire
) -> None:
    deltas, snapshots = [], []
    with sdk.chat.completions.stream(
        model=MODEL, messages=MESSAGES, response_format=City, temperature=0, max_tokens=40
    ) as stream:
        for event in stream:
            if event.type == "content.delta":
                deltas.append(event.delta)
                if isinstance(event.parsed, dict):
                    snapshots.append(dict(event.parsed))
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "stop"
    assert isinstance(choice.message.parsed, City)
    content = choice.message.content or ""
    assert "".join(deltas) == content and len(deltas) > 3
    jsonschema.validate(json.loads(content), wire.schema_sent())  # the schema the SDK sent (strict form)
    assert wire.bodies[-1]["stream"] is True and wire.bodies[-1]["response_format"]["json_schema"]["strict"]
    assert snapshots and grows(snapshots) and snapshots[-1] == choice.message.parsed.model_dump()


def test_openai_parse_gives_the_parsed_model(sdk: openai.OpenAI, wire: Wire) -> None:
    completion = sdk.chat.completions.parse(
        model=MODEL, messages=MESSAGES, response_format=City, temperature=0, max_tokens=40
    )
    message = completion.choices[0].message
    assert completion.choices[0].finish_reason == "stop" and isinstance(message.parsed, City)
    jsonschema.validate(json.loads(message.content or ""), wire.schema_sent())
    assert message.parsed == City.model_validate_json(message.content or "")


def test_openai_raises_length_finish_reason_error_on_a_cut(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.LengthFinishReasonError) as caught:
        sdk.chat.completions.parse(model=MODEL, messages=MESSAGES, response_format=City, max_tokens=4)
    content = caught.value.completion.choices[0].message.content or ""
    with pytest.raises(json.JSONDecodeError):
        json.loads(content)  # a cut reply, sent as it was: not repaired into an object
    with (
        pytest.raises(openai.LengthFinishReasonError),
        sdk.chat.completions.stream(
            model=MODEL, messages=MESSAGES, response_format=City, max_tokens=4
        ) as stream,
    ):
        for _ in stream:
            pass


# -- tokenrelay's own client on the same server --------------------------------------------------------------


def test_stream_json_on_the_constrained_model(server: ServerProcess) -> None:
    items = list(stream_json(server.url + "/v1", MESSAGES, schema=City, temperature=0, max_tokens=40))
    *updates, result = items
    assert isinstance(result, JSONResult) and isinstance(result.parsed, City)
    assert result.chat.finish_reason == "stop" and updates
    assert all(isinstance(u, JSONUpdate) and u.value is result.value for u in updates)
    with pytest.raises(TruncatedJSONError) as caught:
        for _ in stream_json(server.url + "/v1", MESSAGES, schema=City, max_tokens=4):
            pass
    assert isinstance(caught.value.value, dict)  # the snapshot so far


# -- instructor ----------------------------------------------------------------------------------------------


def test_instructor_create_partial_streams_growing_models(sdk: openai.OpenAI, wire: Wire) -> None:
    client = instructor.from_openai(sdk, mode=instructor.Mode.JSON_SCHEMA)
    partials = [
        partial.model_dump()
        for partial in client.chat.completions.create_partial(
            model=MODEL, response_model=City, messages=MESSAGES, temperature=0, max_tokens=40, max_retries=0
        )
    ]
    assert wire.bodies[-1]["stream"] is True and "properties" in wire.schema_sent()
    assert len(partials) > 3
    filled = [{k: v for k, v in p.items() if v is not None} for p in partials]  # unset fields are None
    assert grows(filled)
    final = City.model_validate(partials[-1])
    jsonschema.validate(final.model_dump(), wire.schema_sent())


def test_instructor_on_a_cut(sdk: openai.OpenAI) -> None:
    client = instructor.from_openai(sdk, mode=instructor.Mode.JSON_SCHEMA)
    with pytest.raises(IncompleteOutputException):
        client.chat.completions.create(
            model=MODEL, response_model=City, messages=MESSAGES, max_tokens=4, max_retries=0
        )
    # create_partial does not say a reply was cut: its last partial simply lacks what never arrived (never a
    # value made up). Use create(), or check the fields, to tell a cut reply from a whole one.
    *_, last = client.chat.completions.create_partial(
        model=MODEL, response_model=City, messages=MESSAGES, max_tokens=4, max_retries=0
    )
    assert None in last.model_dump().values()


# -- LangChain -----------------------------------------------------------------------------------------------


def chat_model(server: ServerProcess, max_tokens: int) -> ChatOpenAI:
    return ChatOpenAI(
        base_url=server.url + "/v1",
        api_key=pydantic.SecretStr("unused"),
        model=MODEL,
        temperature=0,
        max_completion_tokens=max_tokens,
        max_retries=0,
    )


# langchain-openai 1.7 dumps the SDK's parsed chunks with a `parsed: None` type hint, and pydantic warns; the
# warning is theirs, the values are right (the test checks them).
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
def test_langchain_with_structured_output_json_schema(server: ServerProcess) -> None:
    structured = chat_model(server, 40).with_structured_output(City, method="json_schema", include_raw=True)
    reply = structured.invoke(PROMPT)
    assert isinstance(reply, dict) and reply["parsing_error"] is None
    assert isinstance(reply["parsed"], City) and reply["raw"].response_metadata["finish_reason"] == "stop"
    streamed = list(chat_model(server, 40).with_structured_output(City, method="json_schema").stream(PROMPT))
    assert streamed and isinstance(streamed[-1], City)
    # With a JSON Schema (a dict) LangChain streams the growing object.
    schema = City.model_json_schema()
    partials = list(
        chat_model(server, 40).with_structured_output(schema, method="json_schema").stream(PROMPT)
    )
    assert len(partials) > 2 and all(isinstance(p, dict) for p in partials)
    assert grows(partials)
    jsonschema.validate(partials[-1], schema)


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
def test_langchain_raises_on_a_cut(server: ServerProcess) -> None:
    structured = chat_model(server, 4).with_structured_output(City, method="json_schema")
    with pytest.raises(openai.LengthFinishReasonError):
        structured.invoke(PROMPT)
    with pytest.raises(openai.LengthFinishReasonError):
        for _ in structured.stream(PROMPT):
            pass

"""The request body's one-pass validation (pydantic's JSON parser) accepts exactly what the long way does.

``requests._validate`` tries ``model_validate_json`` on the bytes and falls back to ``json.loads`` and
``model_validate`` (whose errors name the field) when it refuses. That is only right if the fast way never
accepts a body the long way refuses, and reads every accepted body the same: checked here over generated
bodies near the schema (right and wrong types, extra fields, escapes of lone surrogates, huge integers).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenrelay._errors import InvalidRequestError
from tokenrelay.server.bodies import _validate_loaded
from tokenrelay.server.bodies import validate as _validate
from tokenrelay.server.requests import ChatCompletionBody, CompletionBody, _Common, parse_generation

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "assistant", "tool", 3])},
        optional={"content": st.one_of(st.text(max_size=8), st.none(), values)},
    ),
    max_size=3,
)
FIELDS = {
    "model": st.one_of(st.text(max_size=6), values),
    "stream": st.one_of(st.booleans(), values),
    "stream_options": st.one_of(st.fixed_dictionaries({"include_usage": st.booleans()}), values),
    "max_tokens": st.one_of(st.integers(-2, 5000), st.floats(-1, 10), values),
    "temperature": st.one_of(st.floats(-1, 3), values),
    "top_p": st.one_of(st.floats(-1, 2), values),
    "seed": st.one_of(st.integers(-(2**64), 2**64), values),
    "stop": st.one_of(st.text(max_size=4), st.lists(st.text(max_size=4), max_size=3), values),
    "n": st.one_of(st.integers(0, 3), st.floats(0, 2), values),
    "return_token_ids": st.one_of(st.booleans(), values),
    "logprobs": values,
    "metadata": values,
}


def _body(data: dict[str, Any], ascii_only: bool, inject: str) -> bytes:
    text = json.dumps(data, ensure_ascii=ascii_only)
    if inject and text.endswith("}") and len(text) > 2:  # one more field whose raw JSON we write ourselves
        text = text[:-1] + f', "zz": {inject}}}'
    return text.encode("utf-8", "surrogatepass")


bodies = st.builds(
    _body,
    st.fixed_dictionaries(
        {},
        optional={
            **FIELDS,
            "messages": st.one_of(messages, values),
            "prompt": st.one_of(st.text(max_size=6), values),
        },
    ),
    st.booleans(),
    st.sampled_from(["", '"\\ud800"', '"\\udfff x"', "1" * 5000, "[[[[1]]]]", '"ok"', "1e400", "-0"]),
)


def _outcome(validate: Any, body: bytes, model: type[_Common]) -> object:
    try:
        req = validate(body, model)
    except (InvalidRequestError, ValueError) as exc:
        return type(exc).__name__
    return req.model_dump(), req.model_extra


@settings(max_examples=300, deadline=None)
@given(bodies, st.sampled_from([ChatCompletionBody, CompletionBody]))
def test_one_pass_accepts_and_reads_exactly_what_the_long_way_does(body: bytes, model: type[_Common]) -> None:
    slow = _outcome(_validate_loaded, body, model)
    try:
        req = model.model_validate_json(body)
    except ValueError:
        return  # refused by the fast way: the long way answers (and names the field)
    if b"NaN" in body or b"Infinity" in body:
        return  # never taken the fast way
    assert slow == (req.model_dump(), req.model_extra), body
    assert _outcome(_validate, body, model) == slow


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b'{"messages": [{"role": "user", "content": "\\ud800"}]}', "messages.0.content"),
        (b'{"messages": [{"role": "user", "content": "x"}], "metadata": NaN}', "metadata"),
        (b'{"messages": [{"role": "user", "content": "x"}], "temperature": "1"}', "temperature"),
        (b'{"messages": [{"role": "user", "content": "x"}], "logprobs": true}', "logprobs"),
        (b'{"messages": [{"role": "user", "content": "x"}], "n": 2.0}', "n"),
    ],
)
def test_refusals_name_the_field_whichever_way_the_body_went(body: bytes, param: str) -> None:
    with pytest.raises(InvalidRequestError) as err:
        parse_generation(body, "chat", max_tokens_limit=100, default_max_tokens=10)
    assert err.value.param == param, err.value


def test_a_valid_body_reads_the_same_both_ways() -> None:
    body = json.dumps(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "☕"}]}
            ],
            "max_tokens": 5.0,
            "stop": ["x"],
            "stream": True,
            "stream_options": {"include_usage": True},
            "user": "someone",
        }
    ).encode()
    fast = _validate(body, ChatCompletionBody)
    slow = _validate_loaded(body, ChatCompletionBody)
    assert fast == slow and fast.max_tokens == 5 and fast.model_extra == {"user": "someone"}
    gen = parse_generation(body, "chat", max_tokens_limit=100, default_max_tokens=10)
    assert gen.prompt == [{"role": "user", "content": "a☕"}] and gen.include_usage and gen.stops == ("x",)

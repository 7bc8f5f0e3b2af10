"""Bounded numbers and layouts for constrained JSON (issue 33): ``_json_grammar``, sans I/O."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenrelay._json_grammar import (
    INTEGER_LIMIT,
    LAYOUT,
    LAYOUTS,
    MAX_DIGITS,
    NUMBER_LIMIT,
    DigitRuns,
    bound_numbers,
    bounded,
    layout_options,
)


def test_unbounded_integers_and_numbers_get_llama_cpp_like_bounds_everywhere_in_a_schema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "x": {"type": ["number", "null"]},
            "list": {"type": "array", "items": {"type": "integer"}},
            "pick": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        },
        "$defs": {"d": {"type": "number"}},
    }
    out = json.loads(bound_numbers(json.dumps(schema)))
    props = out["properties"]
    assert props["n"] == {"type": "integer", "minimum": -INTEGER_LIMIT, "maximum": INTEGER_LIMIT}
    assert props["x"]["minimum"] == -NUMBER_LIMIT and props["x"]["maximum"] == NUMBER_LIMIT
    assert props["list"]["items"]["maximum"] == INTEGER_LIMIT
    assert (
        props["pick"]["anyOf"][0]["minimum"] == -INTEGER_LIMIT and "minimum" not in props["pick"]["anyOf"][1]
    )
    assert out["$defs"]["d"]["maximum"] == NUMBER_LIMIT
    assert INTEGER_LIMIT == 2**53 - 1 and len(str(INTEGER_LIMIT)) == MAX_DIGITS


def test_a_schemas_own_bounds_are_kept_and_never_made_unsatisfiable() -> None:
    def bounds(**number: object) -> dict[str, object]:
        return bounded({"type": "integer", **number})

    assert bounds(minimum=0) == {"type": "integer", "minimum": 0, "maximum": INTEGER_LIMIT}
    assert bounds(exclusiveMaximum=10) == {
        "type": "integer",
        "exclusiveMaximum": 10,
        "minimum": -INTEGER_LIMIT,
    }
    assert bounds(minimum=1, maximum=5) == {"type": "integer", "minimum": 1, "maximum": 5}
    assert bounds(minimum=10**20) == {"type": "integer", "minimum": 10**20}  # asked for longer numbers
    # draft 4: a boolean exclusiveMinimum is no bound by itself
    assert bounds(exclusiveMinimum=True)["minimum"] == -INTEGER_LIMIT


def test_what_has_no_number_is_returned_unchanged() -> None:
    text = '{"type":"object","properties":{"a":{"type":"string"}}}'
    assert bound_numbers(text) is text
    assert bound_numbers("not json") == "not json"
    original = {"type": "object", "properties": {"n": {"type": "integer"}}}
    bounded(original)
    assert original == {"type": "object", "properties": {"n": {"type": "integer"}}}  # a copy was bounded


def test_digit_runs_count_digits_outside_strings_only() -> None:
    runs = DigitRuns()
    runs.feed(b'{"id":"12345678901234567890","n":123')
    assert runs.room == MAX_DIGITS - 3
    runs.feed(b".5")
    assert runs.room == MAX_DIGITS - 1  # a fraction is a run of its own
    runs.feed(b',"s":"a\\"1')
    assert runs.room is None  # inside a string, after an escaped quote
    runs.feed(b'23"}')
    assert runs.room == MAX_DIGITS and runs.finish() == 0


def test_a_tool_calls_digits_are_counted_from_its_marker_on() -> None:
    runs = DigitRuns(b"<tool_call>")
    runs.feed(b'He said "12345" <tool_')
    assert runs.room is None and not runs.active
    runs.feed(b'call>\n{"n":1234')
    assert runs.active and runs.room == MAX_DIGITS - 4


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(alphabet='{}[]":,\\0123456789abc<>_/\n ', max_size=80),
    cuts=st.lists(st.integers(0, 80), max_size=6),
    start=st.sampled_from([b"", b"<tool_call>"]),
)
def test_the_state_after_any_split_equals_the_state_after_the_whole(
    text: str, cuts: list[int], start: bytes
) -> None:
    data = text.encode()
    whole = DigitRuns(start)
    whole.feed(data)
    split = DigitRuns(start)
    at = 0
    for cut in sorted(c for c in cuts if c <= len(data)):
        split.feed(data[at:cut])
        at = cut
    split.feed(data[at:])
    assert (split.room, split.active, split.finish()) == (whole.room, whole.active, whole.finish())


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_layouts_are_llguidance_options(layout: str) -> None:
    options = layout_options(layout)
    assert options == LAYOUTS[layout] and options is not LAYOUTS[layout]
    assert layout_options() == LAYOUTS[LAYOUT]

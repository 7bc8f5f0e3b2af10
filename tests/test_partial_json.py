"""PartialJSON: the shared vectors, the snapshot rule on every prefix, split invariance, hypothesis and fuzz.

Three independent views of the same rule check each other: the vectors (written by hand), a slow recursive
reading of each prefix written from the rule (:func:`reference_snapshot`), and the final value's own shape
(:func:`assert_prefix_of`: every value in a snapshot is a prefix of its final value). Every document is fed
whole, one character at a time, at every two-piece split and at random cuts (``tests/_cuts.py``), and every
cutting must give the same joined events, the same snapshot after each prefix and the same end.
"""

from __future__ import annotations

import copy
import json
import random
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokenrelay
from _cuts import cuttings, random_cut
from tokenrelay import (
    JSONError,
    JSONSyntaxError,
    PartialJSON,
    ProtocolError,
    StringGrew,
    TokenRelayError,
    TruncatedJSONError,
    UseAfterFinishError,
    ValueCompleted,
    ValueStarted,
)
from tokenrelay._json_events import JSONEvent, join_events
from tokenrelay._partial_json import DEFAULT_MAX_DEPTH

VECTORS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "vectors" / "partial_json.json").read_text(encoding="utf-8")
)["documents"]
MISSING = object()  # "no value yet" in a list of snapshots


# -- running a parser over a cutting --------------------------------------------------------------------------


@dataclass
class Outcome:
    events: list[JSONEvent] = field(default_factory=list)  # joined, a syntax error's events last
    snapshots: dict[int, Any] = field(default_factory=dict)  # prefix length -> snapshot copy (or MISSING)
    end: tuple[Any, ...] = ()  # ("value", v) | ("truncated", snapshot) | ("syntax", offset, message)


def run(pieces: Iterable[str]) -> Outcome:
    """Feed ``pieces`` then finish; the snapshot is copied after every piece (it is live)."""
    parser = PartialJSON()
    out = Outcome()
    events: list[JSONEvent] = []
    fed = 0
    out.snapshots[0] = MISSING
    try:
        for piece in pieces:
            events.extend(parser.feed(piece))
            fed += len(piece)
            out.snapshots[fed] = copy.deepcopy(parser.value) if parser.has_value else MISSING
        out.end = ("value", parser.finish())
    except JSONSyntaxError as error:
        events.extend(error.events)
        out.end = ("syntax", error.offset, error.message)
    except TruncatedJSONError as error:
        out.end = ("truncated", error.value)
    out.events = join_events(events)
    return out


def assert_split_invariant(text: str, *, every: int = 1, random_cuts: int = 20) -> Outcome:
    """The outcome of ``text`` one character at a time; every other cutting agrees with it."""
    by_char = run(text)
    whole = run([text])
    assert whole.events == by_char.events and whole.end == by_char.end, text
    for pieces in cuttings(text, every=every, random_cuts=random_cuts):
        out = run(pieces)
        assert out.events == by_char.events, pieces
        assert out.end == by_char.end, pieces
        for length, snapshot in out.snapshots.items():
            assert same(snapshot, by_char.snapshots[length]), (pieces, length)
    return by_char


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (``1`` is not ``1.0`` or ``True``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b) or (a != a and b != b)


def as_vector(event: JSONEvent) -> list[Any]:
    if isinstance(event, ValueStarted):
        return ["started", list(event.path), event.kind]
    if isinstance(event, StringGrew):
        return ["grew", list(event.path), event.text]
    return ["completed", list(event.path), event.value]


# -- the rule, two independent ways -------------------------------------------------------------------------


def assert_prefix_of(snapshot: Any, final: Any) -> None:
    """Every value in ``snapshot`` is a prefix of its final value: containers hold a prefix of the final
    members, all but the last of them complete; strings are prefixes; anything else is already final."""
    assert type(snapshot) is type(final), (snapshot, final)
    if isinstance(final, dict):
        keys = list(snapshot)
        assert keys == list(final)[: len(keys)], (snapshot, final)
        for k in keys[:-1]:
            assert same(snapshot[k], final[k]), (k, snapshot, final)
        if keys:
            assert_prefix_of(snapshot[keys[-1]], final[keys[-1]])
    elif isinstance(final, list):
        assert len(snapshot) <= len(final), (snapshot, final)
        for a, b in zip(snapshot[:-1], final[: max(len(snapshot) - 1, 0)], strict=True):
            assert same(a, b), (snapshot, final)
        if snapshot:
            assert_prefix_of(snapshot[-1], final[len(snapshot) - 1])
    elif isinstance(final, str):
        assert final.startswith(snapshot), (snapshot, final)
    else:
        assert same(snapshot, final), (snapshot, final)


_NUMBER_RUN = re.compile(r"[-+.eE0-9]+")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def reference_snapshot(prefix: str) -> Any:
    """What the snapshot rule shows after ``prefix`` of a valid JSON text (``MISSING``: nothing yet), read by
    plain recursive descent from the rule's own words; slow and simple, the oracle for the parser."""
    pos = 0

    def ws() -> None:
        nonlocal pos
        while pos < len(prefix) and prefix[pos] in " \t\n\r":
            pos += 1

    def string() -> tuple[str, bool]:
        """The string's shown text, and whether it closed. Escapes give UTF-16 units (ints), raw text
        code points (strs); units pair up afterwards."""
        nonlocal pos
        pos += 1
        items: list[str | int] = []
        while pos < len(prefix):
            c = prefix[pos]
            if c == '"':
                pos += 1
                return units_to_text(items, closed=True), True
            if c != "\\":
                items.append(c)
                pos += 1
                continue
            if pos + 1 >= len(prefix):
                break  # a lone backslash: held back
            e = prefix[pos + 1]
            if e != "u":
                items.append(_ESCAPES[e])
                pos += 2
                continue
            if pos + 6 > len(prefix):
                break  # \u with fewer than four digits: held back
            items.append(int(prefix[pos + 2 : pos + 6], 16))
            pos += 6
        pos = len(prefix)
        return units_to_text(items, closed=False), False

    def value() -> tuple[Any, bool]:
        """(shown value or MISSING, complete)."""
        nonlocal pos
        ws()
        if pos == len(prefix):
            return MISSING, False
        c = prefix[pos]
        if c == '"':
            return string()
        if c in "{[":
            pos += 1
            container: Any = {} if c == "{" else []
            close = "}" if c == "{" else "]"
            ws()
            if pos < len(prefix) and prefix[pos] == close:
                pos += 1
                return container, True
            while True:
                ws()
                if pos == len(prefix):
                    return container, False
                key = ""
                if c == "{":
                    key, closed = string()
                    ws()
                    if not closed or pos == len(prefix):
                        return container, False
                    pos += 1  # the colon
                member, complete = value()
                if member is not MISSING:
                    if c == "{":
                        container[key] = member
                    else:
                        container.append(member)
                ws()
                if not complete or pos == len(prefix):
                    return container, False
                pos += 1
                if prefix[pos - 1] == close:
                    return container, True
        if c in "tfn":
            word = {"t": "true", "f": "false", "n": "null"}[c]
            if prefix.startswith(word, pos):
                pos += len(word)
                return json.loads(word), True
            pos = len(prefix)
            return MISSING, False
        match = _NUMBER_RUN.match(prefix, pos)
        assert match is not None
        pos = match.end()
        if pos == len(prefix):
            return MISSING, False  # the number may still grow
        return json.loads(match.group()), True  # a valid document: the run is one whole number

    return value()[0]


def units_to_text(items: Sequence[str | int], *, closed: bool) -> str:
    out: list[str] = []
    k = 0
    while k < len(items):
        item = items[k]
        k += 1
        if isinstance(item, str):
            out.append(item)
        elif 0xD800 <= item <= 0xDBFF:
            nxt = items[k] if k < len(items) else None
            if isinstance(nxt, int) and 0xDC00 <= nxt <= 0xDFFF:
                out.append(chr(0x10000 + ((item - 0xD800) << 10) + (nxt - 0xDC00)))
                k += 1
            elif nxt is not None or closed:
                out.append("\ufffd")
            # else: the last item of an open string, its low half still to come: held back
        elif 0xDC00 <= item <= 0xDFFF:
            out.append("\ufffd")
        else:
            out.append(chr(item))
    return "".join(out)


def assert_rule_on_every_prefix(text: str, final: Any, snapshots: dict[int, Any]) -> None:
    for length in range(len(text) + 1):
        snapshot = snapshots[length]
        assert same(snapshot, reference_snapshot(text[:length])), (text[:length], snapshot)
        if snapshot is not MISSING:
            assert_prefix_of(snapshot, final)


# -- the vectors ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_vector(vector: dict[str, Any]) -> None:
    text: str = vector["text"]
    out = assert_split_invariant(text)
    if "error_after" in vector:
        assert text.startswith(vector["error_after"])
        assert out.end[:2] == ("syntax", len(vector["error_after"])), out.end
    elif vector.get("truncated"):
        assert out.end[0] == "truncated"
        assert same(out.end[1], vector["value"])
        assert (out.snapshots[len(text)] is not MISSING) == vector.get("has_value", True)
    else:
        assert out.end[0] == "value" and same(out.end[1], vector["value"]), out.end
        assert same(vector["value"], without_surrogates(json.loads(text)))  # the vector itself is right
        if not vector.get("duplicate_keys"):
            assert_rule_on_every_prefix(text, vector["value"], out.snapshots)
    if "events" in vector:
        assert [as_vector(e) for e in out.events] == vector["events"]
    for expected in vector.get("snapshots", []):
        prefix = expected["prefix"]
        assert text.startswith(prefix)
        snapshot = out.snapshots[len(prefix)]
        if expected.get("has_value", True):
            assert same(snapshot, expected["value"]), (prefix, snapshot)
        else:
            assert snapshot is MISSING, (prefix, snapshot)


def test_the_vectors_cover_the_rule() -> None:
    names = {v["name"] for v in VECTORS}
    assert len(names) == len(VECTORS)
    assert sum("error_after" in v for v in VECTORS) >= 30
    assert sum(bool(v.get("truncated")) for v in VECTORS) >= 10
    assert sum("events" in v for v in VECTORS) >= 5


def test_the_reference_reading_agrees_with_the_vectors() -> None:
    """The oracle is itself checked against the hand-written snapshots."""
    for vector in VECTORS:
        for expected in vector.get("snapshots", []):
            got = reference_snapshot(expected["prefix"])
            if expected.get("has_value", True):
                assert same(got, expected["value"]), (expected, got)
            else:
                assert got is MISSING


# -- properties -----------------------------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=["Cs"])),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=20,
)
STYLES = st.fixed_dictionaries(
    {
        "indent": st.sampled_from([None, 0, 2, "\t"]),
        "separators": st.sampled_from([None, (",", ":"), (" , ", " : ")]),
        "ensure_ascii": st.booleans(),
        "sort_keys": st.booleans(),
    }
)


@settings(max_examples=150, deadline=None)
@given(JSON_VALUES, STYLES, st.randoms(use_true_random=False))
def test_any_dumped_value_parses_to_json_loads_under_any_cut(
    value: Any, style: Any, rng: random.Random
) -> None:
    text = json.dumps(value, **style)
    expected = json.loads(text)
    by_char = run(text)
    assert by_char.end[0] == "value" and same(by_char.end[1], expected), by_char.end
    assert_rule_on_every_prefix(text, expected, by_char.snapshots)
    for _ in range(3):
        out = run(random_cut(text, rng, most=12))
        assert out.events == by_char.events and out.end == by_char.end
        for length, snapshot in out.snapshots.items():
            assert same(snapshot, by_char.snapshots[length])


def _reject_constant(name: str) -> None:
    raise ValueError(name)  # NaN and Infinity: json.loads takes them, RFC 8259 does not


def json_loads_outcome(text: str) -> tuple[str, Any]:
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return "rejected", None
    return "value", value


def without_surrogates(value: Any) -> Any:
    """A lone surrogate as U+FFFD: what PartialJSON makes of ``\\ud800``, which json.loads keeps as is."""
    if isinstance(value, str):
        return re.sub("[\ud800-\udfff]", "\ufffd", value)
    if isinstance(value, list):
        return [without_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {without_surrogates(k): without_surrogates(v) for k, v in value.items()}
    return value


FUZZ_PIECES = st.sampled_from(
    ['{"a":', '"', "\\", "\\u", "d83d", "\\ude00", "\\ud83d", "[", "]", "{", "}", ",", ":", " ", "\n", "0", "1",
     "-", ".", "e", "E", "+", "12", "true", "fals", "null", "n", "x", "é", "😀", "\x00", "\ufeff", "NaN"]
)  # fmt: skip
FUZZ_TEXT = st.lists(FUZZ_PIECES, max_size=25).map("".join) | st.text(max_size=30)


@settings(max_examples=400, deadline=None)
@given(FUZZ_TEXT, st.randoms(use_true_random=False))
def test_fuzz_any_text_gives_snapshots_or_a_syntax_error_and_agrees_with_json_loads(
    text: str, rng: random.Random
) -> None:
    """Any text: snapshots, then a value, a TruncatedJSONError or a JSONSyntaxError, never another exception;
    the same for any cut; and json.loads accepts exactly what the parser accepts, with the same value."""
    whole = run([text])  # run() lets any other exception through: the test fails on it
    for _ in range(3):
        out = run(random_cut(text, rng))
        assert out.events == whole.events and out.end == whole.end, text
    verdict, expected = json_loads_outcome(text)
    if verdict == "value":
        assert whole.end[0] == "value", (text, whole.end)
        assert same(without_surrogates(whole.end[1]), without_surrogates(expected))
    else:
        assert whole.end[0] in ("syntax", "truncated"), (text, whole.end)


@settings(max_examples=200, deadline=None)
@given(
    JSON_VALUES, st.integers(min_value=0), st.sampled_from(["x", "]", "}", ",", '"', "1", " 1", "\x01", ":"])
)
def test_a_broken_text_raises_at_its_first_bad_character(value: Any, where: int, junk: str) -> None:
    """Junk spliced into a valid text: json.loads and the parser agree; a syntax error is at or after the
    splice, the text before the offending character is not an error, and that character makes it one."""
    text = json.dumps(value)
    cut = where % (len(text) + 1)
    broken = text[:cut] + junk + text[cut:]
    out = run([broken])
    verdict, _ = json_loads_outcome(broken)
    assert (verdict == "value") == (out.end[0] == "value"), (broken, out.end)
    if out.end[0] == "syntax":
        offset = out.end[1]
        assert cut <= offset < len(broken)
        assert run([broken[:offset]]).end[0] in ("truncated", "value")
        assert run([broken[: offset + 1]]).end == out.end


# -- errors, the end rule, the live snapshot -----------------------------------------------------------------


def test_errors_join_the_tree_and_are_value_errors() -> None:
    parser = PartialJSON()
    with pytest.raises(JSONSyntaxError) as raised:
        parser.feed('{"a": 12]')
    error = raised.value
    assert isinstance(error, JSONError) and isinstance(error, ProtocolError) and isinstance(error, ValueError)
    assert isinstance(error, TokenRelayError) and error.status_code == 502 and error.offset == 8
    assert str(error) == "expected ',' or '}' at offset 8"
    assert error.events[-1] == ValueCompleted(("a",), 12)
    assert parser.value == {"a": 12}  # the snapshot up to the offending character
    for call in (lambda: parser.feed("}"), parser.finish):  # the error again, without the events again
        with pytest.raises(JSONSyntaxError) as again:
            call()
        assert str(again.value) == str(error) and again.value.events == ()
    truncated = PartialJSON()
    truncated.feed('{"a": [1, "x')
    with pytest.raises(ValueError) as cut:  # `except ValueError` works as it does for json.loads
        truncated.finish()
    assert isinstance(cut.value, TruncatedJSONError) and cut.value.value == {"a": [1, "x"]}
    with pytest.raises(TruncatedJSONError):
        truncated.finish()  # finish() again: the same answer
    with pytest.raises(UseAfterFinishError):
        truncated.feed("]}")


def test_finish_returns_the_value_again_and_feed_after_it_raises() -> None:
    parser = PartialJSON()
    assert parser.feed("12") == []
    assert not parser.has_value and parser.value is None
    assert parser.finish() == 12 and parser.finish() == 12
    assert parser.has_value and parser.value == 12
    with pytest.raises(UseAfterFinishError):
        parser.feed(" ")


def test_the_snapshot_is_live_and_not_rebuilt() -> None:
    parser = PartialJSON()
    parser.feed('{"items": [{"name": "a')
    root: Any = parser.value
    items = root["items"]
    first = items[0]
    parser.feed('bc"}, {"name": "x')
    assert id(parser.value) == id(root) and root["items"] is items and items[0] is first
    assert root == {"items": [{"name": "abc"}, {"name": "x"}]}
    parser.feed("yz")
    assert root["items"][1] == {"name": "x"}  # not yet read
    assert parser.value == {"items": [{"name": "abc"}, {"name": "xyz"}]}  # reading brings it up to date


def test_a_surrogate_pair_split_at_every_point_across_feeds() -> None:
    text = '["\\ud83d\\ude00", "\\uD83D\\uDE00"]'
    for pieces in cuttings(text, random_cuts=50):
        out = run(pieces)
        assert out.end == ("value", ["😀", "😀"]), pieces
        for snapshot in out.snapshots.values():
            if snapshot is not MISSING:  # never half a pair, never a U+FFFD for a pair that is whole
                shown = json.dumps(snapshot, ensure_ascii=False)
                assert "\ufffd" not in shown and shown.encode("utf-8"), pieces


def test_nesting_is_limited_and_needs_no_recursion() -> None:
    parser = PartialJSON()
    parser.feed("[" * DEFAULT_MAX_DEPTH)
    parser.feed("]" * DEFAULT_MAX_DEPTH)
    value = parser.finish()
    for _ in range(DEFAULT_MAX_DEPTH - 1):
        assert isinstance(value, list) and len(value) == 1
        value = value[0]
    assert value == []
    deeper = PartialJSON(max_depth=3)
    deeper.feed('{"a": [[')
    with pytest.raises(JSONSyntaxError) as raised:
        deeper.feed("[1]]]}")
    assert raised.value.offset == 8 and "max_depth" in str(raised.value)
    with pytest.raises(JSONSyntaxError):
        run_to_end("[" * 100_000)  # refused at once, not 5·10⁹ path entries later


@pytest.mark.skipif(not hasattr(sys, "get_int_max_str_digits"), reason="no int conversion limit")
def test_an_integer_past_pythons_conversion_limit_is_a_syntax_error_not_a_crash() -> None:
    digits = "1" * (sys.get_int_max_str_digits() + 1)
    with pytest.raises(JSONSyntaxError) as raised:
        run_to_end(f"[{digits}]")
    assert raised.value.offset == 1
    with pytest.raises(JSONSyntaxError):
        run_to_end(digits)  # a top-level one fails at finish()


def run_to_end(text: str) -> Any:
    parser = PartialJSON()
    parser.feed(text)
    return parser.finish()


def test_the_public_names() -> None:
    for name in ("PartialJSON", "JSONSyntaxError", "TruncatedJSONError", "JSONError", "ValueStarted"):
        assert name in tokenrelay.__all__
    events: list[JSONEvent] = [
        ValueStarted((), "object"),
        StringGrew((), "object"),
        ValueStarted((), "object"),
    ]
    assert events[0] == events[2] and events[0] != events[1]  # a frozen dataclass compares by type too

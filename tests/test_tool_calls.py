"""``ToolCallExtractor``: each rule of ``_tool_calls``, the split contract at every cut (characters, and the real
tokenizers' deltas at every token), hypothesis over random arguments, and a fuzz invariant."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _cuts import cuttings, random_cut, random_steps
from tokenrelay import Detokenizer, load_tokenizer
from tokenrelay._errors import UseAfterFinishError
from tokenrelay._tool_calls import (
    FORMATS,
    ContentDelta,
    ToolArgumentsDelta,
    ToolCallEnded,
    ToolCallEvent,
    ToolCallExtractor,
    ToolCallFormat,
    ToolCallInvalid,
    ToolCallStarted,
    format_for_template,
    join_events,
)

HERMES, LLAMA3, MISTRAL = FORMATS["hermes"], FORMATS["llama3"], FORMATS["mistral"]


def extract(
    fmt: ToolCallFormat, pieces: Sequence[str], *, truncated: bool = False, **options: Any
) -> list[ToolCallEvent]:
    x = ToolCallExtractor(fmt, **options)
    events: list[ToolCallEvent] = []
    for piece in pieces:
        events += x.feed(piece)
    events += x.finish(truncated=truncated)
    return join_events(events)


def calls(events: Sequence[ToolCallEvent]) -> list[tuple[str, str]]:
    """(name, arguments) of each call announced."""
    names = {e.index: e.name for e in events if isinstance(e, ToolCallStarted)}
    args: dict[int, str] = {}
    for e in events:
        if isinstance(e, ToolArgumentsDelta):
            args[e.index] = args.get(e.index, "") + e.text
    return [(names[i], args.get(i, "")) for i in sorted(names)]


def content(events: Sequence[ToolCallEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, ContentDelta))


def assert_split_invariant(fmt: ToolCallFormat, text: str, **options: Any) -> list[ToolCallEvent]:
    whole = extract(fmt, [text], **options)
    for pieces in cuttings(text, random_cuts=30):
        assert extract(fmt, pieces, **options) == whole, pieces
    return whole


def hermes(name: str, arguments: str, *, before: str = "", sep: str = "\n") -> str:
    return f'{before}<tool_call>{sep}{{"name": "{name}", "arguments": {arguments}}}{sep}</tool_call>'


# -- the formats ----------------------------------------------------------------------------------------------


HERMES_REPLY = (
    "Let me look. "
    + hermes("get_weather", '{"city": "Paris", "when": {"day": [1, {}], "q": "a}b{c"}}')
    + "\n"
    + hermes("get_time", '{ "zone" : "CET" }', sep="")
)


def test_hermes_content_then_calls_with_their_own_argument_text() -> None:
    events = assert_split_invariant(HERMES, HERMES_REPLY)
    assert content(events) == "Let me look. "
    assert calls(events) == [
        ("get_weather", '{"city": "Paris", "when": {"day": [1, {}], "q": "a}b{c"}}'),
        ("get_time", '{ "zone" : "CET" }'),  # its spacing kept: never re-serialized
    ]
    assert [type(e) for e in events[1:]] == [ToolCallStarted, ToolArgumentsDelta, ToolCallEnded] * 2


def test_llama3_json_calls_after_the_python_tag_or_a_brace() -> None:
    tagged = (
        '<|python_tag|>{"name": "search", "parameters": {"q": "東京 🗼"}}; {"name": "now", "parameters": {}}'
    )
    events = assert_split_invariant(LLAMA3, tagged)
    assert calls(events) == [("search", '{"q": "東京 🗼"}'), ("now", "{}")] and content(events) == ""
    bare = assert_split_invariant(LLAMA3, ' {"type": "function", "name": "now", "parameters": {"a": 1}}')
    assert calls(bare) == [("now", '{"a": 1}')]
    # Calls only open a reply: any other reply is content, braces and all.
    prose = assert_split_invariant(LLAMA3, 'The call is {"name": "f"}.')
    assert prose == [ContentDelta('The call is {"name": "f"}.')]


def test_mistral_one_array_of_calls_after_the_marker() -> None:
    text = 'Sure[TOOL_CALLS][{"name": "f", "arguments": {"a": [1, 2]}}, {"name": "g", "arguments": {}}]'
    events = assert_split_invariant(MISTRAL, text)
    assert content(events) == "Sure" and calls(events) == [("f", '{"a": [1, 2]}'), ("g", "{}")]


def test_formats_are_found_from_the_chat_template() -> None:
    assert format_for_template(None) is None
    assert format_for_template("{{ messages }}") is None  # no tools: the generic format (hermes markup)
    assert format_for_template("{% if tools %}<tool_call>{% endif %}") is HERMES
    assert format_for_template("{% for t in tools %}[AVAILABLE_TOOLS]{% endfor %}[TOOL_CALLS]") is MISTRAL
    assert format_for_template("{% if tools %}<|python_tag|>{% endif %}") is LLAMA3


# -- rule 1: the model's own text -----------------------------------------------------------------------------


def test_name_after_arguments_waits_then_the_held_text_goes_out() -> None:
    text = '<tool_call>{"arguments": {"x": "y"}, "name": "f"}</tool_call>'
    x = ToolCallExtractor(HERMES)
    assert x.feed(text[:30]) == []  # arguments read, name unknown: nothing can be announced yet
    rest = x.feed(text[30:]) + x.finish()
    assert rest[:2] == [ToolCallStarted(0, "f"), ToolArgumentsDelta(0, '{"x": "y"}')]
    assert_split_invariant(HERMES, text)


def test_a_call_without_arguments_gets_an_empty_object() -> None:
    assert calls(assert_split_invariant(HERMES, '<tool_call>{"name": "now"}</tool_call>')) == [("now", "{}")]


# -- rule 2: released as soon as known -------------------------------------------------------------------------


def test_content_waits_only_for_a_real_partial_marker() -> None:
    x = ToolCallExtractor(HERMES)
    assert x.feed("Hi <") == [ContentDelta("Hi ")]
    assert x.feed("tool") == []
    assert x.feed("box> x") == [ContentDelta("<toolbox> x")]  # not the marker after all
    assert x.feed(" <tool_cal") == [ContentDelta(" ")]
    assert x.finish() == [ContentDelta("<tool_cal")]  # the end: the partial marker was text


def test_the_name_goes_out_when_complete_and_each_argument_character_as_it_is_read() -> None:
    x = ToolCallExtractor(HERMES)
    assert x.feed('<tool_call>\n{"name": "get_wea') == []
    assert x.feed('ther", "argu') == [ToolCallStarted(0, "get_weather")]
    assert x.feed('ments": {"ci') == [ToolArgumentsDelta(0, '{"ci')]
    assert x.feed('ty": "Par') == [ToolArgumentsDelta(0, 'ty": "Par')]
    assert x.feed('is"}}\n</tool') == [ToolArgumentsDelta(0, 'is"}'), ToolCallEnded(0)]
    assert x.feed("_call>") == [] and x.finish() == []


def test_whitespace_opening_the_reply_waits_and_around_calls_is_markup() -> None:
    x = ToolCallExtractor(HERMES)
    assert x.feed("\n ") == []
    assert x.feed("Hello") == [ContentDelta("\n Hello")]  # it was the reply's text after all
    events = assert_split_invariant(HERMES, "\n\n" + hermes("f", "{}") + "\n\n" + hermes("g", "{}") + "\n")
    assert content(events) == "" and calls(events) == [("f", "{}"), ("g", "{}")]
    assert extract(HERMES, ["  "]) == [ContentDelta("  ")]  # a reply of whitespace is exactly that
    after = assert_split_invariant(HERMES, hermes("f", "{}") + "\n\nDone.")
    assert content(after) == "Done."


def test_a_last_call_without_its_closing_marker_is_complete() -> None:
    for text in (
        '<tool_call>{"name": "f", "arguments": {}}',
        '<tool_call>{"name": "f", "arguments": {}}\n</tool',
    ):
        events = assert_split_invariant(HERMES, text)
        assert events[-1] == ToolCallEnded(0) and calls(events) == [("f", "{}")]


# -- rule 4: malformed calls -----------------------------------------------------------------------------------

MALFORMED = [
    (HERMES, '<tool_call>{"name": "f", "arguments": {"a": 12]}}</tool_call>', [("f", '{"a": 12')]),
    (HERMES, '<tool_call>{"name": "f", "arguments": "{}"}</tool_call>', [("f", "")]),
    (HERMES, '<tool_call>{"name": "f", "arguments": {}} trailing</tool_call>', [("f", "{}")]),
    (
        HERMES,
        '<tool_call>{"name": "f", "arguments": {"a": 1}, "arguments": {}}</tool_call>',
        [("f", '{"a": 1}')],
    ),
    (HERMES, '<tool_call>{"name": "f", "argu', [("f", "")]),  # the reply stopped inside the call
    (HERMES, hermes("f", "{}") + "<tool_call>[1, 2]</tool_call>", [("f", "{}")]),  # after a call: an error
    (LLAMA3, '{"name": "f", "parameters": {}} and then prose', [("f", "{}")]),
    (MISTRAL, '[TOOL_CALLS][{"name": "f", "arguments": {}}, 7]', [("f", "{}")]),
]


@pytest.mark.parametrize(("fmt", "text", "before"), MALFORMED, ids=[m[1][:40] for m in MALFORMED])
def test_a_malformed_call_ends_the_extraction_after_what_was_well_formed(
    fmt: ToolCallFormat, text: str, before: list[tuple[str, str]]
) -> None:
    events = assert_split_invariant(fmt, text)
    assert isinstance(events[-1], ToolCallInvalid) and events[-1].message
    assert 0 <= events[-1].offset <= len(text)
    assert calls(events) == before


# Markup that never became a call, in a reply that has announced none: the peers pass it on as content (the
# rest of the reply with it), and so does the extractor, instead of failing the reply (issue 31 §3).
NEVER_CALLS = [
    (HERMES, "<tool_call>not valid json</tool_call> so I answer myself."),
    (HERMES, "Sure: <tool_call>[1, 2]</tool_call>"),
    (HERMES, '<tool_call>{"name": 5, "arguments": {}}</tool_call>'),
    (HERMES, '<tool_call>{"arguments": {"a": 1}}</tool_call>'),
    (HERMES, "\n<tool_call>"),
    (HERMES, '<tool_call>{"name": ""}</tool_call> 🙂 नमस्ते'),
    (LLAMA3, "<|python_tag|>brave_search.call(query='x')"),
    (MISTRAL, '[TOOL_CALLS]{"name": "f", "arguments": {}}'),
    (MISTRAL, "Here: [TOOL_CALLS] none today"),
]


@pytest.mark.parametrize(("fmt", "text"), NEVER_CALLS, ids=[m[1][:40] for m in NEVER_CALLS])
def test_markup_that_never_becomes_a_call_is_content(fmt: ToolCallFormat, text: str) -> None:
    assert assert_split_invariant(fmt, text) == [ContentDelta(text)]


def test_markup_given_back_as_content_is_released_as_soon_as_it_fails() -> None:
    x = ToolCallExtractor(HERMES)
    assert x.feed("Hi <tool_call>") == [ContentDelta("Hi ")]
    assert x.feed("{nope") == [ContentDelta("<tool_call>{nope")]
    assert x.feed(" <tool_call>") == [ContentDelta(" <tool_call>")]  # the rest of the reply is content
    assert x.finish() == []


# llama3's calls may open with a bare ``{``: a reply is a call only once its object has the call's shape
# (``{"name": ..., "parameters"/"arguments": ...}``); any other JSON answer is content (issue 31 §3).
JSON_ANSWERS = [
    '{"capital": "Paris"}',
    "{}",
    '{"a": 1} is a dict',
    ' {"name": "Paris", "country": "France"}',
    '{"name": "Paris"}',
    '{"type": "city", "name": "Paris", "parameters": {}}',
    '{"parameters": {"a": 1}, "name": 3}',
    '{"name": "f", "parameters": 5}',
    "{not json at all",
    '{"name": "f", "param',  # the reply ended before it had the call's shape
]


@pytest.mark.parametrize("text", JSON_ANSWERS)
def test_llama3_a_json_answer_is_content(text: str) -> None:
    assert assert_split_invariant(LLAMA3, text) == [ContentDelta(text)]


def test_llama3_content_opening_with_a_brace_streams_from_its_first_key() -> None:
    x = ToolCallExtractor(LLAMA3)
    assert x.feed('{"capital": ') == []  # the first key is known once its value starts
    assert x.feed('"Pa') == [ContentDelta('{"capital": "Pa')]
    assert x.feed('ris"}') == [ContentDelta('ris"}')]
    assert x.finish() == []


def test_llama3_a_bare_call_is_announced_once_it_has_the_calls_shape() -> None:
    x = ToolCallExtractor(LLAMA3)
    assert x.feed('{"name": "now", ') == []  # a name alone is not yet a call
    assert x.feed('"parameters": {"z') == [ToolCallStarted(0, "now"), ToolArgumentsDelta(0, '{"z')]
    args_first = '{"parameters": {"a": 1}, "name": "f"}'
    assert calls(assert_split_invariant(LLAMA3, args_first)) == [("f", '{"a": 1}')]
    # A truncated reply cut inside a call that has its shape keeps it; cut before, it is content.
    assert extract(LLAMA3, ['{"name": "f", "parameters": {"a'], truncated=True) == [
        ToolCallStarted(0, "f"),
        ToolArgumentsDelta(0, '{"a'),
    ]
    assert extract(LLAMA3, ['{"name": "f", "par'], truncated=True) == [ContentDelta('{"name": "f", "par')]


def test_the_error_offset_is_the_offending_character() -> None:
    text = '<tool_call>{"name": "f", "arguments": {"a": 12]}}</tool_call>'
    [*_, invalid] = extract(HERMES, [text])
    assert isinstance(invalid, ToolCallInvalid) and text[invalid.offset] == "]"


def test_a_reply_cut_by_max_tokens_keeps_its_calls_as_they_stand() -> None:
    text = 'ok <tool_call>{"name": "f", "arguments": {"city": "Par'
    events = extract(HERMES, [text], truncated=True)
    assert content(events) == "ok " and calls(events) == [("f", '{"city": "Par')]
    assert not any(isinstance(e, (ToolCallEnded, ToolCallInvalid)) for e in events)
    assert extract(HERMES, ['<tool_call>{"na'], truncated=True) == []  # cut before its name: nothing
    for pieces in cuttings(text):
        assert extract(HERMES, pieces, truncated=True) == events


def test_after_an_invalid_call_input_is_dropped() -> None:
    x = ToolCallExtractor(HERMES)
    [started, invalid] = x.feed('<tool_call>{"name": "f", "arguments": ]')
    assert started == ToolCallStarted(0, "f") and isinstance(invalid, ToolCallInvalid)
    assert x.feed("more <tool_call>") == [] and x.finish() == []


# -- rule 5: one call only --------------------------------------------------------------------------------------


def test_without_parallel_calls_the_first_complete_call_ends_it() -> None:
    text = hermes("f", '{"a": 1}') + hermes("g", "{}")
    events = assert_split_invariant(HERMES, text, parallel=False)
    assert calls(events) == [("f", '{"a": 1}')] and events[-1] == ToolCallEnded(0)
    x = ToolCallExtractor(HERMES, parallel=False)
    x.feed(text[:60])
    assert x.done and x.calls == 1 and x.feed("anything") == []


# -- the end rule -------------------------------------------------------------------------------------------------


def test_finish_twice_adds_nothing_and_feed_after_it_raises() -> None:
    x = ToolCallExtractor(HERMES)
    x.feed("Hi <tool")
    assert x.finish() == [ContentDelta("<tool")]
    assert x.finish() == []
    with pytest.raises(UseAfterFinishError):
        x.feed("x")


# -- the real tokenizers' deltas, cut at every token ---------------------------------------------------------------


def token_deltas(tokenizer_name: str, ids: list[int], *, specials: bool) -> list[str]:
    detok = Detokenizer(load_tokenizer(tokenizer_name), skip_special_tokens=not specials)
    return [detok.feed(i) for i in ids] + [detok.finish()]


def assert_token_cuts(fmt: ToolCallFormat, deltas: list[str], seed: int = 0) -> list[ToolCallEvent]:
    whole = extract(fmt, ["".join(deltas)])
    assert extract(fmt, deltas) == whole  # one token at a time
    for k in range(len(deltas) + 1):  # every two-piece cut at a token boundary
        assert extract(fmt, ["".join(deltas[:k]), "".join(deltas[k:])]) == whole
    rng = random.Random(seed)
    for _ in range(20):  # an engine's multi-token steps
        assert extract(fmt, ["".join(step) for step in random_steps(deltas, rng, most=5)]) == whole
    return whole


ARGUMENTS = [
    '{"city": "Paris"}',
    '{"q": "東京タワー 🗼🙂", "emoji": "👩‍💻", "deva": "नमस्ते"}',
    '{"escaped": "\\u00e9\\ud83d\\ude00 \\"quoted\\" \\\\ \\n", "n": -1.5e3}',
    '{"nested": {"a": [{"b": null}, true, false, 0], "s": "}{"}}',
    "{}",
]


@pytest.mark.parametrize("arguments", ARGUMENTS)
def test_hermes_on_smollm2s_deltas_at_every_token(arguments: str) -> None:
    tok = load_tokenizer("smollm2")
    text = "Checking. " + hermes("get_weather", arguments) + "\n" + hermes("get_time", "{}")
    events = assert_token_cuts(HERMES, token_deltas("smollm2", tok.encode(text), specials=False))
    assert calls(events) == [("get_weather", arguments), ("get_time", "{}")]
    assert json.loads(calls(events)[0][1]) == json.loads(arguments)


@pytest.mark.parametrize("arguments", ARGUMENTS)
def test_llama3_json_on_smollm2s_deltas_at_every_token(arguments: str) -> None:
    # No Llama 3 tokenizer is available offline: SmolLM2's byte-level BPE carries the same text (its
    # vocabulary has no <|python_tag|> token, so the tag arrives as ordinary text pieces).
    tok = load_tokenizer("smollm2")
    text = f'<|python_tag|>{{"name": "f", "parameters": {arguments}}}; {{"name": "g", "parameters": {{}}}}'
    events = assert_token_cuts(LLAMA3, token_deltas("smollm2", tok.encode(text), specials=False))
    assert calls(events) == [("f", arguments), ("g", "{}")]


@pytest.mark.parametrize("name", ["mistral-v3", "tekken"])
@pytest.mark.parametrize("arguments", ARGUMENTS)
def test_mistral_on_its_own_tokenizers_deltas_at_every_token(name: str, arguments: str) -> None:
    tok = load_tokenizer(name)
    tool_calls_id = 5 if name == "mistral-v3" else 9  # [TOOL_CALLS], a control token: kept by the decoder
    assert tok.decode([tool_calls_id], skip_special_tokens=False) == "[TOOL_CALLS]"
    body = f'[{{"name": "get_weather", "arguments": {arguments}}}, {{"name": "now", "arguments": {{}}}}]'
    ids = [*tok.encode("Sure."), tool_calls_id, *tok.encode(body)]
    deltas = token_deltas(name, ids, specials=True)
    assert "".join(deltas) == tok.decode(ids, skip_special_tokens=False)
    events = assert_token_cuts(MISTRAL, deltas)
    [(first, args), second] = calls(events)
    assert first == "get_weather" and json.loads(args) == json.loads(arguments) and second == ("now", "{}")
    assert args in "".join(deltas)  # the model's text, whatever spacing the tokenizer gave it


# -- hypothesis: random arguments in every format ------------------------------------------------------------------

TEXT = st.text(
    st.sampled_from([*'aZ9 _-"\\/\n\t{}[]:,', "é", "東", "京", "🗼", "\u200d", "\u0000", "\u2028", "\ud7ff"]),
    max_size=12,
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=12,
)
OBJECTS = st.dictionaries(TEXT, VALUES, max_size=4)
NAMES = st.from_regex(r"[A-Za-z0-9_-]{1,20}", fullmatch=True)


def dump(value: object, style: int) -> str:
    return [
        lambda v: json.dumps(v),
        lambda v: json.dumps(v, ensure_ascii=False),
        lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":")),
        lambda v: json.dumps(v, indent=2),
    ][style](value)


def reply(fmt: ToolCallFormat, made: list[tuple[str, str]], before: str) -> str:
    if fmt is HERMES:
        return before + "\n".join(hermes(n, a) for n, a in made)
    if fmt is LLAMA3:
        return "<|python_tag|>" + "; ".join(f'{{"name": "{n}", "parameters": {a}}}' for n, a in made)
    return before + "[TOOL_CALLS][" + ", ".join(f'{{"name": "{n}", "arguments": {a}}}' for n, a in made) + "]"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fmt=st.sampled_from([HERMES, LLAMA3, MISTRAL]),
    made=st.lists(st.tuples(NAMES, OBJECTS, st.integers(0, 3)), min_size=1, max_size=3),
    before=st.sampled_from(["", "Sure, ", "emoji 🙂 then "]),
    rng=st.randoms(use_true_random=False),
)
def test_any_arguments_come_out_exactly_at_any_cut(
    fmt: ToolCallFormat, made: list[tuple[str, dict[str, Any], int]], before: str, rng: random.Random
) -> None:
    written = [(name, dump(value, style)) for name, value, style in made]
    text = reply(fmt, written, before)
    whole = extract(fmt, [text])
    assert calls(whole) == written  # the arguments are the model's text, byte for byte
    assert [json.loads(a) for _, a in calls(whole)] == [v for _, v, _ in made]
    assert content(whole) == (before if fmt is not LLAMA3 else "")
    for _ in range(5):
        assert extract(fmt, random_cut(text, rng, most=12)) == whole


# -- fuzz: any text is events or one ToolCallInvalid, never another exception, the same at every cut ---------------

PIECES = st.sampled_from(
    ["<tool_call>", "</tool_call>", "<tool_", "[TOOL_CALLS]", "<|python_tag|>", '{"name": "f"', '"arguments"',
     '"parameters"', "{", "}", "[", "]", '"', ":", ",", ";", " ", "\n", "a", "1", "é", "🙂", "\\", "null",
     # whole calls and their halves, so that well-formed ones come up often too
     '<tool_call>{"name": "f", "arguments": {', '"x": [1, {"y": "}"}]', '}}</tool_call>', '{"name": "g", "parameters": {}}',
     '[TOOL_CALLS][{"name": "h", "arguments": {', "}}]", ', "name": "late"}', '"arguments": {}'],
)  # fmt: skip


def well_formed(events: list[ToolCallEvent]) -> None:
    announced: set[int] = set()
    for k, e in enumerate(events):
        if isinstance(e, ToolCallStarted):
            assert e.index == len(announced)
            announced.add(e.index)
        elif isinstance(e, (ToolArgumentsDelta, ToolCallEnded)):
            assert e.index in announced
        elif isinstance(e, ToolCallInvalid):
            assert k == len(events) - 1
            assert announced  # markup that breaks before any call is content, never an error (issue 31)


@settings(max_examples=300, deadline=None)
@given(
    fmt=st.sampled_from([HERMES, LLAMA3, MISTRAL]),
    text=st.lists(PIECES, max_size=30).map("".join),
    truncated=st.booleans(),
    parallel=st.booleans(),
    rng=st.randoms(use_true_random=False),
)
def test_fuzz_any_text_gives_well_formed_events_the_same_at_every_cut(
    fmt: ToolCallFormat, text: str, truncated: bool, parallel: bool, rng: random.Random
) -> None:
    whole = extract(fmt, [text], truncated=truncated, parallel=parallel)
    well_formed(whole)
    for _ in range(4):
        assert extract(fmt, random_cut(text, rng, most=10), truncated=truncated, parallel=parallel) == whole


def test_text_after_a_mistral_array_is_text_whether_or_not_it_came_with_the_array() -> None:
    """Found by the fuzz test: the array's closing ``]`` and the text after it in one piece fed the text to the
    JSON parser ("unexpected text after the JSON value"), where a cut after the ``]`` made it text again."""
    text = '[TOOL_CALLS][{"name": "h", "arguments": {}}]<tool_call> and more'
    whole = extract(MISTRAL, [text])
    assert calls(whole) == [("h", "{}")]
    assert isinstance(whole[-1], ContentDelta) and whole[-1].text == "<tool_call> and more"
    for pieces in cuttings(text):
        assert extract(MISTRAL, pieces) == whole, pieces

"""``ReasoningSplitter``: each rule of ``_reasoning`` against a one-shot oracle, the split contract at every cut
(characters, hypothesis, and the real tokenizers' deltas at every token), the hold-back bound, the formats and
where a reply starts."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _cuts import cuttings, random_cut, random_steps
from tokenrelay import Detokenizer, load_tokenizer
from tokenrelay._errors import UseAfterFinishError
from tokenrelay._reasoning import (
    REASONING_FORMATS,
    ContentDelta,
    ReasoningDelta,
    ReasoningEvent,
    ReasoningFormat,
    ReasoningSplitter,
    ReplyStart,
    join_reasoning,
    reasoning_format_for_template,
    reply_start,
)
from tokenrelay._tool_calls import FORMATS, ToolCallExtractor, ToolCallStarted
from tokenrelay.tokenizers.base import TokenizerBase

QWEN3, GLM45, MISTRAL = REASONING_FORMATS["qwen3"], REASONING_FORMATS["glm45"], REASONING_FORMATS["mistral"]
STARTS: tuple[ReplyStart, ...] = ("tag", "reasoning", "answer")
WS = " \t\r\n"


def split(
    fmt: ReasoningFormat, pieces: Sequence[str], start: ReplyStart | None = None
) -> tuple[list[ReasoningEvent], bool]:
    x = ReasoningSplitter(fmt, start=start)
    events: list[ReasoningEvent] = []
    for piece in pieces:
        events += x.feed(piece)
        # Rule 1 on every split: only a proper prefix of a tag is ever held.
        assert fmt.opening.startswith(x.held) or fmt.closing.startswith(x.held)
        assert len(x.held) < max(len(fmt.opening), len(fmt.closing))
    events += x.finish()
    assert x.held == ""
    return join_reasoning(events), x.in_reasoning


def oracle(fmt: ReasoningFormat, text: str, start: ReplyStart) -> tuple[list[ReasoningEvent], bool]:
    """The rules read off the whole text at once, with ``str.partition``."""
    if start == "answer":
        answer = text.lstrip(WS)
        return ([ContentDelta(answer)] if answer else []), False
    rest = text.lstrip(WS)
    inside = start == "reasoning"
    if rest.startswith(fmt.opening):
        rest, inside = rest[len(fmt.opening) :], True
    if not inside:
        return ([ContentDelta(rest)] if rest else []), False
    reasoning, closing, answer = rest.partition(fmt.closing)
    reasoning, answer = reasoning.lstrip(WS), answer.lstrip(WS)
    events: list[ReasoningEvent] = [ReasoningDelta(reasoning)] if reasoning else []
    events += [ContentDelta(answer)] if answer else []
    return events, not closing


def texts(events: Sequence[ReasoningEvent]) -> tuple[str, str]:
    """(reasoning, answer) joined."""
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    return reasoning, "".join(e.text for e in events if isinstance(e, ContentDelta))


def assert_split_invariant(fmt: ReasoningFormat, text: str, start: ReplyStart) -> list[ReasoningEvent]:
    whole = split(fmt, [text], start)
    assert whole == oracle(fmt, text, start)
    for pieces in cuttings(text, random_cuts=30):
        assert split(fmt, pieces, start) == whole, pieces
    return whole[0]


# Emoji (a ZWJ sequence, a flag), Devanagari with its combining signs, and CJK in both parts; partial tags,
# a second opening tag, and a tool call inside the reasoning.
SAMPLES = [
    "<think>\nThe user greets me 👋🏽 in Hindi: नमस्ते दुनिया.\n</think>\n\nनमस्ते! 👩‍👩‍👧 🇮🇳",
    "Okay, 東京 🗼 first </thi then </think>\n\nAnswer: <think> is answer text now </think>",
    "<think></think>Just the answer 🙂",
    "<think>\nstill thinking when cut: क्षत्रिय </th",
    'Let me call it: <tool_call>{"name": "f"}</tool_call> hmm</think>Done.',
    "no tags at all, 🙂 नमस्ते",
    "  \n<thinking> is not the tag </think> but this is",
    "<think",
    "",
    "</think>",
]


@pytest.mark.parametrize("start", STARTS)
@pytest.mark.parametrize("text", SAMPLES, ids=range(len(SAMPLES)))
def test_every_cut_gives_the_one_shot_split(text: str, start: ReplyStart) -> None:
    assert_split_invariant(QWEN3, text, start)
    assert_split_invariant(MISTRAL, text.replace("<think>", "[THINK]").replace("</think>", "[/THINK]"), start)


def test_a_think_reply_splits_into_reasoning_then_answer() -> None:
    events = assert_split_invariant(QWEN3, SAMPLES[0], "tag")
    assert events == [
        ReasoningDelta("The user greets me 👋🏽 in Hindi: नमस्ते दुनिया.\n"),
        ContentDelta("नमस्ते! 👩‍👩‍👧 🇮🇳"),
    ]


# -- rule 1: hold back only a real partial tag ------------------------------------------------------------------


def test_a_tag_cut_anywhere_in_a_delta_is_found() -> None:
    x = ReasoningSplitter(QWEN3)
    assert x.feed("abc</th") == [ReasoningDelta("abc")]  # SGLang's miss: the buffer is not all tag
    assert x.held == "</th"
    assert x.feed("ink>") == []
    assert x.feed("Hi") == [ContentDelta("Hi")]


def test_text_that_is_not_a_partial_tag_goes_out_at_once() -> None:
    x = ReasoningSplitter(QWEN3)
    assert x.feed("a < b, </b> and </") == [ReasoningDelta("a < b, </b> and ")]
    assert x.held == "</"
    assert x.feed("tag>") == [ReasoningDelta("</tag>")]  # not the tag after all: all of it, at once
    assert x.held == ""
    y = ReasoningSplitter(GLM45)
    assert y.feed("<th") == [] and y.held == "<th"
    assert y.feed("ree") == [ContentDelta("<three")]


def test_the_held_tail_is_always_the_longest_real_partial_tag() -> None:
    for fmt, text in ((QWEN3, SAMPLES[1]), (QWEN3, "<<think>a<</</t</think>b"), (GLM45, "<th<think>x</t</")):
        x = ReasoningSplitter(fmt)
        seen = ""
        for char in text:
            x.feed(char)
            seen += char
            tag = fmt.closing if x.in_reasoning else fmt.opening
            assert len(x.held) <= len(tag) - 1 and seen.endswith(x.held) and tag.startswith(x.held)
            if x.in_reasoning:  # no longer tail of what was fed is a prefix of the tag
                longest = max((k for k in range(len(tag)) if seen.endswith(tag[:k])), default=0)
                assert len(x.held) == longest


# -- rule 2: the opening tag only at the start; after the closing one, all is answer --------------------------


def test_a_second_think_in_the_answer_is_answer_text() -> None:
    events = assert_split_invariant(QWEN3, "<think>a</think>b <think>c</think> d", "tag")
    assert events == [ReasoningDelta("a"), ContentDelta("b <think>c</think> d")]


def test_a_reply_started_inside_reasoning_has_only_the_closing_tag() -> None:
    events = assert_split_invariant(QWEN3, "Hmm, 2+2.\n</think>\n\n4", "reasoning")
    assert events == [ReasoningDelta("Hmm, 2+2.\n"), ContentDelta("4")]
    # The model may write the opening tag again (older Qwen3 templates): it is markup, not reasoning.
    assert split(QWEN3, ["<think>\nHmm</think>4"], "reasoning") == split(QWEN3, ["Hmm</think>4"], "reasoning")


def test_with_tag_start_a_reply_without_the_tag_is_all_answer() -> None:
    assert assert_split_invariant(GLM45, "Plain answer </think> here", "tag") == [
        ContentDelta("Plain answer </think> here")
    ]


def test_with_answer_start_nothing_is_reasoning() -> None:
    events = assert_split_invariant(QWEN3, "\n\n<think>a</think>b", "answer")
    assert events == [ContentDelta("<think>a</think>b")]


# -- rule 4: a boundary delta is two events ---------------------------------------------------------------------


def test_a_boundary_delta_is_a_reasoning_delta_then_an_answer_delta() -> None:
    x = ReasoningSplitter(QWEN3, start="tag")
    assert x.feed("<think>I think</think>\n\nThe answer") == [
        ReasoningDelta("I think"),
        ContentDelta("The answer"),
    ]
    y = ReasoningSplitter(QWEN3)
    y.feed("abc</thi")
    assert y.feed("nk>\nxyz") == [ContentDelta("xyz")]  # the held tail was the tag: nothing of it is shown


# -- rule 5: a reply that ends inside reasoning -------------------------------------------------------------------


def test_a_reply_cut_inside_reasoning_ends_as_reasoning() -> None:
    x = ReasoningSplitter(QWEN3, start="tag")
    assert x.feed("<think>long thought </thi") == [ReasoningDelta("long thought ")]
    assert x.in_reasoning
    assert x.finish() == [ReasoningDelta("</thi")]  # the partial tag was reasoning text after all
    assert x.in_reasoning  # the caller reports the finish reason on the reasoning
    y = ReasoningSplitter(QWEN3, start="tag")
    y.feed("<think>done</think>answer")
    assert y.finish() == [] and not y.in_reasoning


def test_an_empty_reply_started_inside_reasoning_ends_there() -> None:
    assert split(QWEN3, [], "reasoning") == ([], True)
    assert split(QWEN3, [" \n"], "tag") == ([], False)


# -- rule 6: a tool call inside reasoning is reasoning ------------------------------------------------------------


def test_the_tool_call_extractor_sees_only_the_answer() -> None:
    call = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    text = f"<think>I could write {call} but wait</think>\n{call}"
    splitter, extractor = ReasoningSplitter(QWEN3), ToolCallExtractor(FORMATS["hermes"])
    reasoning, started = "", []
    for piece in [*random_cut(text, random.Random(3), most=20), None]:
        for event in splitter.feed(piece) if piece is not None else splitter.finish():
            if isinstance(event, ReasoningDelta):
                reasoning += event.text
            else:
                started += [e for e in extractor.feed(event.text) if isinstance(e, ToolCallStarted)]
    started += [e for e in extractor.finish() if isinstance(e, ToolCallStarted)]
    assert reasoning == f"I could write {call} but wait"  # the call in the reasoning stays reasoning
    assert started == [ToolCallStarted(0, "f")]  # only the answer's call is a call


# -- the end rule --------------------------------------------------------------------------------------------------


def test_finish_twice_adds_nothing_and_feed_after_it_raises() -> None:
    x = ReasoningSplitter(QWEN3)
    x.feed("a</th")
    assert x.finish() == [ReasoningDelta("</th")]
    assert x.finish() == []
    with pytest.raises(UseAfterFinishError):
        x.feed("ink>")


def test_a_bad_start_is_refused() -> None:
    with pytest.raises(ValueError, match="start must be"):
        ReasoningSplitter(QWEN3, start="thinking")  # type: ignore[arg-type]


# -- the formats and where a reply starts --------------------------------------------------------------------------


def test_formats_are_found_from_the_chat_template() -> None:
    assert reasoning_format_for_template(None) is None
    smollm2 = load_tokenizer("smollm2")
    assert isinstance(smollm2, TokenizerBase) and smollm2.chat_template  # the GGUF's own template
    assert reasoning_format_for_template(smollm2.chat_template) is None  # SmolLM2 does not reason
    # Shapes of real templates' reasoning parts (Qwen3, DeepSeek-R1, GLM-4.5, Magistral).
    qwen3 = "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    assert reasoning_format_for_template(qwen3) is QWEN3
    deepseek = "{{'<｜Assistant｜>'}}{% set content = content.split('</think>')[-1] %}<think>\\n"
    assert reasoning_format_for_template(deepseek) is REASONING_FORMATS["deepseek_r1"]
    assert reasoning_format_for_template("[gMASK]<sop>{{ '<think></think>' }}") is GLM45
    assert reasoning_format_for_template("[SYSTEM_PROMPT]... [THINK]...[/THINK] ...") is MISTRAL


def test_where_a_reply_starts_is_read_from_the_rendered_prompt() -> None:
    prompt = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert reply_start(QWEN3, prompt) == "reasoning"  # the format's own default
    assert reply_start(GLM45, prompt) == "tag"
    assert reply_start(GLM45, prompt + "<think>\n") == "reasoning"  # the template opened the tag
    assert reply_start(QWEN3, prompt + "<think>\n\n</think>\n\n") == "answer"  # enable_thinking=False
    assert reply_start(MISTRAL, "[INST]Hi[/INST][THINK]") == "reasoning"


def test_the_format_table_uses_vllms_parser_names() -> None:
    assert {"deepseek_r1", "qwen3", "mistral"} <= set(REASONING_FORMATS)
    assert all(name == fmt.name for name, fmt in REASONING_FORMATS.items())
    assert REASONING_FORMATS["deepseek_r1"].start == "reasoning" and MISTRAL.needs_specials


# -- the real tokenizers' deltas, cut at every token ---------------------------------------------------------------


def token_deltas(name: str, ids: list[int]) -> list[str]:
    detok = Detokenizer(load_tokenizer(name), skip_special_tokens=False)
    return [detok.feed(i) for i in ids] + [detok.finish()]


def assert_token_cuts(fmt: ReasoningFormat, deltas: list[str], start: ReplyStart) -> list[ReasoningEvent]:
    whole = split(fmt, ["".join(deltas)], start)
    assert whole == oracle(fmt, "".join(deltas), start)
    assert split(fmt, deltas, start) == whole  # one token at a time
    for k in range(len(deltas) + 1):  # every two-piece cut at a token boundary
        assert split(fmt, ["".join(deltas[:k]), "".join(deltas[k:])], start) == whole
    rng = random.Random(len(deltas))
    for _ in range(20):  # an engine's multi-token steps
        assert split(fmt, ["".join(step) for step in random_steps(deltas, rng, most=5)], start) == whole
    return whole[0]


REPLIES = [
    ("Die Frage ist auf Hindi: नमस्ते 🙏🏽. Also antworte ich so.", "नमस्ते! 😊 आप कैसे हैं? 👩‍💻"),
    ("東京タワーの高さ? 333 m, 🗼. Use </b> not </thin.", "333 m 🗼 <think>kept</think>"),
]


@pytest.mark.parametrize("name", ["smollm2", "mistral-v3", "tekken"])
@pytest.mark.parametrize(("reasoning", "answer"), REPLIES)
@pytest.mark.parametrize("fmt", [QWEN3, MISTRAL], ids=["think", "THINK"])
def test_real_tokenizers_deltas_at_every_token(
    name: str, reasoning: str, answer: str, fmt: ReasoningFormat
) -> None:
    # None of these vocabularies has the tags as one token: each is cut into several (checked below).
    tok = load_tokenizer(name)
    for start, text in (
        ("tag", f"{fmt.opening}\n{reasoning}\n{fmt.closing}\n\n{answer}"),
        ("reasoning", f"{reasoning}{fmt.closing}{answer}"),
    ):
        ids = tok.encode(text)
        assert len(tok.encode(fmt.closing)) > 1
        deltas = token_deltas(name, ids)
        assert "".join(deltas) == tok.decode(ids, skip_special_tokens=False)
        got = texts(assert_token_cuts(fmt, deltas, start))  # type: ignore[arg-type]
        # SentencePiece may drop the reply's leading space; the parts are the texts written.
        assert got == (reasoning + ("\n" if start == "tag" else ""), answer)


CORPUS = (Path(__file__).resolve().parent / "data" / "multilingual.txt").read_bytes().decode("utf-8")


@pytest.mark.parametrize("name", ["smollm2", "mistral-v3", "tekken"])
def test_the_corpus_as_reasoning_and_answer_at_every_token(name: str) -> None:
    # The text that breaks naive streaming (scripts, emoji, CRLF), cut in two around the tags.
    half = len(CORPUS) // 2
    text = f"<think>{CORPUS[:half]}</think>{CORPUS[half:]}"
    tok = load_tokenizer(name)
    deltas = token_deltas(name, tok.encode(text))
    whole = split(QWEN3, ["".join(deltas)], "tag")
    assert whole == oracle(QWEN3, "".join(deltas), "tag") and not whole[1]
    assert split(QWEN3, deltas, "tag") == whole
    rng = random.Random(7)
    for _ in range(5):
        assert split(QWEN3, ["".join(step) for step in random_steps(deltas, rng, most=8)], "tag") == whole
    if name == "smollm2":  # byte-level BPE gives the text back exactly: the parts are the corpus halves
        assert "".join(deltas) == text
        assert texts(whole[0]) == (CORPUS[:half].lstrip(WS), CORPUS[half:].lstrip(WS))


# -- hypothesis: any text, any split ---------------------------------------------------------------------------------

PIECES = st.sampled_from(
    ["<think>", "</think>", "<th", "ink>", "</", "<", "/", ">", "think", "[THINK]", "[/THINK]", "[/TH", "INK]",
     "\n", " ", "a", "नमस्ते", "क्षि", "🙂", "👩‍💻", "🇮🇳", "東京", "<tool_call>"],
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(
    fmt=st.sampled_from([QWEN3, GLM45, MISTRAL]),
    text=st.lists(PIECES, max_size=25).map("".join),
    start=st.sampled_from(STARTS),
    rng=st.randoms(use_true_random=False),
)
def test_any_text_at_any_split_equals_the_one_shot_split(
    fmt: ReasoningFormat, text: str, start: ReplyStart, rng: random.Random
) -> None:
    whole = split(fmt, [text], start)
    assert whole == oracle(fmt, text, start)
    for _ in range(5):
        assert split(fmt, random_cut(text, rng, most=12), start) == whole

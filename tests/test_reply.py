"""The reply-event pipeline (``_reply``): TextStream's events through the hold-backs as reply events.

The contract: for any split of the engine's ids, the joined text of each kind, the calls and the end are the
same, the ids of all events joined are the engine's ids, and no event is empty. Tested through SmolLM2's real
byte-level BPE at every cut of the ids, with a tool call carrying non-ASCII arguments.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import pytest

from _cuts import random_steps
from tokenrelay import load_tokenizer
from tokenrelay._errors import ToolCallError, UseAfterFinishError
from tokenrelay._reasoning import REASONING_FORMATS, ReasoningSplitter
from tokenrelay._reply import (
    CallArguments,
    CallEnded,
    CallStarted,
    ReasoningDelta,
    ReplyCollector,
    ReplyEnded,
    ReplyEvent,
    ReplyFailed,
)
from tokenrelay._reply_pipeline import ReplyPipeline
from tokenrelay._stream import Finished, TextDelta, TextStream, Usage
from tokenrelay._tool_call_events import HERMES

TOK = load_tokenizer("smollm2")
REPLY = (
    "Let me look: 🌦 विश्व.\n"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich", "unit": "°C"}}\n</tool_call>'
)


def _ids() -> list[int]:
    return [*TOK.encode(REPLY), *sorted(TOK.eos_token_ids)[:1]]


def _counter() -> object:
    n = itertools.count()
    return lambda: f"call_{next(n)}"


def run(
    steps: Sequence[Sequence[int]], *, tools: bool = True, max_tokens: int | None = None
) -> list[ReplyEvent]:
    stream = TextStream(TOK, max_tokens=max_tokens)
    pipeline = ReplyPipeline(tools=HERMES if tools else None, new_call_id=_counter())  # type: ignore[arg-type]
    out: list[ReplyEvent] = []
    finished: Finished | None = None
    for step in steps:
        for event in stream.feed(step):
            if isinstance(event, TextDelta):
                out.extend(pipeline.feed(event))
            else:
                finished = event
        if finished is not None:
            break
    if finished is None:
        events = stream.finish()
        finished = events[-1]  # type: ignore[assignment]
        for e in events[:-1]:
            assert isinstance(e, TextDelta)
            out.extend(pipeline.feed(e))
    assert isinstance(finished, Finished)
    out.extend(pipeline.finish(finished))
    return out


def summary(events: Sequence[ReplyEvent]) -> tuple[object, ...]:
    text = "".join(e.text for e in events if type(e) is TextDelta)
    calls = [(e.index, e.id, e.name) for e in events if isinstance(e, CallStarted)]
    args = "".join(e.text for e in events if isinstance(e, CallArguments))
    ended = [e.index for e in events if isinstance(e, CallEnded)]
    end = events[-1]
    assert isinstance(end, ReplyEnded)
    return text, calls, args, ended, end.reason, end.usage


def all_ids(events: Sequence[ReplyEvent]) -> list[int]:
    return [i for e in events if not isinstance(e, ReplyFailed) for i in e.token_ids]


def test_a_reply_with_a_call_is_the_same_at_every_cut_of_its_ids() -> None:
    ids = _ids()
    whole = run([ids])
    text, calls, args, ended, reason, usage = summary(whole)
    assert text == "Let me look: 🌦 विश्व.\n"
    assert calls == [(0, "call_0", "get_weather")]
    assert args == '{"city": "Zürich", "unit": "°C"}'
    assert ended == [0] and reason == "tool_calls" and usage == Usage(0, len(ids))
    for cut in range(1, len(ids)):
        events = run([ids[:cut], ids[cut:]])
        assert summary(events) == summary(whole), cut
        assert all_ids(events) == ids
    rng = random.Random(7)
    for _ in range(30):
        events = run(random_steps(ids, rng))
        assert summary(events) == summary(whole)
        assert all_ids(events) == ids


def test_one_token_at_a_time_no_event_is_empty_and_ids_ride_on_the_next_event() -> None:
    ids = _ids()
    events = run([[i] for i in ids])
    assert all_ids(events) == ids
    for e in events:
        if isinstance(e, TextDelta | CallArguments):
            assert e.text
    # the markup's ids carried no text of their own: they ride on the call's first event
    started = next(e for e in events if isinstance(e, CallStarted))
    assert started.token_ids


def test_without_hold_backs_a_delta_passes_through_unchanged() -> None:
    pipeline = ReplyPipeline()
    delta = TextDelta("héllo", (1, 2))
    assert pipeline.feed(delta)[0] is delta
    (end,) = pipeline.finish(Finished("length", Usage(3, 2), (5,)))
    assert isinstance(end, ReplyEnded) and end.reason == "length" and end.token_ids == (5,)


def test_a_cut_reply_ends_with_length_and_its_calls_as_they_stand() -> None:
    ids = _ids()
    n = len(TOK.encode(REPLY[: REPLY.index("Zürich") + 3]))
    events = run([ids], max_tokens=n)
    end = events[-1]
    assert isinstance(end, ReplyEnded) and end.reason == "length"
    assert [e.name for e in events if isinstance(e, CallStarted)] == ["get_weather"]


def test_a_malformed_call_after_its_name_raises_tool_call_error() -> None:
    pipeline = ReplyPipeline(tools=HERMES, new_call_id=lambda: "call_x")
    (started,) = pipeline.feed(TextDelta('<tool_call>{"name": "f", "arguments": {"a": 1', (1,)))[:1]
    assert isinstance(started, CallStarted) and started.name == "f"
    with pytest.raises(ToolCallError):
        pipeline.feed(TextDelta("]}</tool_call>", (2,)))


def test_reasoning_becomes_reasoning_events_that_count_their_tokens_and_calls_come_from_the_answer() -> None:
    text = "<think>\nहम्म 🤔 <tool_call>not a call</tool_call></think>\n\n" + REPLY
    ids = [*TOK.encode(text), *sorted(TOK.eos_token_ids)[:1]]

    def run_reasoning(steps: Sequence[Sequence[int]]) -> list[ReplyEvent]:
        stream = TextStream(TOK)
        splitter = ReasoningSplitter(REASONING_FORMATS["qwen3"])
        pipeline = ReplyPipeline(tools=HERMES, reasoning=splitter, new_call_id=lambda: "call_r")
        out: list[ReplyEvent] = []
        for step in steps:
            for event in stream.feed(step):
                if isinstance(event, TextDelta):
                    out.extend(pipeline.feed(event))
                else:
                    out.extend(pipeline.finish(event))
        return out

    whole = run_reasoning([ids])
    reasoning = "".join(e.text for e in whole if isinstance(e, ReasoningDelta))
    assert reasoning == "हम्म 🤔 <tool_call>not a call</tool_call>"
    assert summary([e for e in whole if not isinstance(e, ReasoningDelta)])[:3] == (
        "Let me look: 🌦 विश्व.\n",
        [(0, "call_r", "get_weather")],
        '{"city": "Zürich", "unit": "°C"}',
    )
    end = whole[-1]
    assert isinstance(end, ReplyEnded) and end.reason == "tool_calls"
    assert 0 < end.reasoning_tokens == sum(len(e.token_ids) for e in whole if isinstance(e, ReasoningDelta))
    for cut in range(1, len(ids), 3):
        events = run_reasoning([ids[:cut], ids[cut:]])
        assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == reasoning
        assert summary([e for e in events if not isinstance(e, ReasoningDelta)]) == summary(
            [e for e in whole if not isinstance(e, ReasoningDelta)]
        )
        assert all_ids(events) == ids


def test_stop_strings_act_on_the_answer_only_at_every_cut() -> None:
    """A stop string inside reasoning is reasoning text; the first one in the answer ends the reply there,
    names itself, and makes the pipeline done (the engine is stopped); the same for every cut of the ids."""
    text = "<think>\nहम्म 🤔 END? not yet; ✋ here</think>\n\nAnswer: 42 ✋ END and more ✋ END"
    ids = [*TOK.encode(text), *sorted(TOK.eos_token_ids)[:1]]

    def run_stops(steps: Sequence[Sequence[int]]) -> tuple[list[ReplyEvent], bool]:
        stream = TextStream(TOK)
        splitter = ReasoningSplitter(REASONING_FORMATS["qwen3"])
        pipeline = ReplyPipeline(reasoning=splitter, stops=("✋ END", "END?!"))
        out: list[ReplyEvent] = []
        for step in steps:
            for event in stream.feed(step):
                if isinstance(event, TextDelta):
                    out.extend(pipeline.feed(event))
                    if pipeline.done:
                        out.extend(pipeline.finish(Finished("stop", Usage(0, 0))))
                        return out, True
                else:
                    out.extend(pipeline.finish(event))
        return out, False

    def parts(events: Sequence[ReplyEvent]) -> tuple[str, str, object, object]:
        end = events[-1]
        assert isinstance(end, ReplyEnded)
        reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
        return reasoning, "".join(e.text for e in events if type(e) is TextDelta), end.reason, end.matched

    whole, done = run_stops([ids])
    assert done and parts(whole) == ("हम्म 🤔 END? not yet; ✋ here", "Answer: 42 ", "stop", "✋ END")
    for cut in range(1, len(ids)):
        events, done = run_stops([ids[:cut], ids[cut:]])
        assert done and parts(events) == parts(whole), cut
        assert all(e.text for e in events if isinstance(e, TextDelta | ReasoningDelta))  # none empty
    one_by_one, _ = run_stops([[i] for i in ids])
    assert parts(one_by_one) == parts(whole)
    # ids: every id up to the step that completed the stop, in order, none twice
    got = all_ids(one_by_one)
    assert got == ids[: len(got)] and len(got) < len(ids)


def test_a_stop_string_held_at_the_end_is_released_as_answer() -> None:
    pipeline = ReplyPipeline(reasoning=ReasoningSplitter(REASONING_FORMATS["qwen3"]), stops=("STOP",))
    out = [*pipeline.feed(TextDelta("<think>a STOP b</think>x ST", (1, 2)))]
    assert not pipeline.done
    out += pipeline.finish(Finished("length", Usage(0, 2), ()))
    assert "".join(e.text for e in out if type(e) is TextDelta) == "x ST"
    end = out[-1]
    assert isinstance(end, ReplyEnded) and (end.reason, end.matched) == ("length", None)


def test_the_collector_gives_the_whole_reply_and_the_end_rule_holds() -> None:
    events = run([_ids()])
    collector = ReplyCollector()
    for e in events:
        collector.add(e)
    reply = collector.reply()
    assert reply.text == "Let me look: 🌦 विश्व.\n"
    assert [(c.id, c.name, c.arguments) for c in reply.calls] == [
        ("call_0", "get_weather", '{"city": "Zürich", "unit": "°C"}')
    ]
    assert reply.end.reason == "tool_calls" and reply.token_ids == _ids()
    with pytest.raises(UseAfterFinishError):
        collector.add(TextDelta("late", ()))
    pipeline = ReplyPipeline()
    pipeline.finish(Finished("stop", Usage(0, 0)))
    assert pipeline.finish(Finished("stop", Usage(0, 0))) == []
    with pytest.raises(UseAfterFinishError):
        pipeline.feed(TextDelta("x", ()))

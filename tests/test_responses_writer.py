"""The Responses API writer (``wire/_responses``): reply events → typed SSE events, OpenAI's order and shapes.

Every event is validated with the openai SDK's own pydantic types (``ResponseStreamEvent``, strict as its
``_strict_response_validation`` is), and read back with the SDK's SSE decoder. The engine's ids are cut at every
point (SmolLM2's real tokenizer, through ``TextStream`` and the ``ReplyPipeline``): the events' kinds and order,
each item's joined deltas, its ``.done`` text and the final response are the same for every split, and the body
says what the stream's last event says.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Sequence
from typing import Any

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from _cuts import random_steps
from tokenrelay import load_tokenizer
from tokenrelay._errors import EngineError
from tokenrelay._reasoning import REASONING_FORMATS, ReasoningSplitter
from tokenrelay._reply import ReplyCollector, ReplyEvent, ReplyFailed
from tokenrelay._reply_pipeline import ReplyPipeline
from tokenrelay._stream import Finished, TextDelta, TextStream
from tokenrelay._tool_call_events import HERMES
from tokenrelay.wire._responses import ResponsesReplyWriter
from tokenrelay.wire._sse import SSEParser

TOK = load_tokenizer("smollm2")
EVENT = TypeAdapter(ResponseStreamEvent)
REPLY = (
    "<think>\nहम्म 🤔 <tool_call>x</tool_call></think>\n\nLet me look: 🌦 विश्व.\n"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich", "unit": "°C"}}\n</tool_call>'
)


def _ids(text: str = REPLY) -> list[int]:
    return [*TOK.encode(text), *sorted(TOK.eos_token_ids)[:1]]


def events_of(
    steps: Sequence[Sequence[int]], *, max_tokens: int | None = None, reasoning: bool = True
) -> list[ReplyEvent]:
    """The reply events of the ids, in ``steps``: tools in the generic format, reasoning in ``<think>`` tags
    (a reply read with ``reasoning`` starts inside its reasoning, as Qwen3's does)."""
    stream = TextStream(TOK, max_tokens=max_tokens)
    n = itertools.count()
    pipeline = ReplyPipeline(
        tools=HERMES,
        reasoning=ReasoningSplitter(REASONING_FORMATS["qwen3"]) if reasoning else None,
        new_call_id=lambda: f"call_{next(n)}",
    )
    out: list[ReplyEvent] = []
    for step in steps:
        for event in stream.feed(step):
            if isinstance(event, TextDelta):
                out.extend(pipeline.feed(event))
            else:
                out.extend(pipeline.finish(event))
                return out
    for event in stream.finish():
        if isinstance(event, TextDelta):
            out.extend(pipeline.feed(event))
        else:
            assert isinstance(event, Finished)
            out.extend(pipeline.finish(event))
    return out


def write(events: Sequence[ReplyEvent], **options: Any) -> tuple[bytes, ResponsesReplyWriter]:
    writer = ResponsesReplyWriter(id="resp_0123", model="m", created_at=1, **options)
    frames = list(writer.start())
    for event in events:
        frames += writer.write(event)
    return b"".join(frames), writer


def read(stream: bytes) -> list[dict[str, Any]]:
    """Every event, checked: ``event:`` names its type, sequence numbers count from 0, the SDK's types accept
    it (strictly), and no frame holds more than one event."""
    out = []
    for i, event in enumerate(SSEParser().feed(stream)):
        data = json.loads(event.data)
        assert event.event == data["type"]
        assert data["sequence_number"] == i
        EVENT.validate_python(data, strict=True)
        out.append(data)
    assert stream.count(b"\n\n") == len(out)
    return out


def shape(events: list[dict[str, Any]]) -> list[str]:
    """The event types, runs of the same delta type folded into one."""
    return [t for t, _ in itertools.groupby(e["type"] for e in events)]


def test_the_order_and_shapes_of_a_reply_with_reasoning_text_and_a_call() -> None:
    events = read(write(events_of([_ids()]))[0])
    assert shape(events) == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    final = Response.model_validate(events[-1]["response"], strict=True)
    assert final.status == "completed" and final.output_text == "Let me look: 🌦 विश्व.\n"
    reasoning, _message, call = final.output
    assert reasoning.type == "reasoning" and reasoning.content is not None
    assert reasoning.content[0].text == "हम्म 🤔 <tool_call>x</tool_call>"
    assert call.type == "function_call" and call.name == "get_weather" and call.call_id == "call_0"
    assert call.arguments == '{"city": "Zürich", "unit": "°C"}' and call.status == "completed"
    assert final.usage is not None and final.usage.output_tokens == len(_ids())
    assert final.usage.output_tokens_details.reasoning_tokens > 0
    assert [e["output_index"] for e in events if e["type"] == "response.output_item.added"] == [0, 1, 2]
    assert len({e["item"]["id"] for e in events if e["type"] == "response.output_item.done"}) == 3


def _joined(events: list[dict[str, Any]]) -> dict[str, str]:
    joined: dict[str, str] = {}
    for e in events:
        if e["type"].endswith(".delta"):
            joined[e["item_id"]] = joined.get(e["item_id"], "") + e["delta"]
    return joined


def _done(events: list[dict[str, Any]]) -> dict[str, str]:
    done = {}
    for e in events:
        if e["type"] in ("response.output_text.done", "response.reasoning_text.done"):
            done[e["item_id"]] = e["text"]
        elif e["type"] == "response.function_call_arguments.done":
            done[e["item_id"]] = e["arguments"]
    return done


def _without_reasoning_count(response: dict[str, Any]) -> dict[str, Any]:
    usage = {**response["usage"], "output_tokens_details": None}
    return {**response, "usage": usage}


def test_every_cut_of_the_ids_gives_the_same_events_items_and_final_response() -> None:
    ids = _ids()
    whole = read(write(events_of([ids]))[0])
    final = whole[-1]["response"]
    assert _joined(whole) == _done(whole)
    cuts = [[ids[:c], ids[c:]] for c in range(1, len(ids))]
    rng = random.Random(29)
    cuts += [random_steps(ids, rng) for _ in range(20)]
    cuts.append([[i] for i in ids])
    for steps in cuts:
        events = read(write(events_of(steps))[0])
        assert shape(events) == shape(whole)
        assert _joined(events) == _done(events) == _done(whole)
        # All but the count of reasoning tokens, which follows how the engine's steps fell (ReplyPipeline
        # charges a step's ids to its first event: a step that holds the end of reasoning and the start of
        # the answer counts as reasoning).
        assert _without_reasoning_count(events[-1]["response"]) == _without_reasoning_count(final)
        for e in events:  # no markup of the generic tool format reaches a text delta
            if e["type"] == "response.output_text.delta":
                assert "<tool_call>" not in e["delta"] and e["delta"]


def test_the_body_is_the_stream_s_final_response() -> None:
    events = events_of([_ids()])
    stream, writer = write(events)
    collector = ReplyCollector()
    for event in events:
        collector.add(event)
    body = ResponsesReplyWriter(id="resp_0123", model="m", created_at=1).body(collector.reply())
    assert json.loads(body) == read(stream)[-1]["response"] == writer.final
    Response.model_validate_json(body, strict=True)


def test_a_cut_reply_is_incomplete_with_its_open_item_incomplete() -> None:
    ids = _ids("Hello there, a long answer that goes on and on")
    kept: list[dict[str, Any]] = []
    events = read(write(events_of([ids], max_tokens=4, reasoning=False), on_end=kept.append)[0])
    assert events[-1]["type"] == "response.incomplete"
    assert "response.completed" not in [e["type"] for e in events]
    final = Response.model_validate(events[-1]["response"], strict=True)
    assert final.status == "incomplete" and final.incomplete_details is not None
    assert final.incomplete_details.reason == "max_output_tokens"
    assert [item.status for item in final.output] == ["incomplete"]  # type: ignore[union-attr]
    done = [e for e in events if e["type"] == "response.output_item.done"]
    assert done[0]["item"]["status"] == "incomplete"
    assert kept == [events[-1]["response"]]  # the store is handed the response as it ended


def test_a_call_cut_by_length_is_incomplete_and_earlier_items_stay_completed() -> None:
    ids = _ids()
    cut = len(TOK.encode(REPLY[: REPLY.index("Zürich")]))
    events = read(write(events_of([ids], max_tokens=cut))[0])
    final = events[-1]["response"]
    assert events[-1]["type"] == "response.incomplete"
    assert [(i["type"], i["status"]) for i in final["output"]] == [
        ("reasoning", "completed"),
        ("message", "completed"),
        ("function_call", "incomplete"),
    ]


def test_a_failure_is_an_error_event_then_response_failed_and_nothing_is_kept() -> None:
    kept: list[dict[str, Any]] = []
    events = [
        *events_of([_ids("Hi there")], reasoning=False)[:-1],
        ReplyFailed(EngineError("boom", code="engine_failed")),
    ]
    out = read(write(events, on_end=kept.append)[0])
    assert [e["type"] for e in out[-5:]] == [
        "error",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.failed",
    ]
    assert out[-5]["message"] == "boom" and out[-5]["code"] == "engine_failed"
    failed = Response.model_validate(out[-1]["response"], strict=True)
    assert failed.status == "failed" and failed.error is not None and failed.error.code == "server_error"
    assert kept == []


def test_an_empty_reply_still_has_an_answer_item() -> None:
    events = read(write(events_of([_ids("")], reasoning=False))[0])
    final = Response.model_validate(events[-1]["response"], strict=True)
    assert final.status == "completed" and final.output_text == "" and len(final.output) == 1


def test_the_request_s_settings_are_echoed_and_no_done_marker_follows() -> None:
    echo = {
        "instructions": "Be brief.",
        "temperature": 0.0,
        "tool_choice": "required",
        "metadata": {"k": "v"},
    }
    stream, _ = write(events_of([_ids("Hi")], reasoning=False), echo=echo)
    events = read(stream)
    for e in (events[0], events[-1]):
        response = e["response"]
        assert {k: response[k] for k in echo} == echo
    assert b"[DONE]" not in stream


@pytest.mark.parametrize("text", ["line\nbreak", "\r\u2028 \x00", '"quoted" \\ back'])
def test_deltas_with_line_breaks_and_escapes_stay_one_event(text: str) -> None:
    events = read(write([TextDelta(text, (1,)), *events_of([_ids("")], reasoning=False)[-1:]])[0])
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == text

"""The Messages API writer (``wire/_messages``): reply events as Anthropic's stream and body.

Every frame is read back with the SSE parser and validated with the anthropic SDK's own types
(``RawMessageStreamEvent``, ``Message``), its ``event:`` name checked against its ``type``; the SDK's own
accumulator (``accumulate_event``, what ``messages.stream().get_final_message()`` runs) turns the frames into
a message that must equal the body written from the same events. All of it over every cut of the engine's ids
(SmolLM2's real tokenizer), with a tool call carrying non-ASCII arguments and with reasoning.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from typing import Any

import pydantic
import pytest

from _cuts import random_steps
from tokenrelay import load_tokenizer
from tokenrelay._errors import (
    AuthenticationError,
    EngineError,
    InvalidRequestError,
    NotFoundError,
    PayloadTooLargeError,
    RateLimitError,
    TokenRelayError,
    UnavailableError,
)
from tokenrelay._reasoning import REASONING_FORMATS, ReasoningSplitter
from tokenrelay._reply import ReplyCollector, ReplyEvent, ReplyFailed
from tokenrelay._reply_pipeline import ReplyPipeline
from tokenrelay._stream import Finished, TextDelta, TextStream
from tokenrelay._tool_call_events import HERMES
from tokenrelay.wire._messages import PING, MessagesReplyWriter, anthropic_error_body
from tokenrelay.wire._sse import ServerSentEvent, SSEParser

anthropic = pytest.importorskip("anthropic")
from anthropic.lib.streaming._messages import accumulate_event  # noqa: E402
from anthropic.types import Message, RawMessageStreamEvent  # noqa: E402

TOK = load_tokenizer("smollm2")
REPLY = (
    "Let me look: 🌦 विश्व.\n"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich", "unit": "°C"}}\n</tool_call>'
)
THOUGHT = '<think>\nहम्म 🤔 a "quote"\nand a line</think>\n\n'
EVENTS = pydantic.TypeAdapter(RawMessageStreamEvent)


def _ids(text: str) -> list[int]:
    return [*TOK.encode(text), *sorted(TOK.eos_token_ids)[:1]]


def reply_events(
    steps: Sequence[Sequence[int]],
    *,
    tools: bool = True,
    reasoning: bool = False,
    max_tokens: int | None = None,
    stops: Sequence[str] = (),
) -> list[ReplyEvent]:
    stream = TextStream(TOK, max_tokens=max_tokens, stops=list(stops))
    splitter = ReasoningSplitter(REASONING_FORMATS["qwen3"]) if reasoning else None
    counter = iter(range(100))
    pipeline = ReplyPipeline(
        tools=HERMES if tools else None, reasoning=splitter, new_call_id=lambda: f"toolu_{next(counter)}"
    )
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
        *rest, last = stream.finish()
        for e in rest:
            assert isinstance(e, TextDelta)
            out.extend(pipeline.feed(e))
        assert isinstance(last, Finished)
        finished = last
    out.extend(pipeline.finish(finished))
    return out


def written(events: Sequence[ReplyEvent], input_tokens: int = 7) -> tuple[list[ServerSentEvent], bytes]:
    """The frames of ``events`` read back by the SSE parser, and the body of the same events."""
    writer = MessagesReplyWriter(id="msg_1", model="m", input_tokens=input_tokens)
    frames = [*writer.start()]
    collector = ReplyCollector()
    for e in events:
        frames.extend(writer.write(e))
        if not isinstance(e, ReplyFailed):
            collector.add(e)
    for f in frames:  # each frame is one whole SSE event
        assert f.endswith(b"\n\n") and f.count(b"\n\n") == 1
    parser = SSEParser()
    sse = parser.feed(b"".join(frames))
    parser.close()
    assert len(sse) == len(frames) and not parser.truncated
    body = b"" if isinstance(events[-1], ReplyFailed) else writer.body(collector.reply())
    return sse, body


def checked(sse: Sequence[ServerSentEvent]) -> list[Any]:
    """Each event validated by the SDK's types, its name its type; block indices 0, 1, 2 in start order, each
    block started once, its deltas inside it, stopped once."""
    parsed = []
    open_index: int | None = None
    started = 0
    for e in sse:
        data = json.loads(e.data)
        assert e.event == data["type"]
        event = EVENTS.validate_python(data)
        parsed.append(event)
        if event.type == "content_block_start":
            assert open_index is None and event.index == started
            open_index, started = event.index, started + 1
        elif event.type == "content_block_delta":
            assert event.index == open_index
        elif event.type == "content_block_stop":
            assert event.index == open_index
            open_index = None
    assert open_index is None
    assert [p.type for p in parsed[:1]] == ["message_start"]
    return parsed


def accumulated(parsed: Sequence[Any]) -> Any:
    snapshot = None
    bufs: dict[int, bytes] = {}
    for event in parsed:
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=bufs)
    return snapshot


def summary(parsed: Sequence[Any]) -> tuple[Any, ...]:
    blocks: list[tuple[str, str]] = []
    for e in parsed:
        if e.type == "content_block_start":
            head = e.content_block.type + (
                f":{e.content_block.name}" if e.content_block.type == "tool_use" else ""
            )
            blocks.append((head, ""))
        elif e.type == "content_block_delta":
            d = e.delta
            piece = {
                "text_delta": "text",
                "thinking_delta": "thinking",
                "input_json_delta": "partial_json",
            }.get(d.type)
            if piece is not None:
                head, text = blocks[-1]
                blocks[-1] = (head, text + getattr(d, piece))
    end = next(e for e in parsed if e.type == "message_delta")
    return tuple(blocks), end.delta.stop_reason, end.delta.stop_sequence, end.usage.output_tokens


def test_a_reply_with_text_and_a_call_at_every_cut_of_its_ids() -> None:
    ids = _ids(REPLY)
    sse, body = written(reply_events([ids]))
    parsed = checked(sse)
    whole = summary(parsed)
    assert whole == (
        (("text", "Let me look: 🌦 विश्व.\n"), ("tool_use:get_weather", '{"city": "Zürich", "unit": "°C"}')),
        "tool_use",
        None,
        len(ids),
    )
    start = parsed[0].message
    assert start.content == [] and start.usage.input_tokens == 7 and start.stop_reason is None
    assert [p.type for p in parsed[-2:]] == ["message_delta", "message_stop"]
    message = Message.model_validate_json(body)
    assert accumulated(parsed).model_dump() == message.model_dump()
    assert message.content[1].input == {"city": "Zürich", "unit": "°C"}  # type: ignore[union-attr]
    cuts = [[ids[:c], ids[c:]] for c in range(1, len(ids))]
    cuts += [random_steps(ids, random.Random(seed)) for seed in range(20)]
    for steps in cuts:
        sse, cut_body = written(reply_events(steps))
        assert summary(checked(sse)) == whole
        assert Message.model_validate_json(cut_body) == message


def test_reasoning_is_a_thinking_block_signed_just_before_its_stop() -> None:
    ids = _ids(THOUGHT + REPLY)
    sse, body = written(reply_events([ids], reasoning=True))
    parsed = checked(sse)
    thinking = 'हम्म 🤔 a "quote"\nand a line'
    assert summary(parsed)[0][0] == ("thinking", thinking)
    assert [b[0] for b in summary(parsed)[0]] == ["thinking", "text", "tool_use:get_weather"]
    stop = next(i for i, p in enumerate(parsed) if p.type == "content_block_stop")
    signature = parsed[stop - 1]
    assert signature.type == "content_block_delta" and signature.delta.type == "signature_delta"
    assert signature.delta.signature == "tokenrelay-sha256:" + hashlib.sha256(thinking.encode()).hexdigest()
    message = Message.model_validate_json(body)
    assert accumulated(parsed).model_dump() == message.model_dump()
    for cut in range(1, len(ids), 2):
        sse, _ = written(reply_events([ids[:cut], ids[cut:]], reasoning=True))
        assert summary(checked(sse)) == summary(parsed)


@pytest.mark.parametrize(
    ("max_tokens", "stops", "reason", "sequence"),
    [(4, (), "max_tokens", None), (None, ("🌦",), "stop_sequence", "🌦"), (None, (), "end_turn", None)],
)
def test_stop_reasons(
    max_tokens: int | None, stops: tuple[str, ...], reason: str, sequence: str | None
) -> None:
    ids = _ids("Let me look: 🌦 विश्व.")
    sse, body = written(reply_events([ids], tools=False, max_tokens=max_tokens, stops=stops))
    parsed = checked(sse)
    assert summary(parsed)[1:3] == (reason, sequence)
    message = Message.model_validate_json(body)
    assert (message.stop_reason, message.stop_sequence) == (reason, sequence)
    assert accumulated(parsed).model_dump() == message.model_dump()


def test_an_empty_reply_has_no_block_and_still_ends() -> None:
    sse, body = written(reply_events([sorted(TOK.eos_token_ids)[:1]], tools=False))
    parsed = checked(sse)
    assert [p.type for p in parsed] == ["message_start", "message_delta", "message_stop"]
    assert Message.model_validate_json(body).content == []


def test_a_failure_after_the_start_is_an_error_event_and_the_stream_ends() -> None:
    events: list[ReplyEvent] = [TextDelta("partial", (1,)), ReplyFailed(EngineError("the engine broke"))]
    sse, _ = written(events)
    assert [e.event for e in sse] == ["message_start", "content_block_start", "content_block_delta", "error"]
    error = json.loads(sse[-1].data)
    assert error == {"type": "error", "error": {"type": "api_error", "message": "the engine broke"}}
    shutdown = MessagesReplyWriter(id="m", model="m", input_tokens=1).write(
        ReplyFailed(UnavailableError("bye"))
    )
    assert json.loads(shutdown[-1].split(b"data: ")[1])["error"]["type"] == "overloaded_error"


def test_the_keepalive_is_a_ping_event() -> None:
    (event,) = SSEParser().feed(PING)
    assert event.event == "ping" and json.loads(event.data) == {"type": "ping"}  # the SDKs skip it by name


@pytest.mark.parametrize(
    ("error", "status", "kind"),
    [
        (InvalidRequestError("bad"), 400, "invalid_request_error"),
        (AuthenticationError("key"), 401, "authentication_error"),
        (NotFoundError("model"), 404, "not_found_error"),
        (PayloadTooLargeError("big"), 413, "invalid_request_error"),  # the SDK has no request_too_large
        (RateLimitError("busy"), 429, "rate_limit_error"),
        (UnavailableError("shutting down"), 529, "overloaded_error"),
        (TokenRelayError("internal"), 500, "api_error"),
    ],
)
def test_errors_have_anthropics_shape_status_and_type(error: TokenRelayError, status: int, kind: str) -> None:
    got, body = anthropic_error_body(error)
    assert got == status
    data = json.loads(body)
    assert data == {"type": "error", "error": {"type": kind, "message": error.message}}
    from anthropic.types import ErrorResponse

    assert ErrorResponse.model_validate(data).error.type == kind
    assert error.status_code != 529  # the OpenAI endpoints keep their own status (503)


def test_two_calls_are_two_tool_use_blocks_in_order() -> None:
    two = (
        '<tool_call>\n{"name": "a", "arguments": {"x": "€"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>'
    )
    ids = _ids("Two: " + two)
    for steps in ([ids], [[i] for i in ids]):
        sse, body = written(reply_events(steps))
        parsed = checked(sse)
        blocks, reason, _, _ = summary(parsed)
        assert blocks == (("text", "Two: "), ("tool_use:a", '{"x": "€"}'), ("tool_use:b", "{}"))
        assert reason == "tool_use"
        message = Message.model_validate_json(body)
        assert accumulated(parsed).model_dump() == message.model_dump()
        assert [b.type for b in message.content] == ["text", "tool_use", "tool_use"]

"""Writes tests/vectors/reply_dialects.json: real Responses and Messages streams and what the Python readers read.

Run from the repository root: ``.venv/bin/python tests/vectors/reply_dialects.py`` (it rewrites the JSON file).

Each case is a reply (SmolLM2's real tokenizer, through ``TextStream`` and the ``ReplyPipeline``, as
tests/test_responses_writer.py and tests/test_messages.py build them, or a failure after the start) written by the
server's writers (``wire/_responses``, ``wire/_messages``); ``stream`` is the bytes as they go on the wire, and
``read`` is what the Python reader of that dialect (``ResponsesStreamDecoder``, ``MessagesStreamDecoder``) makes of
them: the text, the reasoning, the tool calls, the finish reason and usage, or the error. The JS readers
(tests/web/reply_dialects.test.js) must read the same from the same bytes, however they are cut.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokenrelay import load_tokenizer
from tokenrelay._errors import EngineError, TokenRelayError
from tokenrelay._reasoning import REASONING_FORMATS, ReasoningSplitter
from tokenrelay._reply import ReplyEvent, ReplyFailed
from tokenrelay._reply_pipeline import ReplyPipeline
from tokenrelay._stream import Finished, TextDelta, TextStream
from tokenrelay._tool_call_events import HERMES
from tokenrelay.wire._messages import MessagesReplyWriter
from tokenrelay.wire._messages_reader import MessagesStreamDecoder
from tokenrelay.wire._responses import ResponsesReplyWriter
from tokenrelay.wire._responses_reader import ResponsesStreamDecoder
from tokenrelay.wire._sse import SSEParser

OUT = Path(__file__).with_name("reply_dialects.json")
TOK = load_tokenizer("smollm2")
CALL = (
    "<think>\nहम्म 🤔 a thought</think>\n\nLet me look: 🌦 विश्व.\n"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich", "unit": "°C"}}\n</tool_call>'
)
PROSE = "Hé 👩\u200d💻 你好, a reply in prose that goes on for a while and then stops."


def reply_events(text: str, *, reasoning: bool = False, max_tokens: int | None = None) -> list[ReplyEvent]:
    """The reply events of ``text``'s ids (and the end-of-sequence id), fed one id at a time."""
    stream = TextStream(TOK, max_tokens=max_tokens)
    n = itertools.count()
    splitter = ReasoningSplitter(REASONING_FORMATS["qwen3"]) if reasoning else None
    pipeline = ReplyPipeline(tools=HERMES, reasoning=splitter, new_call_id=lambda: f"call_{next(n)}")
    out: list[ReplyEvent] = []
    for token in [*TOK.encode(text), *sorted(TOK.eos_token_ids)[:1]]:
        for event in stream.feed([token]):
            if isinstance(event, TextDelta):
                out.extend(pipeline.feed(event))
            else:
                return [*out, *pipeline.finish(event)]
    for event in stream.finish():
        if isinstance(event, TextDelta):
            out.extend(pipeline.feed(event))
        else:
            assert isinstance(event, Finished)
            out.extend(pipeline.finish(event))
    return out


def responses_stream(events: Sequence[ReplyEvent]) -> bytes:
    writer = ResponsesReplyWriter(id="resp_0123", model="m", created_at=1)
    frames = [*writer.start()]
    for event in events:
        frames += writer.write(event)
    return b"".join(frames)


def messages_stream(events: Sequence[ReplyEvent]) -> bytes:
    writer = MessagesReplyWriter(id="msg_1", model="m", input_tokens=7)
    frames = [*writer.start()]
    for event in events:
        frames += writer.write(event)
    return b"".join(frames)


def read(stream: bytes, decoder: ResponsesStreamDecoder | MessagesStreamDecoder) -> dict[str, Any]:
    """What the Python reader reads: the joined text, reasoning and calls, and the end or the error."""
    text, error = "", None
    try:
        for event in SSEParser().feed(stream):
            text += decoder.feed(event)
    except TokenRelayError as exc:
        error = exc.message
    usage = None if error is not None else decoder.usage
    return {
        "text": text,
        "reasoning": decoder.reasoning,
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in decoder.tool_calls],
        "finish_reason": None if error is not None else decoder.finish_reason,
        "usage": None if usage is None else [usage.prompt_tokens, usage.completion_tokens],
        "error": error,
    }


def cases() -> list[dict[str, Any]]:
    """The vectors: each reply in each dialect, its stream and what the Python reader reads."""
    failed: list[ReplyEvent] = [TextDelta("partial", (1,)), ReplyFailed(EngineError("the engine broke"))]
    replies: dict[str, list[ReplyEvent]] = {
        "reasoning, text and a call": reply_events(CALL, reasoning=True),
        "prose to the end": reply_events(PROSE),
        "prose cut by max_tokens": reply_events(PROSE, max_tokens=6),
        "a failure after the start": failed,
    }
    out = []
    for name, events in replies.items():
        for dialect, write, decoder in (
            ("responses", responses_stream, ResponsesStreamDecoder),
            ("messages", messages_stream, MessagesStreamDecoder),
        ):
            stream = write(events)
            out.append(
                {"name": name, "dialect": dialect, "stream": stream.decode(), "read": read(stream, decoder())}
            )
    return out


def main() -> None:
    OUT.write_text(json.dumps({"cases": cases()}, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

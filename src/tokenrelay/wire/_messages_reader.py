"""The Anthropic Messages stream, read: named SSE events in, the reply's text, calls, end and usage out.

:class:`MessagesStreamDecoder` reads what ``_messages`` writes (and what Anthropic's API sends) into the same
terms as the chat decoder (``_chat_reader.ChatStreamDecoder``), so ``tokenrelay.client`` and ``tokenrelay chat
--url`` give one result type whichever dialect the server speaks: ``feed(event)`` returns the text a
``text_delta`` adds; ``tool_calls`` gather as ``StreamedToolCall`` (their ``partial_json`` joined);
``finish_reason`` is the OpenAI name of ``stop_reason`` (``end_turn`` and ``stop_sequence`` → ``stop``,
``max_tokens`` → ``length``, ``tool_use`` → ``tool_calls``; the original in :attr:`stop_reason`), ``usage`` the
``message_start`` input tokens and the last ``message_delta``'s output tokens; ``message_stop`` sets
:attr:`done`. An ``error`` event raises the error it names (``overloaded_error`` is ``UnavailableError``).

The SSE event name is what is dispatched on, as the anthropic SDKs do; a frame whose JSON ``type`` differs
from its name is a :class:`ProtocolError`, as is JSON that is not an object, a delta for a block that was
never started, or a ``content_block_start`` whose ``index`` is not the next one. ``ping`` and event types
this reader does not know are skipped (Anthropic may add event types). Standard library only.
"""

from __future__ import annotations

import json
from typing import Any

from tokenrelay._errors import ProtocolError
from tokenrelay._stream import Usage

from ._chat_reader import StreamedToolCall, error_from_body
from ._sse import ServerSentEvent

__all__ = ["FINISH_REASONS", "MessagesStreamDecoder"]

#: Anthropic's ``stop_reason`` as the chat API's ``finish_reason``.
FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
    "pause_turn": "stop",
}


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class MessagesStreamDecoder:
    """Reads one Messages stream: ``feed(event) -> text``; see the module docstring."""

    __slots__ = (
        "_blocks",
        "_calls",
        "_input",
        "_output",
        "done",
        "finish_reason",
        "id",
        "model",
        "reasoning",
        "stop_reason",
        "stop_sequence",
    )

    def __init__(self) -> None:
        self.done = False  # message_stop seen
        self.finish_reason: str | None = None
        self.stop_reason: str | None = None
        self.stop_sequence: str | None = None
        self.id: str | None = None
        self.model: str | None = None
        self.reasoning = ""  # the thinking blocks' text, joined
        self._blocks: list[str] = []  # each started block's type, by index
        self._calls: dict[int, StreamedToolCall] = {}  # by block index
        self._input: int | None = None
        self._output: int | None = None

    @property
    def finished(self) -> bool:
        return self.done or self.finish_reason is not None

    @property
    def usage(self) -> Usage | None:
        if self._input is None or self._output is None:
            return None
        return Usage(self._input, self._output)

    @property
    def tool_calls(self) -> list[StreamedToolCall]:
        """The reply's tool calls so far, in the order they started (``index`` counts calls from 0)."""
        return list(self._calls.values())

    def feed(self, event: ServerSentEvent) -> str:
        """The answer's text this event adds (``""`` when none)."""
        name = event.event
        if self.done or name == "ping":
            return ""
        if name == "error":
            raise error_from_body(200, event.data.encode())
        try:
            data = json.loads(event.data)
        except ValueError as exc:
            raise ProtocolError(f"Messages event is not JSON: {event.data[:200]!r}") from exc
        if not isinstance(data, dict):
            raise ProtocolError(f"Messages event is not a JSON object: {event.data[:200]!r}")
        if data.get("type") != name:
            raise ProtocolError(f"event {name!r} carries data of type {data.get('type')!r}")
        if name == "content_block_delta":
            return self._delta(data)
        if name == "content_block_start":
            self._start(data)
        elif name == "message_start":
            self._message_start(data)
        elif name == "message_delta":
            self._message_delta(data)
        elif name == "message_stop":
            self.done = True
        return ""

    def _index(self, data: dict[str, Any]) -> int:
        index = _count(data.get("index"))
        if index is None or not 0 <= index < len(self._blocks):
            raise ProtocolError(f"an event for a block that was not started: {json.dumps(data)[:200]}")
        return index

    def _start(self, data: dict[str, Any]) -> None:
        block = data.get("content_block")
        if _count(data.get("index")) != len(self._blocks) or not isinstance(block, dict):
            raise ProtocolError(f"content_block_start out of order: {json.dumps(data)[:200]}")
        kind = str(block.get("type"))
        if kind == "tool_use":
            name, id = block.get("name"), block.get("id")
            if not isinstance(name, str) or not name:
                raise ProtocolError("a tool_use block without a name")
            self._calls[len(self._blocks)] = StreamedToolCall(
                len(self._calls), id if isinstance(id, str) else None, name
            )
        self._blocks.append(kind)

    def _delta(self, data: dict[str, Any]) -> str:
        index = self._index(data)
        delta = data.get("delta")
        if not isinstance(delta, dict):
            raise ProtocolError(f"content_block_delta without a delta: {json.dumps(data)[:200]}")
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text")
            if not isinstance(text, str):
                raise ProtocolError("a text_delta without text")
            return text
        if kind == "input_json_delta":
            call = self._calls.get(index)
            piece = delta.get("partial_json")
            if call is None or not isinstance(piece, str):
                raise ProtocolError(f"an input_json_delta outside a tool_use block: {json.dumps(data)[:200]}")
            call.arguments += piece
        elif kind == "thinking_delta":
            thinking = delta.get("thinking")
            if isinstance(thinking, str):
                self.reasoning += thinking
        return ""

    def _message_start(self, data: dict[str, Any]) -> None:
        message = data.get("message")
        if not isinstance(message, dict):
            raise ProtocolError("message_start without a message")
        if isinstance(message.get("id"), str):
            self.id = message["id"]
        if isinstance(message.get("model"), str):
            self.model = message["model"]
        usage = message.get("usage")
        if isinstance(usage, dict):
            self._input = _count(usage.get("input_tokens"))
            self._output = _count(usage.get("output_tokens"))

    def _message_delta(self, data: dict[str, Any]) -> None:
        delta, usage = data.get("delta"), data.get("usage")
        if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
            self.stop_reason = delta["stop_reason"]
            self.finish_reason = FINISH_REASONS.get(delta["stop_reason"], delta["stop_reason"])
            sequence = delta.get("stop_sequence")
            self.stop_sequence = sequence if isinstance(sequence, str) else None
        if isinstance(usage, dict):
            output, given = _count(usage.get("output_tokens")), _count(usage.get("input_tokens"))
            if output is None:
                raise ProtocolError(f"message_delta with a malformed usage: {json.dumps(usage)[:200]}")
            self._output = output
            if given is not None:
                self._input = given

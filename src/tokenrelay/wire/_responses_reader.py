"""The OpenAI Responses API's stream, read: ``ResponsesStreamDecoder`` (``_responses`` writes the same events).

Sans-I/O, standard library only: SSE events in (``ServerSentEvent`` from ``SSEParser``), text deltas out, with
the same attributes as chat's ``ChatStreamDecoder``, so one client loop reads either dialect into the same
results (``tokenrelay.client``, the CLI's ``--url``):

- ``response.output_text.delta``: its ``delta`` is the text fed back; reasoning deltas are kept apart
  (:attr:`reasoning`), never mixed into the answer;
- ``response.output_item.added`` of a ``function_call`` starts a call (:attr:`tool_calls`, with its
  ``call_id`` and ``name``), ``response.function_call_arguments.delta`` adds to its arguments (by
  ``output_index``);
- the end: ``response.completed`` (``finish_reason`` ``"tool_calls"`` when the output holds a call, else
  ``"stop"``) or ``response.incomplete`` (``"length"`` for ``max_output_tokens``, else its reason), with the
  usage (``input_tokens``/``output_tokens``); :attr:`done` and :attr:`finished` are then true and later events
  add nothing;
- ``error`` and ``response.failed`` raise the matching :class:`TokenRelayError`; an event whose data is not a
  JSON object raises :class:`ProtocolError`; other event types add nothing.
"""

from __future__ import annotations

import json
from typing import Any

from tokenrelay._errors import ProtocolError
from tokenrelay._stream import Usage

from ._chat_reader import StreamedToolCall, ToolCallDelta, error_from_body
from ._sse import ServerSentEvent

__all__ = ["ResponsesStreamDecoder"]


def _count(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProtocolError(f"a Responses usage count is not an integer: {value!r:.80}")
    return value


class ResponsesStreamDecoder:
    """Reads the events of one Responses API stream: ``feed(event) -> text delta``."""

    __slots__ = (
        "_calls",
        "done",
        "finish_reason",
        "id",
        "model",
        "not_chunks",
        "reasoning",
        "response",
        "tool_deltas",
        "usage",
    )

    def __init__(self) -> None:
        self.done = False
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.id: str | None = None
        self.model: str | None = None
        self.not_chunks = 0  # events of a type this reader does not act on
        self.reasoning = ""
        self.response: dict[str, Any] | None = None  # the final response object
        self._calls: dict[int, StreamedToolCall] = {}  # by output_index
        self.tool_deltas: list[ToolCallDelta] = []

    @property
    def finished(self) -> bool:
        return self.done

    @property
    def tool_calls(self) -> list[StreamedToolCall]:
        """The reply's calls so far, in the order they started (``index`` counts them from 0)."""
        return list(self._calls.values())

    def feed(self, event: ServerSentEvent) -> str:
        """The answer's text this event adds (``""`` when none)."""
        self.tool_deltas = []
        if self.done:
            return ""
        try:
            data = json.loads(event.data)
        except ValueError as exc:
            raise ProtocolError(f"Responses event is not JSON: {event.data[:200]!r}") from exc
        if not isinstance(data, dict):
            raise ProtocolError(f"Responses event is not a JSON object: {event.data[:200]!r}")
        kind = data.get("type", event.event)
        if kind == "response.output_text.delta":
            delta = data.get("delta")
            if not isinstance(delta, str):
                raise ProtocolError(f"an output_text delta without text: {event.data[:200]!r}")
            return delta
        if kind == "response.reasoning_text.delta":
            self.reasoning += str(data.get("delta", ""))
        elif kind == "response.function_call_arguments.delta":
            call = self._calls.get(data.get("output_index", -1))
            if call is None:
                raise ProtocolError(f"arguments for a call that never started: {event.data[:200]!r}")
            piece = str(data.get("delta", ""))
            call.arguments += piece
            self.tool_deltas = [ToolCallDelta(call.index, None, None, piece)]
        elif kind == "response.output_item.added":
            item = data.get("item")
            if isinstance(item, dict) and item.get("type") == "function_call":
                index = len(self._calls)
                call_id, name = item.get("call_id"), str(item.get("name", ""))
                call = StreamedToolCall(index, call_id if isinstance(call_id, str) else None, name)
                call.arguments = str(item.get("arguments") or "")
                self._calls[data.get("output_index", index)] = call
                self.tool_deltas = [ToolCallDelta(index, call.id, name, call.arguments)]
        elif kind in ("response.created", "response.in_progress"):
            response = data.get("response")
            if isinstance(response, dict) and self.id is None:
                self.id, self.model = response.get("id"), response.get("model")
        elif kind in ("response.completed", "response.incomplete"):
            self._end(data.get("response"), kind == "response.incomplete")
        elif kind == "error":
            body = {"error": {k: data.get(k) for k in ("message", "type", "param", "code")}}
            raise error_from_body(200, json.dumps(body).encode())
        elif kind == "response.failed":
            response = data.get("response")
            error = response.get("error") if isinstance(response, dict) else None
            body = {"error": error if isinstance(error, dict) else {"message": "the response failed"}}
            raise error_from_body(200, json.dumps(body).encode())
        else:
            self.not_chunks += 1
        return ""

    def _end(self, response: object, incomplete: bool) -> None:
        if not isinstance(response, dict):
            raise ProtocolError("a Responses end event without its response")
        self.done = True
        self.response = response
        usage = response.get("usage")
        if isinstance(usage, dict):
            self.usage = Usage(_count(usage.get("input_tokens")), _count(usage.get("output_tokens")))
        if incomplete:
            details = response.get("incomplete_details")
            reason = details.get("reason") if isinstance(details, dict) else None
            self.finish_reason = "length" if reason in (None, "max_output_tokens") else str(reason)
        else:
            output = response.get("output")
            calls = isinstance(output, list) and any(
                isinstance(i, dict) and i.get("type") == "function_call" for i in output
            )
            self.finish_reason = "tool_calls" if calls or self._calls else "stop"

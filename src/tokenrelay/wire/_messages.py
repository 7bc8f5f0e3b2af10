"""Reply events written as the Anthropic Messages API: a stream's frames, a whole ``message``, an error.

:class:`MessagesReplyWriter` is the ``_reply.ReplyWriter`` of ``POST /v1/messages``. The shapes are the
anthropic SDK's (``anthropic.types``: ``RawMessageStreamEvent`` and ``Message``; the tests validate every
frame and body with them). Every frame is ``event: <type>`` and ``data: <JSON with the same "type">``: the SDKs
dispatch on the SSE event name, so a frame whose name and type differ is read wrongly or not at all.

Event by event (``_reply`` gives their order):

- ``start()``: ``message_start``, the message with empty ``content``, ``stop_reason: null`` and
  ``usage.input_tokens`` (the prompt's tokens) and ``output_tokens: 0``;
- content blocks, their ``index`` counting 0, 1, 2 in the order they start; a block opens at the first event
  of its kind and closes (``content_block_stop``) when an event of another kind, or the end, comes:

  - ``ReasoningDelta``: a ``thinking`` block (``thinking_delta``s), closed by a ``signature_delta`` just
    before its stop. The signature is not Anthropic's (nothing here can make one a Claude model would
    accept): it is ``"tokenrelay-sha256:"`` and the SHA-256 (hex) of the block's thinking text as sent, so a
    client can check that a thinking block it passes back was not changed; the server does not require it.
  - ``TextDelta``: a ``text`` block (``text_delta``s);
  - ``CallStarted``: a ``tool_use`` block (``id``, ``name``, ``input: {}``), ``CallArguments`` its
    ``input_json_delta``s whose ``partial_json`` are the model's argument characters as they came (joined,
    they are the arguments text exactly, never re-serialized), ``CallEnded`` its stop;

- ``ReplyEnded``: the open block's stop, ``message_delta`` (``stop_reason``: ``end_turn``, ``max_tokens``,
  ``stop_sequence`` with ``stop_sequence`` the string that matched, or ``tool_use``; ``usage.output_tokens``
  the reply's tokens, cumulative as Anthropic's are, and ``input_tokens`` the prompt's as the engine counted
  them, which the SDKs' accumulators take over ``message_start``'s) and ``message_stop``;
- ``ReplyFailed``: an ``error`` event (``{"type": "error", "error": {"type", "message"}}``); the stream ends
  there, with no end marker (Anthropic's streams have none).

``keepalive`` is a ``ping`` event, which every Anthropic client skips. A body (``body(reply)``) holds the
same blocks as the stream, in the order a reply gives them (thinking, text, then the calls, each call's
``input`` the parsed arguments). Errors (``anthropic_error_body``) are ``{"type": "error", "error": {"type",
"message"}}`` with the error's Anthropic status and type (``TokenRelayError.to_anthropic``).

Standard library only; ids and the model name are plain values the caller passes in.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from json.encoder import encode_basestring  # the C string quoter json.dumps(ensure_ascii=False) uses

from tokenrelay._errors import TokenRelayError, ToolCallError
from tokenrelay._reply import (
    CallArguments,
    CallEnded,
    CallStarted,
    ReasoningDelta,
    Reply,
    ReplyEnded,
    ReplyEvent,
    ReplyFailed,
)
from tokenrelay._stream import TextDelta

__all__ = [
    "PING",
    "MessagesReplyWriter",
    "anthropic_error_body",
    "error_frame",
    "frame",
    "message_body",
    "stop_reason",
]

#: The keep-alive: Anthropic's own ``ping`` event (its SDKs skip it by name).
PING = b'event: ping\ndata: {"type":"ping"}\n\n'

SIGNATURE_PREFIX = "tokenrelay-sha256:"


def _json(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def frame(obj: dict[str, object]) -> bytes:
    """One SSE frame: ``event:`` the object's ``type``, ``data:`` the object as compact JSON (one line:
    JSON text holds no raw line break)."""
    return f"event: {obj['type']}\ndata: {_json(obj)}\n\n".encode()


def anthropic_error_body(error: TokenRelayError) -> tuple[int, bytes]:
    """An error response in Anthropic's shape: the error's Anthropic status and ASCII JSON body (a message may
    quote the client's input, which must not fail on a lone surrogate)."""
    return error.anthropic_status, json.dumps(error.to_anthropic(), separators=(",", ":")).encode()


def error_frame(error: TokenRelayError) -> bytes:
    """The ``error`` event of a stream that failed after it started."""
    body = json.dumps(error.to_anthropic(), separators=(",", ":"))
    return f"event: error\ndata: {body}\n\n".encode()


def stop_reason(end: ReplyEnded) -> tuple[str, str | None]:
    """The ``stop_reason`` and ``stop_sequence`` of a reply's end."""
    if end.reason == "length":
        return "max_tokens", None
    if end.reason == "tool_calls":
        return "tool_use", None
    if isinstance(end.matched, str):  # a stop string (a stop token id is the model's own end)
        return "stop_sequence", end.matched
    return "end_turn", None


def message_body(
    *,
    id: str,
    model: str,
    content: list[dict[str, object]],
    stop: tuple[str, str | None] | tuple[None, None],
    input_tokens: int,
    output_tokens: int,
) -> dict[str, object]:
    """A ``message`` object (the body, or ``message_start``'s with empty content and no stop)."""
    return {
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop[0],
        "stop_sequence": stop[1],
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }


_TEXT, _THINKING, _TOOL = 1, 2, 3


class MessagesReplyWriter:
    """One Messages API reply as a stream (``start``/``write``) or a body (``body``)."""

    keepalive = PING

    __slots__ = ("_block", "_hash", "_id", "_index", "_input_tokens", "_model", "_text_head")

    def __init__(self, *, id: str, model: str, input_tokens: int) -> None:
        self._id, self._model, self._input_tokens = id, model, input_tokens
        self._index = -1  # the open block's index (the last one started)
        self._block = 0  # the open block's kind, 0 when none is open
        self._hash: hashlib._Hash | None = None  # the open thinking block's text, hashed as it goes
        self._text_head = b""  # the bytes every text delta of the open text block starts with

    def start(self, sent: float | None = None) -> Sequence[bytes]:
        message = message_body(
            id=self._id,
            model=self._model,
            content=[],
            stop=(None, None),
            input_tokens=self._input_tokens,
            output_tokens=0,
        )
        return (frame({"type": "message_start", "message": message}),)

    # -- blocks ------------------------------------------------------------------------------------

    def _open(self, kind: int, block: dict[str, object], out: list[bytes]) -> None:
        self._close(out)
        self._index += 1
        self._block = kind
        out.append(frame({"type": "content_block_start", "index": self._index, "content_block": block}))

    def _close(self, out: list[bytes]) -> None:
        if not self._block:
            return
        if self._block == _THINKING:
            assert self._hash is not None
            signature = SIGNATURE_PREFIX + self._hash.hexdigest()
            self._hash = None
            out.append(self._delta({"type": "signature_delta", "signature": signature}))
        out.append(frame({"type": "content_block_stop", "index": self._index}))
        self._block = 0

    def _delta(self, delta: dict[str, object]) -> bytes:
        return frame({"type": "content_block_delta", "index": self._index, "delta": delta})

    def write(self, event: ReplyEvent, sent: float | None = None) -> Sequence[bytes]:
        t = type(event)
        if t is TextDelta:
            text: str = event.text  # type: ignore[union-attr]
            if self._block == _TEXT:  # the token path: one quote and one join per delta
                return (b"".join((self._text_head, encode_basestring(text).encode(), b"}}\n\n")),)
            out: list[bytes] = []
            self._open(_TEXT, {"type": "text", "text": ""}, out)
            self._text_head = (
                b"event: content_block_delta\ndata: "
                + f'{{"type":"content_block_delta","index":{self._index},'.encode()
                + b'"delta":{"type":"text_delta","text":'
            )
            out.append(b"".join((self._text_head, encode_basestring(text).encode(), b"}}\n\n")))
            return out
        out = []
        if t is ReasoningDelta:
            assert isinstance(event, ReasoningDelta)
            if self._block != _THINKING:
                self._open(_THINKING, {"type": "thinking", "thinking": "", "signature": ""}, out)
                self._hash = hashlib.sha256()
            assert self._hash is not None
            self._hash.update(event.text.encode("utf-8", "surrogatepass"))
            out.append(self._delta({"type": "thinking_delta", "thinking": event.text}))
        elif t is CallStarted:
            assert isinstance(event, CallStarted)
            self._open(_TOOL, {"type": "tool_use", "id": event.id, "name": event.name, "input": {}}, out)
        elif t is CallArguments:
            assert isinstance(event, CallArguments)
            if self._block != _TOOL:  # never from the pipeline: a call's arguments follow its start
                raise ValueError(f"CallArguments for call {event.index} outside its tool_use block")
            if event.text:
                out.append(self._delta({"type": "input_json_delta", "partial_json": event.text}))
        elif t is CallEnded:
            if self._block == _TOOL:  # (a block of another kind opened since has closed it already)
                self._close(out)
        elif t is ReplyEnded:
            assert isinstance(event, ReplyEnded)
            self._close(out)
            reason, sequence = stop_reason(event)
            delta = {"stop_reason": reason, "stop_sequence": sequence}
            usage = {
                "input_tokens": event.usage.prompt_tokens,
                "output_tokens": event.usage.completion_tokens,
            }
            out.append(frame({"type": "message_delta", "delta": delta, "usage": usage}))
            out.append(b'event: message_stop\ndata: {"type":"message_stop"}\n\n')
        else:
            assert isinstance(event, ReplyFailed)
            out.append(error_frame(event.error))
        return out

    # -- a whole reply ------------------------------------------------------------------------------

    def body(self, reply: Reply) -> bytes:
        content: list[dict[str, object]] = []
        if reply.reasoning:
            signature = SIGNATURE_PREFIX + hashlib.sha256(reply.reasoning.encode()).hexdigest()
            content.append({"type": "thinking", "thinking": reply.reasoning, "signature": signature})
        if reply.text:
            content.append({"type": "text", "text": reply.text})
        for call in reply.calls:
            try:
                arguments = json.loads(call.arguments) if call.arguments.strip() else {}
            except ValueError as exc:  # the extractor only ends a call on complete JSON: a bug if reached
                raise ToolCallError(f"tool call {call.id}'s arguments are not JSON: {exc}") from exc
            content.append({"type": "tool_use", "id": call.id, "name": call.name, "input": arguments})
        end = reply.end
        body = message_body(
            id=self._id,
            model=self._model,
            content=content,
            stop=stop_reason(end),
            input_tokens=end.usage.prompt_tokens,
            output_tokens=end.usage.completion_tokens,
        )
        return _json(body).encode()

    error_body = staticmethod(anthropic_error_body)

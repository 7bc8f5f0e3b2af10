"""Reply events written as the OpenAI Responses API (``POST /v1/responses``): a stream's frames or a body.

:class:`ResponsesReplyWriter` is the ``_reply.ReplyWriter`` of the Responses dialect. Every frame is one SSE
event whose ``event:`` line is its ``type`` and whose data carries ``sequence_number``, from 0 up by one. The
shapes are those of ``openai.types.responses`` (the tests validate every event with the SDK's pydantic types);
the order is OpenAI's:

- ``start()``: ``response.created`` then ``response.in_progress`` (the response as it stands: no output yet);
- an output item per run of one kind of event, in the order the model wrote them. A run opens with
  ``response.output_item.added``, and its item closes when the next run begins or the reply ends, with
  ``response.output_item.done`` carrying the whole item:

  - ``ReasoningDelta``: a ``reasoning`` item, one ``reasoning_text`` content part
    (``response.content_part.added`` → ``response.reasoning_text.delta``… → ``response.reasoning_text.done`` →
    ``response.content_part.done``);
  - ``TextDelta``: a ``message`` item (role ``assistant``), one ``output_text`` part
    (``response.content_part.added`` → ``response.output_text.delta``… → ``response.output_text.done`` →
    ``response.content_part.done``);
  - ``CallStarted`` → ``CallArguments``… → ``CallEnded``: a ``function_call`` item (its ``call_id`` the id made
    for the call) with ``response.function_call_arguments.delta``… → ``.done``;

- ``ReplyEnded``: ``response.completed`` with ``usage`` (``stop``, ``tool_calls``), or, for ``length``,
  ``response.incomplete`` with ``incomplete_details.reason: "max_output_tokens"``: the item the cut
  interrupted (and the response) say ``incomplete``, never ``completed``; items that had ended before say
  ``completed``. A reply with no text, no reasoning and no call gets one empty message item, so the response
  always has an answer to read;
- ``ReplyFailed``: an ``error`` event, then ``response.failed`` (``error.code: "server_error"``; the open item
  ``incomplete``). No ``data: [DONE]`` follows any end: OpenAI sends none.

What is exact: each delta frame carries exactly one event's text, as the pipeline released it; the joined
deltas of an item equal its ``.done`` text and the item's text in the final response, and :meth:`body` writes
the same response as the stream's last event for the same events (it runs them through this writer). Item ids
are derived from the response's id (``msg_``/``rs_``/``fc_`` + its hex + the output index), so the core holds
no randomness and an id is unique wherever the response's is. ``on_end`` is called with the final response
object (completed or incomplete, never failed), for the server's store.

Standard library only. JSON is written with ``ensure_ascii=False``. At ~430 lines the module is over the usual
size because each event's JSON is spliced together as bytes by hand (every object encoded once, the cost
target of issue 29: a ``json.dumps`` per event cost 1.15× chat's CPU per token, ``benchmarks/README.md``),
which takes about twice the lines of a dict per event; the shapes and the item state they write are one unit.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from json.encoder import encode_basestring  # the C string quoter json.dumps(ensure_ascii=False) uses
from typing import Any

from tokenrelay._errors import TokenRelayError
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
from tokenrelay._stream import TextDelta, Usage

from ._chat import json_bytes
from ._chat_writer import openai_error_body
from ._sse import KEEPALIVE

__all__ = ["ResponsesReplyWriter", "response_object", "usage_object"]

Obj = dict[str, Any]

_INCOMPLETE = {"reason": "max_output_tokens"}
_MESSAGE, _REASONING = "message", "reasoning"  # an item's kind (compared by identity on the token path)
#: The response object's fields that change as it goes: written apart from the rest, which is encoded once.
_CHANGING = frozenset({"status", "error", "incomplete_details", "output", "usage"})


def usage_object(usage: Usage, reasoning_tokens: int = 0) -> Obj:
    """A ``ResponseUsage`` (the details the SDK requires, at zero where this server has nothing to say)."""
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    }


def response_object(id: str, model: str, created_at: int, echo: Mapping[str, object] | None = None) -> Obj:
    """The response object's fields in OpenAI's order, the request's settings (``echo``) over the defaults."""
    obj: Obj = {
        "id": id,
        "object": "response",
        "created_at": created_at,
        "status": "in_progress",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": None,
        "max_tool_calls": None,
        "model": model,
        "output": [],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "service_tier": "default",
        "store": True,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": None,
        "user": None,
        "metadata": {},
    }
    if echo:
        obj.update(echo)
    return obj


_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode  # one encoder, made once


def _json(obj: object) -> bytes:
    return _encode(obj).encode()


def _quoted(text: str) -> bytes:
    return encode_basestring(text).encode()


class _Item:
    """The output item being written: its kind, place and text so far."""

    __slots__ = ("call", "delta_frame", "id", "index", "kind", "name", "parts", "where")

    def __init__(self, kind: str, id: str, index: int, call: str = "", name: str = "") -> None:
        self.kind, self.id, self.index = kind, id, index
        self.call, self.name = call, name
        self.parts: list[str] = []
        self.delta_frame = b""  # a delta's frame, but for its sequence number (%d) and quoted text (%b)
        # The fields that place its events: item_id, output_index (and content_index), as JSON.
        self.where = b'"item_id":%b,"output_index":%d' % (_quoted(id), index)


class ResponsesReplyWriter:
    """One Responses API reply as a stream (``start``/``write``) or a body (``body``).

    Each object is encoded once: the request's echo when the writer is made, an item's text when it ends
    (spliced into its ``.done`` events, the item and the final response), so a reply costs a few small JSON
    encodings besides its deltas."""

    keepalive = KEEPALIVE

    __slots__ = (
        "_base",
        "_calls",
        "_final",
        "_head",
        "_hex",
        "_item",
        "_on_end",
        "_output",
        "_output_json",
        "_seq",
    )

    def __init__(
        self,
        *,
        id: str,
        model: str,
        created_at: int,
        echo: Mapping[str, object] | None = None,
        on_end: Callable[[Obj], None] | None = None,
    ) -> None:
        """``echo``: the response object's fields that restate the request (``instructions``, ``tools``,
        ``tool_choice``, ``text``, ``temperature``, …); ``on_end(response)``: called once with the final
        response of a reply that ended (completed or incomplete)."""
        self._base = response_object(id, model, created_at, echo)
        # The response object's JSON but for the fields that change: "status" (the first of them) onwards.
        base = _json({k: v for k, v in self._base.items() if k not in _CHANGING})
        self._head = base[:-1]
        self._hex = id.partition("_")[2] or id
        self._on_end = on_end
        self._seq = itertools.count()  # the sequence numbers
        self._output: list[Obj] = []  # the items that have ended
        self._output_json: list[bytes] = []  # ... and their JSON
        self._item: _Item | None = None  # the open one
        self._calls: dict[int, _Item] = {}  # a call's index -> its item
        self._final: Obj | None = None

    # -- frames ----------------------------------------------------------------------------------------

    def _raw(self, type: bytes, fields: bytes) -> bytes:
        """One event: ``fields``, the JSON of its fields after ``type`` and ``sequence_number``."""
        return b'event: %b\ndata: {"type":"%b","sequence_number":%d,%b}\n\n' % (
            type,
            type,
            next(self._seq),
            fields,
        )

    def _event(self, type: str, fields: Obj) -> bytes:
        return self._raw(type.encode(), _json(fields)[1:-1])

    def _response(
        self, status: str, *, usage: bytes = b"null", error: bytes = b"null", details: bytes = b"null"
    ) -> bytes:
        output = b",".join(self._output_json)
        return b'%b,"status":"%b","error":%b,"incomplete_details":%b,"output":[%b],"usage":%b}' % (
            self._head,
            status.encode(),
            error,
            details,
            output,
            usage,
        )

    def _snapshot(self, status: str, **fields: object) -> Obj:
        return {**self._base, "status": status, "output": list(self._output), **fields}

    def start(self, sent: float | None = None) -> Sequence[bytes]:
        response = b'"response":' + self._response("in_progress")
        return (self._raw(b"response.created", response), self._raw(b"response.in_progress", response))

    def write(self, event: ReplyEvent, sent: float | None = None) -> Sequence[bytes]:
        t = type(event)
        if t is TextDelta or t is ReasoningDelta:  # the token path: one bytes format per delta
            text: str = event.text  # type: ignore[union-attr]
            if not text:
                return ()
            item = self._item
            if item is not None and item.kind is (_MESSAGE if t is TextDelta else _REASONING):
                item.parts.append(text)
                return (item.delta_frame % (next(self._seq), encode_basestring(text).encode()),)
            out = self._close("completed")
            item = self._open(_MESSAGE if t is TextDelta else _REASONING, out)
            item.parts.append(text)
            out.append(item.delta_frame % (next(self._seq), encode_basestring(text).encode()))
            return out
        item = self._item
        if t is CallStarted:
            assert isinstance(event, CallStarted)
            out = self._close("completed")
            index = len(self._output)
            item = self._item = _Item("function_call", f"fc_{self._hex}_{index}", index, event.id, event.name)
            self._calls[event.index] = item
            added = self._call_item(item, "in_progress")
            out.append(
                self._raw(b"response.output_item.added", b'"output_index":%d,"item":%b' % (index, added))
            )
            return out
        if t is CallArguments:
            assert isinstance(event, CallArguments)
            call = self._calls[event.index]
            call.parts.append(event.text)
            fields = b'%b,"delta":%b' % (call.where, _quoted(event.text))
            return (self._raw(b"response.function_call_arguments.delta", fields),)
        if t is CallEnded:
            assert isinstance(event, CallEnded)
            call = self._calls[event.index]
            if call is not item:  # already closed (a later item began)
                return ()
            return self._close("completed")
        if t is ReplyEnded:
            assert isinstance(event, ReplyEnded)
            return self._end(event)
        assert isinstance(event, ReplyFailed)
        return self._fail(event.error)

    def _open(self, kind: str, out: list[bytes]) -> _Item:
        index = len(self._output)
        prefix = "msg" if kind is _MESSAGE else "rs"
        item = self._item = _Item(kind, f"{prefix}_{self._hex}_{index}", index)
        where = item.where + b',"content_index":0'
        quoted = _quoted(item.id)
        if kind is _MESSAGE:
            added = (
                b'{"id":%b,"type":"message","status":"in_progress","content":[],"role":"assistant"}' % quoted
            )
            part = b'{"type":"output_text","annotations":[],"logprobs":[],"text":""}'
            delta = b"response.output_text.delta"
            tail = b',"logprobs":[]'
        else:
            added = b'{"id":%b,"type":"reasoning","summary":[],"content":[],"status":"in_progress"}' % quoted
            part = b'{"type":"reasoning_text","text":""}'
            delta = b"response.reasoning_text.delta"
            tail = b""
        out.append(self._raw(b"response.output_item.added", b'"output_index":%d,"item":%b' % (index, added)))
        out.append(self._raw(b"response.content_part.added", b'%b,"part":%b' % (where, part)))
        fixed = b'event: %b\ndata: {"type":"%b",%b%b,"sequence_number":' % (delta, delta, where, tail)
        item.delta_frame = fixed.replace(b"%", b"%%") + b'%d,"delta":%b}\n\n'
        return item

    def _call_item(self, item: _Item, status: str) -> bytes:
        return b'{"id":%b,"type":"function_call","status":"%b","arguments":%b,"call_id":%b,"name":%b}' % (
            _quoted(item.id),
            status.encode(),
            _quoted("".join(item.parts)),
            _quoted(item.call),
            _quoted(item.name),
        )

    def _close(self, status: str) -> list[bytes]:
        """The events that end the open item (none when no item is open); it joins the output."""
        item, out = self._item, list[bytes]()
        if item is None:
            return out
        self._item = None
        text = "".join(item.parts)
        quoted = _quoted(text)
        done: Obj
        if item.kind == "function_call":
            fields = b'%b,"name":%b,"arguments":%b' % (item.where, _quoted(item.name), quoted)
            out.append(self._raw(b"response.function_call_arguments.done", fields))
            done_json = self._call_item(item, status)
            done = {
                "id": item.id,
                "type": "function_call",
                "status": status,
                "arguments": text,
                "call_id": item.call,
                "name": item.name,
            }
        else:
            where = item.where + b',"content_index":0'
            if item.kind is _MESSAGE:
                part = b'{"type":"output_text","annotations":[],"logprobs":[],"text":%b}' % quoted
                out.append(
                    self._raw(b"response.output_text.done", b'%b,"text":%b,"logprobs":[]' % (where, quoted))
                )
                done_json = b'{"id":%b,"type":"message","status":"%b","content":[%b],"role":"assistant"}' % (
                    _quoted(item.id),
                    status.encode(),
                    part,
                )
                content: Obj = {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
                done = {
                    "id": item.id,
                    "type": "message",
                    "status": status,
                    "content": [content],
                    "role": "assistant",
                }
            else:
                part = b'{"type":"reasoning_text","text":%b}' % quoted
                out.append(self._raw(b"response.reasoning_text.done", b'%b,"text":%b' % (where, quoted)))
                done_json = b'{"id":%b,"type":"reasoning","summary":[],"content":[%b],"status":"%b"}' % (
                    _quoted(item.id),
                    part,
                    status.encode(),
                )
                content = {"type": "reasoning_text", "text": text}
                done = {
                    "id": item.id,
                    "type": "reasoning",
                    "summary": [],
                    "content": [content],
                    "status": status,
                }
            out.append(self._raw(b"response.content_part.done", b'%b,"part":%b' % (where, part)))
        out.append(
            self._raw(b"response.output_item.done", b'"output_index":%d,"item":%b' % (item.index, done_json))
        )
        self._output.append(done)
        self._output_json.append(done_json)
        return out

    def _end(self, event: ReplyEnded) -> list[bytes]:
        cut = event.reason == "length"
        if self._item is None and not self._output:  # nothing was said: an empty answer, still an answer
            out: list[bytes] = []
            self._open(_MESSAGE, out)
            out += self._close("incomplete" if cut else "completed")
        else:
            out = self._close("incomplete" if cut else "completed")
        usage = usage_object(event.usage, event.reasoning_tokens)
        if cut:
            final = self._snapshot("incomplete", incomplete_details=_INCOMPLETE, usage=usage)
            response = self._response("incomplete", usage=_json(usage), details=_json(_INCOMPLETE))
            out.append(self._raw(b"response.incomplete", b'"response":' + response))
        else:
            final = self._snapshot("completed", usage=usage)
            response = self._response("completed", usage=_json(usage))
            out.append(self._raw(b"response.completed", b'"response":' + response))
        self._final = final
        if self._on_end is not None:
            on_end, self._on_end = self._on_end, None
            on_end(final)
        return out

    def _fail(self, error: TokenRelayError) -> list[bytes]:
        out = [self._event("error", {"code": error.code, "message": error.message, "param": error.param})]
        out += self._close("incomplete")
        # ResponseError.code is one of OpenAI's own codes: a failure of this server is "server_error".
        failed = {"code": "server_error", "message": error.message}
        out.append(
            self._raw(b"response.failed", b'"response":' + self._response("failed", error=_json(failed)))
        )
        self._on_end = None
        return out

    # -- a whole reply ---------------------------------------------------------------------------------

    def body(self, reply: Reply) -> bytes:
        """The final response object: the reply's events written through this writer, its last event's
        ``response`` (so a body says what the stream said)."""
        events: list[ReplyEvent] = []
        if reply.reasoning:
            events.append(ReasoningDelta(reply.reasoning))
        if reply.text:
            events.append(TextDelta(reply.text, ()))
        for i, call in enumerate(reply.calls):
            events.append(CallStarted(i, call.id, call.name))
            if call.arguments:
                events.append(CallArguments(i, call.arguments))
            if i < len(reply.calls) - 1 or reply.end.reason != "length":
                events.append(CallEnded(i))
        self.start()
        for event in events:
            self.write(event)
        self.write(reply.end)
        assert self._final is not None
        return json_bytes(self._final)

    @property
    def final(self) -> Obj | None:
        """The final response object once the reply has ended (``None`` before, or after a failure)."""
        return self._final

    error_body = staticmethod(openai_error_body)

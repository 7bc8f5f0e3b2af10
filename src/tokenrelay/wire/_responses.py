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

Standard library only. JSON is written with ``ensure_ascii=False``.
"""

from __future__ import annotations

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


def _frame(type: str, obj: Obj) -> bytes:
    return b"event: " + type.encode() + b"\ndata: " + json_bytes(obj) + b"\n\n"


class _Item:
    """The output item being written: its kind, place and text so far."""

    __slots__ = ("call", "id", "index", "kind", "name", "parts", "text_head")

    def __init__(self, kind: str, id: str, index: int, call: str = "", name: str = "") -> None:
        self.kind, self.id, self.index = kind, id, index
        self.call, self.name = call, name
        self.parts: list[str] = []
        self.text_head = b""  # the delta frame's fixed part, up to its sequence number


class ResponsesReplyWriter:
    """One Responses API reply as a stream (``start``/``write``) or a body (``body``)."""

    keepalive = KEEPALIVE

    __slots__ = ("_base", "_calls", "_final", "_hex", "_item", "_on_end", "_output", "_seq")

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
        self._hex = id.partition("_")[2] or id
        self._on_end = on_end
        self._seq = 0
        self._output: list[Obj] = []  # the items that have ended
        self._item: _Item | None = None  # the open one
        self._calls: dict[int, _Item] = {}  # a call's index -> its item
        self._final: Obj | None = None

    # -- frames ----------------------------------------------------------------------------------------

    def _event(self, type: str, fields: Obj) -> bytes:
        seq = self._seq
        self._seq = seq + 1
        return _frame(type, {"type": type, "sequence_number": seq, **fields})

    def _snapshot(self, status: str, **fields: object) -> Obj:
        return {**self._base, "status": status, "output": list(self._output), **fields}

    def start(self, sent: float | None = None) -> Sequence[bytes]:
        response = self._snapshot("in_progress")
        return (
            self._event("response.created", {"response": response}),
            self._event("response.in_progress", {"response": response}),
        )

    def write(self, event: ReplyEvent, sent: float | None = None) -> Sequence[bytes]:
        t = type(event)
        item = self._item
        if t is TextDelta or t is ReasoningDelta:
            text: str = event.text  # type: ignore[union-attr]
            if not text:
                return ()
            kind = "message" if t is TextDelta else "reasoning"
            if item is not None and item.kind == kind:
                item.parts.append(text)
                seq = self._seq
                self._seq = seq + 1
                return (
                    b"".join(
                        (
                            item.text_head,
                            str(seq).encode(),
                            b',"delta":',
                            encode_basestring(text).encode(),
                            b"}\n\n",
                        )
                    ),
                )
            out = self._close("completed")
            item = self._open(kind, out)
            item.parts.append(text)
            seq = self._seq
            self._seq = seq + 1
            out.append(
                b"".join(
                    (
                        item.text_head,
                        str(seq).encode(),
                        b',"delta":',
                        encode_basestring(text).encode(),
                        b"}\n\n",
                    )
                )
            )
            return out
        if t is CallStarted:
            assert isinstance(event, CallStarted)
            out = self._close("completed")
            index = len(self._output)
            item = self._item = _Item("function_call", f"fc_{self._hex}_{index}", index, event.id, event.name)
            self._calls[event.index] = item
            out.append(
                self._event(
                    "response.output_item.added",
                    {"output_index": index, "item": self._call_item(item, "in_progress")},
                )
            )
            return out
        if t is CallArguments:
            assert isinstance(event, CallArguments)
            call = self._calls[event.index]
            call.parts.append(event.text)
            return (
                self._event(
                    "response.function_call_arguments.delta",
                    {"item_id": call.id, "output_index": call.index, "delta": event.text},
                ),
            )
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
        prefix = "msg" if kind == "message" else "rs"
        item = self._item = _Item(kind, f"{prefix}_{self._hex}_{index}", index)
        where = {"item_id": item.id, "output_index": index, "content_index": 0}
        if kind == "message":
            added: Obj = {
                "id": item.id,
                "type": "message",
                "status": "in_progress",
                "content": [],
                "role": "assistant",
            }
            part: Obj = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
            delta = "response.output_text.delta"
            tail = b',"logprobs":[],"sequence_number":'
        else:
            added = {
                "id": item.id,
                "type": "reasoning",
                "summary": [],
                "content": [],
                "status": "in_progress",
            }
            part = {"type": "reasoning_text", "text": ""}
            delta = "response.reasoning_text.delta"
            tail = b',"sequence_number":'
        out.append(self._event("response.output_item.added", {"output_index": index, "item": added}))
        out.append(self._event("response.content_part.added", {**where, "part": part}))
        head = {"type": delta, **where}
        item.text_head = b"event: " + delta.encode() + b"\ndata: " + json_bytes(head)[:-1] + tail
        return item

    def _call_item(self, item: _Item, status: str) -> Obj:
        return {
            "id": item.id,
            "type": "function_call",
            "status": status,
            "arguments": "".join(item.parts),
            "call_id": item.call,
            "name": item.name,
        }

    def _close(self, status: str) -> list[bytes]:
        """The events that end the open item (none when no item is open); it joins the output."""
        item, out = self._item, list[bytes]()
        if item is None:
            return out
        self._item = None
        text = "".join(item.parts)
        if item.kind == "function_call":
            out.append(
                self._event(
                    "response.function_call_arguments.done",
                    {"item_id": item.id, "output_index": item.index, "name": item.name, "arguments": text},
                )
            )
            done = self._call_item(item, status)
        else:
            where = {"item_id": item.id, "output_index": item.index, "content_index": 0}
            if item.kind == "message":
                part: Obj = {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
                out.append(self._event("response.output_text.done", {**where, "text": text, "logprobs": []}))
                done = {
                    "id": item.id,
                    "type": "message",
                    "status": status,
                    "content": [part],
                    "role": "assistant",
                }
            else:
                part = {"type": "reasoning_text", "text": text}
                out.append(self._event("response.reasoning_text.done", {**where, "text": text}))
                done = {
                    "id": item.id,
                    "type": "reasoning",
                    "summary": [],
                    "content": [part],
                    "status": status,
                }
            out.append(self._event("response.content_part.done", {**where, "part": part}))
        out.append(self._event("response.output_item.done", {"output_index": item.index, "item": done}))
        self._output.append(done)
        return out

    def _end(self, event: ReplyEnded) -> list[bytes]:
        cut = event.reason == "length"
        if self._item is None and not self._output:  # nothing was said: an empty answer, still an answer
            out: list[bytes] = []
            self._open("message", out)
            out += self._close("incomplete" if cut else "completed")
        else:
            out = self._close("incomplete" if cut else "completed")
        usage = usage_object(event.usage, event.reasoning_tokens)
        if cut:
            final = self._snapshot("incomplete", incomplete_details=_INCOMPLETE, usage=usage)
            out.append(self._event("response.incomplete", {"response": final}))
        else:
            final = self._snapshot("completed", usage=usage)
            out.append(self._event("response.completed", {"response": final}))
        self._final = final
        if self._on_end is not None:
            on_end, self._on_end = self._on_end, None
            on_end(final)
        return out

    def _fail(self, error: TokenRelayError) -> list[bytes]:
        out = [self._event("error", {"code": error.code, "message": error.message, "param": error.param})]
        out += self._close("incomplete")
        # ResponseError.code is one of OpenAI's own codes: a failure of this server is "server_error".
        failed = self._snapshot("failed", error={"code": "server_error", "message": error.message})
        out.append(self._event("response.failed", {"response": failed}))
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

"""The OpenAI wire shapes, written: streamed chunks as SSE frames, whole responses and errors.

Reading them back (a stream's chunks, an error body) is ``_chat_reader``.

Standard library only, no clock, no randomness: ``id``, ``created`` and ``model`` are plain values the caller
passes in. The field set is what the official SDKs read (``openai.types.chat.ChatCompletionChunk`` and
friends; the tests validate every shape with them and read the frames with the SDK's own SSE decoder):

- ``chat.completion.chunk``: the first chunk carries ``delta.role``, then ``delta.content`` chunks, then one
  chunk with an empty delta and ``finish_reason``; with ``stream_options.include_usage`` every chunk has
  ``"usage": null`` and a last chunk has ``"choices": []`` and the usage.
- tool calls (issue 21): a call's first delta carries ``index``, ``id``, ``type: "function"``,
  ``function.name`` and ``function.arguments: ""``; its later deltas only ``index`` and an ``arguments``
  fragment; the finish chunk says ``"tool_calls"``. A whole response has ``message.tool_calls`` (and
  ``content: null`` when the reply had no text).
- ``text_completion`` (legacy ``/v1/completions``): ``choices[].text`` instead of a delta.
- ``data: [DONE]`` ends the stream; an in-stream failure is ``data: {"error": {...}}``.
- ``return_token_ids`` (vLLM's extension, which tokenrelay's server honours too, so one tokenrelay can be
  another's upstream): every choice chunk carries ``token_ids``, the ids consumed since the previous chunk, and
  the first chunk carries ``prompt_token_ids`` (top level in a chat chunk, in the choice of a text chunk, as
  vLLM puts them).

- ``stream_options.include_step_times`` (tokenrelay's extension, for the doctor's lanes): every chunk gets a
  top-level ``"tokenrelay"`` object (:func:`timed_frame`), a field the official SDKs keep as an extra.

JSON is written with ``ensure_ascii=False``: a Devanagari letter costs 3 bytes on the wire, not 6.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from json.encoder import encode_basestring  # the C string quoter json.dumps(ensure_ascii=False) uses
from typing import TYPE_CHECKING

from tokenrelay._errors import TokenRelayError, UseAfterFinishError
from tokenrelay._stream import Usage

if TYPE_CHECKING:
    from tokenrelay._stream import StepTime

__all__ = [
    "DONE",
    "ChatChunkWriter",
    "TextChunkWriter",
    "chat_completion",
    "error_event",
    "json_bytes",
    "text_completion",
    "timed_frame",
]

#: The frame that ends every OpenAI stream.
DONE = b"data: [DONE]\n\n"


def json_bytes(obj: object) -> bytes:
    """Compact UTF-8 JSON, non-ASCII kept as is (what Starlette's JSONResponse writes too)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


class _ChunkWriter:
    """The part every chunk of one stream shares, rendered once: the server calls a writer once per token.
    After ``finish()`` only ``usage()`` follows; another ``finish()`` is ``b""``, other chunks raise."""

    __slots__ = ("_ended", "_head", "_prompt_ids", "_tail")

    def __init__(
        self, obj: str, id: str, model: str, created: int, system_fingerprint: str | None, include_usage: bool
    ) -> None:
        self._prompt_ids: list[int] | None = None
        self._ended = False
        fields = {
            "id": id,
            "object": obj,
            "created": created,
            "model": model,
            "system_fingerprint": system_fingerprint,
        }
        self._head = b"data: " + json_bytes(fields)[:-1] + b',"choices":['
        self._tail = b"]" + (b',"usage":null' if include_usage else b"") + b"}\n\n"

    def usage(self, usage: Usage, reasoning_tokens: int = 0) -> bytes:
        """The ``stream_options.include_usage`` chunk: no choices, the token counts."""
        return self._head + b'],"usage":' + json_bytes(usage.to_openai(reasoning_tokens)) + b"}\n\n"

    def _frame(self, choice: dict[str, object]) -> bytes:
        return self._head + json_bytes(choice) + self._tail

    def prompt_token_ids(self, ids: Sequence[int]) -> None:
        """Put ``prompt_token_ids`` in the next chunk written (``return_token_ids``)."""
        self._prompt_ids = list(ids)

    def _take_prompt_ids(self) -> list[int] | None:
        if self._ended:  # every choice chunk but delta() starts here
            raise self._after_finish()
        ids, self._prompt_ids = self._prompt_ids, None
        return ids

    def _after_finish(self) -> UseAfterFinishError:
        return UseAfterFinishError(f"{type(self).__name__}: a chunk after finish()")

    def _last(self, choice: dict[str, object]) -> bytes:
        frame = b"" if self._ended else self._frame(choice)
        self._ended = True
        return frame


class ChatChunkWriter(_ChunkWriter):
    """The frames of one ``chat.completion.chunk`` stream (one choice, index 0), as SSE bytes.

    Create it once per stream: :meth:`delta` then quotes the text (the C quoter ``json.dumps`` uses) and joins
    it between bytes rendered once, some 30 times cheaper than dumping a dict per token. Text with a lone
    surrogate cannot be written (it is not Unicode text). A JSON string never holds a raw line break, so a
    chunk is always exactly one ``data:`` line.
    """

    __slots__ = ("_content_head", "_content_tail", "_reasoning_head")

    def __init__(
        self,
        *,
        id: str,
        model: str,
        created: int,
        system_fingerprint: str | None = None,
        include_usage: bool = False,
    ) -> None:
        super().__init__("chat.completion.chunk", id, model, created, system_fingerprint, include_usage)
        self._content_head = self._head + b'{"index":0,"delta":{"content":'
        self._reasoning_head = self._head + b'{"index":0,"delta":{"reasoning_content":'
        self._content_tail = b'},"logprobs":null,"finish_reason":null}' + self._tail

    def _frame(self, choice: dict[str, object]) -> bytes:
        prompt_ids = self._take_prompt_ids()
        if prompt_ids is None:
            return super()._frame(choice)
        return (
            self._head
            + json_bytes(choice)
            + b'],"prompt_token_ids":'
            + json_bytes(prompt_ids)
            + self._tail[1:]
        )

    def role(self, role: str = "assistant") -> bytes:
        """The first chunk: the role, and empty content."""
        return self._frame(
            {"index": 0, "delta": {"role": role, "content": ""}, "logprobs": None, "finish_reason": None}
        )

    def delta_with_ids(self, text: str, token_ids: Sequence[int]) -> bytes:
        """A content delta and the ids it came from (``return_token_ids``)."""
        delta = {"content": text}
        return self._frame(
            {
                "index": 0,
                "delta": delta,
                "logprobs": None,
                "finish_reason": None,
                "token_ids": list(token_ids),
            }
        )

    def delta(self, text: str) -> bytes:
        """A content delta."""
        if self._ended:
            raise self._after_finish()
        # Joining bytes: concatenating str would widen the whole frame to the text's widest character first.
        return b"".join((self._content_head, encode_basestring(text).encode(), self._content_tail))

    def reasoning(self, text: str, token_ids: Sequence[int] | None = None) -> bytes:
        """A reasoning delta: ``delta.reasoning_content`` (the field llama-server, SGLang and DeepSeek send)."""
        if token_ids is None:
            if self._ended:
                raise self._after_finish()
            return b"".join((self._reasoning_head, encode_basestring(text).encode(), self._content_tail))
        choice: dict[str, object] = {
            "index": 0,
            "delta": {"reasoning_content": text},
            "logprobs": None,
            "finish_reason": None,
        }
        if token_ids is not None:
            choice["token_ids"] = list(token_ids)
        return self._frame(choice)

    def tool_call(self, index: int, id: str, name: str, token_ids: Sequence[int] | None = None) -> bytes:
        """The first delta of the reply's ``index``-th tool call: its id and function name, no arguments yet.

        ``token_ids`` (``return_token_ids``): the ids consumed since the previous chunk."""
        call = {"index": index, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}
        return self._tool_frame(call, token_ids)

    def tool_arguments(self, index: int, text: str, token_ids: Sequence[int] | None = None) -> bytes:
        """A fragment of the ``index``-th tool call's arguments (the JSON text as the model wrote it)."""
        return self._tool_frame({"index": index, "function": {"arguments": text}}, token_ids)

    def _tool_frame(self, call: dict[str, object], token_ids: Sequence[int] | None) -> bytes:
        choice: dict[str, object] = {
            "index": 0,
            "delta": {"tool_calls": [call]},
            "logprobs": None,
            "finish_reason": None,
        }
        if token_ids is not None:
            choice["token_ids"] = list(token_ids)
        return self._frame(choice)

    def finish(self, finish_reason: str, token_ids: Sequence[int] | None = None) -> bytes:
        """The last choice chunk: an empty delta and why generation stopped (``stop``, ``length``, ...).

        ``token_ids`` (``return_token_ids``): the ids no delta carried, such as the end-of-sequence id."""
        choice: dict[str, object] = {
            "index": 0,
            "delta": {},
            "logprobs": None,
            "finish_reason": finish_reason,
        }
        if token_ids is not None:
            choice["token_ids"] = list(token_ids)
        return self._last(choice)


class TextChunkWriter(_ChunkWriter):
    """The frames of one legacy ``text_completion`` stream (``/v1/completions``, one choice)."""

    __slots__ = ("_text_head", "_text_tail")

    def __init__(
        self,
        *,
        id: str,
        model: str,
        created: int,
        system_fingerprint: str | None = None,
        include_usage: bool = False,
    ) -> None:
        super().__init__("text_completion", id, model, created, system_fingerprint, include_usage)
        self._text_head = self._head + b'{"text":'
        self._text_tail = b',"index":0,"logprobs":null,"finish_reason":null}' + self._tail

    def delta(self, text: str) -> bytes:
        """A text delta."""
        if self._ended:
            raise self._after_finish()
        return b"".join((self._text_head, encode_basestring(text).encode(), self._text_tail))

    def _frame(self, choice: dict[str, object]) -> bytes:
        prompt_ids = self._take_prompt_ids()
        if prompt_ids is not None:
            choice["prompt_token_ids"] = prompt_ids
        return super()._frame(choice)

    def delta_with_ids(self, text: str, token_ids: Sequence[int]) -> bytes:
        """A text delta and the ids it came from (``return_token_ids``)."""
        choice = {
            "text": text,
            "index": 0,
            "logprobs": None,
            "finish_reason": None,
            "token_ids": list(token_ids),
        }
        return self._frame(choice)

    def finish(self, finish_reason: str, token_ids: Sequence[int] | None = None) -> bytes:
        """The last chunk: no text, and why generation stopped (``token_ids``: as ``ChatChunkWriter.finish``)."""
        choice: dict[str, object] = {"text": "", "index": 0, "logprobs": None, "finish_reason": finish_reason}
        if token_ids is not None:
            choice["token_ids"] = list(token_ids)
        return self._last(choice)


def timed_frame(frame: bytes, *, origin: float, sent: float, steps: Sequence[StepTime] | None) -> bytes:
    """``frame`` (one chunk's SSE frame) with tokenrelay's timing extension added as a top-level field:

    ``"tokenrelay": {"sent_ms": S, "steps_ms": [[START, END], ...], "source": "engine" | "arrival"}``

    Milliseconds since ``origin`` (the request, on the server's clock): ``sent_ms`` when the frame was handed
    to the server's socket, ``steps_ms`` one pair per token the chunk carries (its ids, or the end-of-sequence
    id of a finish chunk), when the engine step that produced it started and ended. ``source`` is
    ``"arrival"`` when the engine does not time its steps and both are the step's arrival at the server;
    absent when the chunk carries no token. A page aligns ``sent_ms`` with its own arrival times and places the
    steps before them: ``sent_ms - END`` is how long the token was held between the engine and the socket.
    """

    def ms(t: float) -> float:
        return round((t - origin) * 1000.0, 3)

    timing: dict[str, object] = {
        "sent_ms": ms(sent),
        "steps_ms": [[ms(s.start), ms(s.end)] for s in steps or ()],
    }
    if steps:
        timing["source"] = "engine" if all(s.measured for s in steps) else "arrival"
    # Every chunk frame ends with its object's closing brace and the blank line: the field goes before them.
    return frame[:-3] + b',"tokenrelay":' + json_bytes(timing) + b"}\n\n"


def chat_completion(
    *,
    id: str,
    model: str,
    created: int,
    content: str,
    finish_reason: str,
    usage: Usage,
    system_fingerprint: str | None = None,
    tool_calls: Sequence[tuple[str, str, str]] = (),
    reasoning: str | None = None,
    reasoning_tokens: int = 0,
) -> dict[str, object]:
    """A whole (non-streamed) ``chat.completion`` response body. ``tool_calls``: ``(id, name, arguments)``
    of each call the reply made; the message's ``content`` is then ``null`` when the reply had no text.
    ``reasoning``: the reply's reasoning, as ``message.reasoning_content``."""
    message: dict[str, object] = {
        "role": "assistant",
        "content": None if tool_calls and not content else content,
        "refusal": None,
    }
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if tool_calls:
        message["tool_calls"] = [
            {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}
            for id, name, arguments in tool_calls
        ]
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
    return {
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": system_fingerprint,
        "choices": [choice],
        "usage": usage.to_openai(reasoning_tokens),
    }


def text_completion(
    *,
    id: str,
    model: str,
    created: int,
    text: str,
    finish_reason: str,
    usage: Usage,
    system_fingerprint: str | None = None,
) -> dict[str, object]:
    """A whole (non-streamed) legacy ``text_completion`` response body."""
    choice = {"text": text, "index": 0, "logprobs": None, "finish_reason": finish_reason}
    return {
        "id": id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "system_fingerprint": system_fingerprint,
        "choices": [choice],
        "usage": usage.to_openai(),
    }


def error_event(error: TokenRelayError) -> bytes:
    """An in-stream error frame. The SDKs raise ``APIError`` with its message when they read one.

    ASCII JSON: a message that quotes the client's input must not fail on a lone surrogate in it.
    """
    return b"data: " + json.dumps(error.to_openai(), separators=(",", ":")).encode() + b"\n\n"

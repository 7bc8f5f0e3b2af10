"""The OpenAI wire shapes: streamed chunks as SSE frames, whole responses, errors, and a reader for streams.

Standard library only, no clock, no randomness: ``id``, ``created`` and ``model`` are plain values the caller
passes in. The field set is what the official SDKs read (``openai.types.chat.ChatCompletionChunk`` and
friends; the tests validate every shape with them and read the frames with the SDK's own SSE decoder):

- ``chat.completion.chunk``: the first chunk carries ``delta.role``, then ``delta.content`` chunks, then one
  chunk with an empty delta and ``finish_reason``; with ``stream_options.include_usage`` every chunk has
  ``"usage": null`` and a last chunk has ``"choices": []`` and the usage.
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
from typing import TYPE_CHECKING, TypeGuard

from ._errors import (
    AuthenticationError,
    InvalidRequestError,
    NotFoundError,
    PayloadTooLargeError,
    ProtocolError,
    RateLimitError,
    RequestTimeoutError,
    TokenRelayError,
    UseAfterFinishError,
)
from ._sse import ServerSentEvent
from ._stream import Usage

if TYPE_CHECKING:
    from ._stream import StepTime

__all__ = [
    "DONE",
    "ChatChunkWriter",
    "ChatStreamDecoder",
    "TextChunkWriter",
    "chat_completion",
    "choice_content",
    "error_event",
    "error_from_body",
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

    def usage(self, usage: Usage) -> bytes:
        """The ``stream_options.include_usage`` chunk: no choices, the token counts."""
        return self._head + b'],"usage":' + json_bytes(usage.to_openai()) + b"}\n\n"

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

    __slots__ = ("_content_head", "_content_tail")

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
) -> dict[str, object]:
    """A whole (non-streamed) ``chat.completion`` response body."""
    message = {"role": "assistant", "content": content, "refusal": None}
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
    return {
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": system_fingerprint,
        "choices": [choice],
        "usage": usage.to_openai(),
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


_BY_STATUS: dict[int, type[TokenRelayError]] = {
    400: InvalidRequestError,
    401: AuthenticationError,
    404: NotFoundError,
    408: RequestTimeoutError,
    413: PayloadTooLargeError,
    429: RateLimitError,
}
_BY_TYPE: dict[str, type[TokenRelayError]] = {
    cls.error_type: cls for cls in (InvalidRequestError, AuthenticationError, NotFoundError, RateLimitError)
}


def error_from_body(status_code: int, body: bytes, *, reason: str = "") -> TokenRelayError:
    """The error an error response (or an in-stream error, ``status_code=200``) stands for.

    An OpenAI-shaped body gives the message, ``type``, ``param`` and ``code``; any other body is quoted (at
    most 500 characters) so the caller sees what the server said. The class follows the HTTP status, else
    the error type; the instance keeps the real status.
    """
    text = body.decode("utf-8", "replace")
    message = f"HTTP {status_code} {reason}".strip() + f": {text[:500]}"
    error_type, param, code = "", None, None
    try:
        payload = json.loads(text)
    except ValueError:
        payload = None
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, str):
        message = error
    elif isinstance(error, dict) and isinstance(error.get("message"), str):
        message = error["message"]
        error_type = str(error.get("type") or "")
        param = error["param"] if isinstance(error.get("param"), str) else None
        code = str(error["code"]) if error.get("code") is not None else None
    elif isinstance(payload, dict) and isinstance(payload.get("detail"), str):  # FastAPI's HTTPException
        message = payload["detail"]
    cls = _BY_STATUS.get(status_code) or _BY_TYPE.get(error_type)
    if cls is None:
        cls = InvalidRequestError if 400 <= status_code < 500 else TokenRelayError
    exc = cls(message, param=param, code=code)
    if status_code != 200:
        exc.status_code = status_code
    return exc


def _is_count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)  # JSON's true is not a number


def choice_content(chunk: dict[str, object]) -> tuple[str, str | None] | None:
    """The text and ``finish_reason`` that a parsed chunk's choice 0 carries; ``None`` for an object that is
    not a chunk (no ``choices`` list).

    The one reading of a chunk's choices (the client's decoder and the doctor both use it; ``web/chat.js``
    follows the same rules, checked on the shared ``tests/vectors/chat_chunks.json``): the choice whose
    ``index`` is 0 (a missing index is 0), its ``delta.content`` (chat) or ``text`` (legacy completions) when
    it is a string, and its ``finish_reason`` when it is a string; an empty list (the usage chunk) adds "".
    """
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        return None
    for choice in choices:
        if isinstance(choice, dict) and choice.get("index", 0) == 0:  # tokenrelay streams one choice
            delta = choice.get("delta")
            piece = delta.get("content") if isinstance(delta, dict) else choice.get("text")
            reason = choice.get("finish_reason")
            return (piece if isinstance(piece, str) else ""), (reason if isinstance(reason, str) else None)
    return "", None


class ChatStreamDecoder:
    """Reads the events of a chat (or legacy text) completion stream: ``feed(event) -> text delta``.

    Sans-I/O, one per stream. ``[DONE]`` or a ``finish_reason`` makes :attr:`finished` true; a stream that
    ends before that was cut off; events after ``[DONE]`` add nothing. An in-stream ``{"error": ...}`` raises
    the matching :class:`TokenRelayError`; a chunk that is not JSON, or not an object, or whose ``usage`` has
    no integer token counts, raises :class:`ProtocolError`. An object without a ``choices`` list is not a
    chunk and adds nothing (:attr:`not_chunks` counts them). Choices are read by :func:`choice_content`.
    """

    __slots__ = ("done", "finish_reason", "id", "model", "not_chunks", "usage")

    def __init__(self) -> None:
        self.done = False  # [DONE] seen
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.id: str | None = None
        self.model: str | None = None
        self.not_chunks = 0

    @property
    def finished(self) -> bool:
        return self.done or self.finish_reason is not None

    def feed(self, event: ServerSentEvent) -> str:
        """The content this event adds (``""`` when none)."""
        if self.done:
            return ""
        if event.data == "[DONE]":
            self.done = True
            return ""
        try:
            chunk = json.loads(event.data)
        except ValueError as exc:
            raise ProtocolError(f"stream chunk is not JSON: {event.data[:200]!r}") from exc
        if not isinstance(chunk, dict):
            raise ProtocolError(f"stream chunk is not a JSON object: {event.data[:200]!r}")
        if chunk.get("error") is not None:
            raise error_from_body(200, event.data.encode())
        if self.id is None and isinstance(chunk.get("id"), str):
            self.id, self.model = chunk["id"], chunk.get("model")
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
            if not (_is_count(prompt) and _is_count(completion)):
                raise ProtocolError(f"stream chunk has a malformed usage: {usage!r:.200}")
            self.usage = Usage(prompt, completion)
        content = choice_content(chunk)
        if content is None:
            self.not_chunks += 1
            return ""
        text, reason = content
        if reason is not None:
            self.finish_reason = reason
        return text

"""The OpenAI wire shapes, read: a stream's chunks (``ChatStreamDecoder``, ``choice_content``) and the error an
error body stands for (``error_from_body``). ``_openai`` writes the same shapes.

Standard library only, sans-I/O: events in (``ServerSentEvent`` from ``SSEParser``), text and errors out.
"""

from __future__ import annotations

import json
from typing import TypeGuard

from ._errors import (
    AuthenticationError,
    InvalidRequestError,
    NotFoundError,
    PayloadTooLargeError,
    ProtocolError,
    RateLimitError,
    RequestTimeoutError,
    TokenRelayError,
)
from ._sse import ServerSentEvent
from ._stream import Usage

__all__ = ["ChatStreamDecoder", "choice_content", "error_from_body"]

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

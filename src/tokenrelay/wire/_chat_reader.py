"""The OpenAI wire shapes, read: a stream's chunks (``ChatStreamDecoder``, ``choice_content``,
``choice_tool_calls``) and the error an error body stands for (``error_from_body``). ``_chat`` writes the
same shapes.

Standard library only, sans-I/O: events in (``ServerSentEvent`` from ``SSEParser``), text and errors out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TypeGuard

from tokenrelay._errors import (
    AuthenticationError,
    InvalidRequestError,
    NotFoundError,
    PayloadTooLargeError,
    ProtocolError,
    RateLimitError,
    RequestTimeoutError,
    TokenRelayError,
    UnavailableError,
)
from tokenrelay._stream import Usage

from ._sse import ServerSentEvent

__all__ = [
    "ChatStreamDecoder",
    "StreamedToolCall",
    "ToolCallDelta",
    "choice_content",
    "choice_tool_calls",
    "error_from_body",
]

_BY_STATUS: dict[int, type[TokenRelayError]] = {
    400: InvalidRequestError,
    401: AuthenticationError,
    404: NotFoundError,
    408: RequestTimeoutError,
    413: PayloadTooLargeError,
    429: RateLimitError,
    529: UnavailableError,  # Anthropic's "overloaded"
}
_BY_TYPE: dict[str, type[TokenRelayError]] = {
    **{
        cls.error_type: cls
        for cls in (InvalidRequestError, AuthenticationError, NotFoundError, RateLimitError)
    },
    "overloaded_error": UnavailableError,  # the Messages API's (an in-stream error has no status of its own)
}


def error_from_body(status_code: int, body: bytes, *, reason: str = "") -> TokenRelayError:
    """The error an error response (or an in-stream error, ``status_code=200``) stands for.

    An OpenAI-shaped body gives the message, ``type``, ``param`` and ``code`` (an Anthropic-shaped one, the
    same ``error`` object without the last two, its message and type); any other body is quoted (at
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


def choice_reasoning(chunk: dict[str, object]) -> str:
    """The reasoning text a parsed chunk's choice 0 carries: ``delta.reasoning_content`` (tokenrelay,
    llama-server, SGLang, DeepSeek) or ``delta.reasoning`` (vLLM), ``""`` when none."""
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        return ""
    for choice in choices:
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                return ""
            piece = delta.get("reasoning_content")
            if not isinstance(piece, str):
                piece = delta.get("reasoning")
            return piece if isinstance(piece, str) else ""
    return ""


@dataclass(frozen=True)
class ToolCallDelta:
    """One entry of a chunk's ``delta.tool_calls``: the call's ``index``, and its ``id`` and ``name`` when the
    entry carries them (a call's first delta), and an ``arguments`` fragment (``""`` when none)."""

    index: int
    id: str | None
    name: str | None
    arguments: str


@dataclass
class StreamedToolCall:
    """A tool call as read so far: its ``arguments`` are the fragments joined."""

    index: int
    id: str | None
    name: str
    arguments: str = ""


def choice_tool_calls(chunk: dict[str, object]) -> list[ToolCallDelta]:
    """The tool-call deltas of a parsed chunk's choice 0 (read as :func:`choice_content` reads its text).

    ``delta.tool_calls`` absent or null is none. Otherwise it must be a list of objects each with an integer
    ``index`` (at least 0) and, when present, a ``function`` object; ``id`` and ``function.name`` are read when
    they are strings, ``function.arguments`` must be a string when present (null: no fragment). Anything else
    raises :class:`ProtocolError`. ``web/chat.js`` follows the same rules (``tests/vectors/chat_chunks.json``).
    """
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        return []
    choice = next((c for c in choices if isinstance(c, dict) and c.get("index", 0) == 0), None)
    delta = choice.get("delta") if choice is not None else None
    calls = delta.get("tool_calls") if isinstance(delta, dict) else None
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise ProtocolError(f"delta.tool_calls is not a list: {calls!r:.200}")
    out = []
    for call in calls:
        index = call.get("index") if isinstance(call, dict) else None
        if not isinstance(call, dict) or not _is_count(index) or index < 0:
            raise ProtocolError(f"a tool call delta without an integer index: {call!r:.200}")
        function = call.get("function")
        if function is None:
            function = {}
        if not isinstance(function, dict):
            raise ProtocolError(f"a tool call delta's function is not an object: {call!r:.200}")
        name, arguments, id = function.get("name"), function.get("arguments"), call.get("id")
        if arguments is not None and not isinstance(arguments, str):
            raise ProtocolError(f"a tool call delta's arguments are not a string: {call!r:.200}")
        out.append(
            ToolCallDelta(
                index,
                id if isinstance(id, str) else None,
                name if isinstance(name, str) else None,
                arguments or "",
            )
        )
    return out


class ChatStreamDecoder:
    """Reads the events of a chat (or legacy text) completion stream: ``feed(event) -> text delta``.

    Sans-I/O, one per stream. ``[DONE]`` or a ``finish_reason`` makes :attr:`finished` true; a stream that
    ends before that was cut off; events after ``[DONE]`` add nothing. An in-stream ``{"error": ...}`` raises
    the matching :class:`TokenRelayError`; a chunk that is not JSON, or not an object, or whose ``usage`` has
    no integer token counts, raises :class:`ProtocolError`. An object without a ``choices`` list is not a
    chunk and adds nothing (:attr:`not_chunks` counts them). Choices are read by :func:`choice_content`.

    Tool calls (:func:`choice_tool_calls`) gather in :attr:`tool_calls`, one per index in the order they
    started: a call's first delta must name its function (a fragment for an index never named is a
    :class:`ProtocolError`); later ones add ``arguments`` fragments (an ``id`` or ``name`` repeated on them is
    ignored). :attr:`tool_deltas` are those of the last event fed; :attr:`reasoning` is the reasoning so far,
    joined (:func:`choice_reasoning`), as the other dialects' decoders keep it.
    """

    __slots__ = (
        "_calls",
        "done",
        "finish_reason",
        "id",
        "model",
        "not_chunks",
        "reasoning",
        "tool_deltas",
        "usage",
    )

    def __init__(self) -> None:
        self.done = False  # [DONE] seen
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.id: str | None = None
        self.model: str | None = None
        self.not_chunks = 0
        self._calls: dict[int, StreamedToolCall] = {}
        self.tool_deltas: list[ToolCallDelta] = []
        self.reasoning = ""  # the reasoning text so far, joined (choice_reasoning)

    @property
    def finished(self) -> bool:
        return self.done or self.finish_reason is not None

    @property
    def tool_calls(self) -> list[StreamedToolCall]:
        """The reply's tool calls so far, in the order they started."""
        return list(self._calls.values())

    def _add_tool_deltas(self, deltas: list[ToolCallDelta]) -> None:
        for delta in deltas:
            call = self._calls.get(delta.index)
            if call is None:
                if not delta.name:
                    raise ProtocolError(f"tool call {delta.index}'s first delta has no function name")
                call = self._calls[delta.index] = StreamedToolCall(delta.index, delta.id, delta.name)
            call.arguments += delta.arguments

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
        self.tool_deltas = choice_tool_calls(chunk)
        thought = choice_reasoning(chunk)
        if thought:
            self.reasoning += thought
        if self.tool_deltas:
            self._add_tool_deltas(self.tool_deltas)
        text, reason = content
        if reason is not None:
            self.finish_reason = reason
        return text

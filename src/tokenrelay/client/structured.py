"""A JSON reply streamed as a value (issue 20): ``stream_json`` / ``astream_json`` over :func:`stream_chat`.

The request asks for JSON (``response_format``: ``json_object``, or ``json_schema`` from a JSON Schema or from
a type pydantic can describe); each text delta is fed once to one :class:`~tokenrelay.PartialJSON`, and every
delta that changed the value is yielded as a :class:`JSONUpdate` (its events and the snapshot). Nothing is
re-parsed while the reply streams: the snapshot is the parser's own, updated in place.

The end follows one rule: **check ``finish_reason`` before the final parse.**

- ``"length"`` (``max_tokens``) or ``"content_filter"``: :class:`~tokenrelay.TruncatedJSONError` carrying the
  snapshot, even when the text happens to be a whole JSON value (the server did not say it was done, so the
  value is not known to be complete; the openai SDK's ``LengthFinishReasonError`` is raised on the same rule).
- A stream that ends before ``[DONE]`` or a ``finish_reason`` (EOF, a broken connection): the same error,
  chained to the :class:`~tokenrelay.StreamTruncated` that says how it ended.
- Otherwise the parser's ``finish()``: the value, or ``TruncatedJSONError`` when the text stopped before the
  value did (a stop string, a model that ended early).
- Text that cannot become JSON raises :class:`~tokenrelay.JSONSyntaxError` as soon as it arrives, and the
  connection is closed.

Never a repaired or silently completed object. With a type (``schema=City``, ``schema=list[City]``, a
dataclass, a ``TypedDict``) the final text is validated once by pydantic (``TypeAdapter.validate_json``, as
the openai SDK's ``parse`` does) into :attr:`JSONResult.parsed`; a reply that is JSON but not valid raises
pydantic's ``ValidationError`` (a ``ValueError``). pydantic is imported only then: without it, a
:class:`~tokenrelay._extras.MissingExtraError` says what to install. A JSON Schema given as a mapping is sent
as is and not checked here (the server enforces it).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import aclosing, closing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast, overload

import httpx

from tokenrelay._errors import StreamTruncated, TruncatedJSONError
from tokenrelay._extras import MissingExtraError
from tokenrelay._json_events import JSONEvent, JSONValue
from tokenrelay._partial_json import PartialJSON
from tokenrelay.client.chat import ChatDelta, ChatResult, astream_chat, stream_chat
from tokenrelay.client.stream import DEFAULT_TIMEOUT
from tokenrelay.wire._sse import DEFAULT_MAX_EVENT_BYTES

if TYPE_CHECKING:
    from pydantic import TypeAdapter

__all__ = [
    "CUT_FINISH_REASONS",
    "JSONResult",
    "JSONUpdate",
    "astream_json",
    "response_format_for",
    "stream_json",
]

T = TypeVar("T")

#: The finish reasons that say the server stopped the reply before the model did: never a complete value.
CUT_FINISH_REASONS = frozenset({"length", "content_filter"})

_NAME = re.compile(r"[^A-Za-z0-9_-]+")  # what a json_schema name may not hold (1 to 64 of [A-Za-z0-9_-])


@dataclass(frozen=True)
class JSONUpdate:
    """The value changed: the events one text delta caused, and the snapshot after it.

    ``value`` is the parser's live snapshot (the same root object in every update, updated in place, so reading
    it costs nothing); copy it (``copy.deepcopy``) to keep the state at one moment. ``text`` is the delta,
    ``at`` when its chunk arrived (seconds since the request was sent). A delta that changed nothing (white
    space, digits of a number not yet complete) gives no update.
    """

    events: tuple[JSONEvent, ...]
    value: JSONValue
    text: str
    at: float


@dataclass(frozen=True)
class JSONResult(Generic[T]):
    """The last item: the final ``value``, ``parsed`` (the validated object when a type was given, else
    ``None``) and the chat stream's own result (``chat.text``, ``chat.finish_reason``, usage and timings)."""

    value: JSONValue
    parsed: T | None
    chat: ChatResult


def _pydantic_adapter(schema: object) -> TypeAdapter[Any]:
    try:
        from pydantic import TypeAdapter
    except ModuleNotFoundError as exc:
        raise MissingExtraError(
            f"stream_json(schema={schema!r:.80}) describes and validates the reply with pydantic, which is not "
            "installed: pip install pydantic (or pass a JSON Schema as a dict, which needs nothing)",
            name="pydantic",
        ) from exc
    return TypeAdapter(cast(Any, schema))


def response_format_for(
    schema: Mapping[str, object] | object | None,
    *,
    name: str | None = None,
    strict: bool | None = None,
) -> tuple[dict[str, object], TypeAdapter[Any] | None]:
    """The ``response_format`` a request carries for ``schema``, and the pydantic adapter that validates the reply
    (``None`` when nothing is validated here).

    ``None`` asks for any JSON object (``json_object``); a mapping is a JSON Schema, sent as is; anything else is
    a type pydantic describes (``model_json_schema``). ``name`` defaults to the type's name (else ``"reply"``),
    with the characters a schema name may not hold replaced by ``_``.
    """
    if schema is None:
        if name is not None or strict is not None:
            raise ValueError("name and strict describe a schema: give one (schema=...) or leave them out")
        return {"type": "json_object"}, None
    adapter = None
    if isinstance(schema, Mapping):
        json_schema: object = dict(schema)
    else:
        adapter = _pydantic_adapter(schema)
        json_schema = adapter.json_schema()
    if name is None:
        name = _NAME.sub("_", getattr(schema, "__name__", "") or "")[:64] or "reply"
    spec: dict[str, object] = {"name": name, "schema": json_schema}
    if strict is not None:
        spec["strict"] = strict
    return {"type": "json_schema", "json_schema": spec}, adapter


class _JSONRun:
    """One JSON reply read from its chat stream, shared by the sync and async loops."""

    def __init__(self, adapter: TypeAdapter[Any] | None) -> None:
        self.parser = PartialJSON()
        self.adapter = adapter

    def feed(self, delta: ChatDelta) -> JSONUpdate | None:
        events = self.parser.feed(delta.text)
        return JSONUpdate(tuple(events), self.parser.value, delta.text, delta.at) if events else None

    def cut(self, exc: StreamTruncated) -> TruncatedJSONError:
        message = f"the JSON reply was cut off: the stream ended before the server finished it ({exc})"
        return TruncatedJSONError(message, value=self.parser.value)

    def result(self, chat: ChatResult) -> JSONResult[Any]:
        if chat.finish_reason in CUT_FINISH_REASONS:
            why = "max_tokens" if chat.finish_reason == "length" else "the server's content filter"
            raise TruncatedJSONError(
                f"the JSON reply was cut off (finish_reason {chat.finish_reason!r}: {why} stopped it); "
                "its value is the snapshot so far, never a completed object",
                value=self.parser.value,
            )
        value = self.parser.finish()
        parsed = self.adapter.validate_json(chat.text) if self.adapter is not None else None
        return JSONResult(value, parsed, chat)


def _request(
    params: dict[str, object], schema: object, name: str | None, strict: bool | None
) -> TypeAdapter[Any] | None:
    if "response_format" in params:
        if schema is not None or name is not None or strict is not None:
            raise ValueError("give either response_format=... or schema=... (with name, strict), not both")
        return None
    params["response_format"], adapter = response_format_for(schema, name=name, strict=strict)
    return adapter


@overload
def stream_json(
    base_url: str,
    messages: Sequence[Mapping[str, object]],
    *,
    schema: type[T],
    name: str | None = None,
    strict: bool | None = None,
    model: str = "",
    client: httpx.Client | None = None,
    api_key: str | None = None,
    headers: Mapping[str, str] | None = None,
    include_usage: bool = True,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
    **params: object,
) -> Iterator[JSONUpdate | JSONResult[T]]: ...
@overload
def stream_json(
    base_url: str,
    messages: Sequence[Mapping[str, object]],
    *,
    schema: Mapping[str, object] | None = None,
    name: str | None = None,
    strict: bool | None = None,
    model: str = "",
    client: httpx.Client | None = None,
    api_key: str | None = None,
    headers: Mapping[str, str] | None = None,
    include_usage: bool = True,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
    **params: object,
) -> Iterator[JSONUpdate | JSONResult[None]]: ...
def stream_json(
    base_url: str,
    messages: Sequence[Mapping[str, object]],
    *,
    schema: object = None,
    name: str | None = None,
    strict: bool | None = None,
    model: str = "",
    client: httpx.Client | None = None,
    api_key: str | None = None,
    headers: Mapping[str, str] | None = None,
    include_usage: bool = True,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
    **params: object,
) -> Iterator[JSONUpdate | JSONResult[Any]]:
    """Stream a chat completion asked to be JSON: :class:`JSONUpdate` items as the value grows, then one
    :class:`JSONResult` (the rules of the end are in the module docstring).

    ``schema`` is ``None`` (any JSON object), a JSON Schema (a mapping) or a type pydantic can validate;
    ``name`` and ``strict`` go into ``response_format.json_schema``. Or pass ``response_format=...`` yourself
    (then nothing is validated here). The other arguments are :func:`stream_chat`'s.
    """
    adapter = _request(params, schema, name, strict)
    run = _JSONRun(adapter)
    chat = stream_chat(
        base_url, messages, model=model, client=client, api_key=api_key, headers=headers,
        include_usage=include_usage, max_event_bytes=max_event_bytes, timeout=timeout,
        **cast("dict[str, Any]", params),  # response_format and the sampling fields
    )  # fmt: skip
    with closing(chat):  # a syntax error (or a consumer that stops) closes the connection now, not at GC
        try:
            for item in chat:
                if isinstance(item, ChatResult):
                    yield run.result(item)
                elif isinstance(item, ChatDelta) and (update := run.feed(item)) is not None:  # not reasoning
                    yield update
        except StreamTruncated as exc:
            raise run.cut(exc) from exc


@overload
def astream_json(
    base_url: str,
    messages: Sequence[Mapping[str, object]],
    *,
    schema: type[T],
    name: str | None = None,
    strict: bool | None = None,
    model: str = "",
    client: httpx.AsyncClient | None = None,
    api_key: str | None = None,
    headers: Mapping[str, str] | None = None,
    include_usage: bool = True,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
    **params: object,
) -> AsyncIterator[JSONUpdate | JSONResult[T]]: ...
@overload
def astream_json(
    base_url: str,
    messages: Sequence[Mapping[str, object]],
    *,
    schema: Mapping[str, object] | None = None,
    name: str | None = None,
    strict: bool | None = None,
    model: str = "",
    client: httpx.AsyncClient | None = None,
    api_key: str | None = None,
    headers: Mapping[str, str] | None = None,
    include_usage: bool = True,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
    **params: object,
) -> AsyncIterator[JSONUpdate | JSONResult[None]]: ...
async def astream_json(
    base_url: str,
    messages: Sequence[Mapping[str, object]],
    *,
    schema: object = None,
    name: str | None = None,
    strict: bool | None = None,
    model: str = "",
    client: httpx.AsyncClient | None = None,
    api_key: str | None = None,
    headers: Mapping[str, str] | None = None,
    include_usage: bool = True,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
    **params: object,
) -> AsyncIterator[JSONUpdate | JSONResult[Any]]:
    """:func:`stream_json` for ``httpx.AsyncClient``."""
    adapter = _request(params, schema, name, strict)
    run = _JSONRun(adapter)
    chat = astream_chat(
        base_url, messages, model=model, client=client, api_key=api_key, headers=headers,
        include_usage=include_usage, max_event_bytes=max_event_bytes, timeout=timeout,
        **cast("dict[str, Any]", params),  # response_format and the sampling fields
    )  # fmt: skip
    async with aclosing(chat):
        try:
            async for item in chat:
                if isinstance(item, ChatResult):
                    yield run.result(item)
                elif isinstance(item, ChatDelta) and (update := run.feed(item)) is not None:  # not reasoning
                    yield update
        except StreamTruncated as exc:
            raise run.cut(exc) from exc

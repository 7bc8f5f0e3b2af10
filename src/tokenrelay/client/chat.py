"""Chat streams, sync and async (httpx): one reply read into text deltas, reasoning apart, and a result.

``stream_chat`` / ``astream_chat`` ask any of three APIs for the same chat (:data:`APIS`: OpenAI's Chat
Completions, the OpenAI Responses API, Anthropic's Messages API) and read each one's stream, with its own
sans-I/O decoder (``wire``), into the same items: :class:`ChatDelta` (answer text), :class:`ChatReasoning`
(reasoning, apart), then one :class:`ChatResult` with the finish reason, usage and the client-side timings.
The stream's end event (``[DONE]``, ``response.completed``, ``message_stop``) or a finish reason means it
finished; EOF before either raises :class:`StreamTruncated` (or, with ``allow_truncated=True``, a result with
``finished=False``). The socket work is ``stream.py``'s.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncGenerator, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import httpx

from tokenrelay._errors import StreamTruncated
from tokenrelay._stream import Usage
from tokenrelay.wire._chat_reader import ChatStreamDecoder
from tokenrelay.wire._messages_reader import MessagesStreamDecoder
from tokenrelay.wire._responses_reader import ResponsesStreamDecoder
from tokenrelay.wire._sse import DEFAULT_MAX_EVENT_BYTES, SSEParser

from .stream import (
    DEFAULT_TIMEOUT,
    ChunkArrival,
    _aread_limited,
    _is_event_stream,
    _read_limited,
    _response_error,
)

__all__ = [
    "APIS", "Api", "ChatDelta", "ChatReasoning", "ChatResult", "ClientTimings", "astream_chat", "stream_chat",
]  # fmt: skip


@dataclass(frozen=True)
class ClientTimings:
    """Seconds from sending the request: first byte, first token, the gaps between tokens, and the end."""

    time_to_first_byte: float | None
    time_to_first_token: float | None
    inter_token_gaps: tuple[float, ...]
    total: float


@dataclass(frozen=True)
class ChatDelta:
    """Text the model added, and when its chunk arrived (seconds since the request was sent)."""

    text: str
    at: float


@dataclass(frozen=True)
class ChatReasoning:
    """Reasoning text the model added (apart from the answer), and when its chunk arrived."""

    text: str
    at: float


@dataclass(frozen=True)
class ChatResult:
    """The last item of a chat stream. ``text`` is the answer; ``reasoning`` the reasoning, apart."""

    text: str
    finish_reason: str | None
    usage: Usage | None
    finished: bool  # [DONE] or a finish_reason arrived; False only with allow_truncated=True
    timings: ClientTimings
    chunks: tuple[ChunkArrival, ...]
    reasoning: str = ""


class _ChatRun:
    """One chat stream: its parser, its decoder, and the clock readings, shared by the sync and async loops."""

    def __init__(self, max_event_bytes: int, api: str = "chat") -> None:
        self.start = time.perf_counter()
        self.parser = SSEParser(max_event_bytes)
        self.decoder = _DECODERS[api]()
        self.chunks: list[ChunkArrival] = []
        self.deltas: list[ChatDelta] = []
        self.reasoning: list[str] = []

    def feed(self, chunk: bytes) -> list[ChatDelta | ChatReasoning]:
        at = time.perf_counter() - self.start
        self.chunks.append(ChunkArrival(at, len(chunk)))
        out: list[ChatDelta | ChatReasoning] = []
        for event in self.parser.feed(chunk):
            if self.decoder.done:
                break  # nothing after [DONE] belongs to the reply
            before = len(self.decoder.reasoning)  # each decoder's reasoning so far, joined
            text = self.decoder.feed(event)
            if len(self.decoder.reasoning) > before:
                thought = self.decoder.reasoning[before:]
                self.reasoning.append(thought)
                out.append(ChatReasoning(thought, at))
            if text:
                delta = ChatDelta(text, at)
                self.deltas.append(delta)
                out.append(delta)
        return out

    def result(self, cut: httpx.TransportError | None, allow_truncated: bool) -> ChatResult:
        total = time.perf_counter() - self.start
        decoder = self.decoder
        if not decoder.finished and not allow_truncated:
            how = f"the connection broke: {cut}" if cut is not None else "EOF"
            raise StreamTruncated(
                f"chat stream ended before its end event or a finish_reason ({how})"
            ) from cut
        times = [delta.at for delta in self.deltas]
        timings = ClientTimings(
            time_to_first_byte=self.chunks[0].at if self.chunks else None,
            time_to_first_token=times[0] if times else None,
            inter_token_gaps=tuple(b - a for a, b in itertools.pairwise(times)),
            total=total,
        )
        text = "".join(delta.text for delta in self.deltas)
        reasoning = "".join(self.reasoning)
        chunks = tuple(self.chunks)
        return ChatResult(
            text, decoder.finish_reason, decoder.usage, decoder.finished, timings, chunks, reasoning
        )


#: The APIs a chat stream can be asked of: ``"chat"`` (``/chat/completions``), ``"responses"``
#: (``/responses``, the OpenAI Responses API: the messages are its ``input``, ``max_tokens`` its
#: ``max_output_tokens``; the usage always comes) and ``"messages"`` (``/messages``, Anthropic's Messages API:
#: system turns become ``system``, ``max_tokens``, which it requires, is ``MESSAGES_MAX_TOKENS`` unless given,
#: the key goes as ``x-api-key``).
APIS = ("chat", "responses", "messages")
Api = Literal["chat", "responses", "messages"]
MESSAGES_MAX_TOKENS = 1024
ANTHROPIC_VERSION = "2023-06-01"
_DECODERS: dict[str, type[ChatStreamDecoder | ResponsesStreamDecoder | MessagesStreamDecoder]] = {
    "chat": ChatStreamDecoder,
    "responses": ResponsesStreamDecoder,
    "messages": MessagesStreamDecoder,
}


def _chat_request(
    base_url: str,
    messages: Sequence[Mapping[str, object]],
    model: str,
    include_usage: bool,
    api_key: str | None,
    headers: Mapping[str, str] | None,
    params: Mapping[str, object],
    api: Api = "chat",
) -> tuple[str, dict[str, str], dict[str, object]]:
    if api not in APIS:
        raise ValueError(f"api must be one of {', '.join(APIS)}, not {api!r}")
    if api == "messages":
        return _messages_request(base_url, messages, model, api_key, headers, params)
    if api == "responses":
        body: dict[str, object] = {"model": model, "input": list(messages), "stream": True}
        fields = dict(params)
        if "max_tokens" in fields:
            fields["max_output_tokens"] = fields.pop("max_tokens")
        body.update(fields)
        path = "/responses"
    else:
        body = {"model": model, "messages": list(messages), "stream": True}
        if include_usage:
            body["stream_options"] = {"include_usage": True}
        body.update(params)
        path = "/chat/completions"
    all_headers = {"Accept": "text/event-stream", **(headers or {})}
    if api_key:
        all_headers["Authorization"] = f"Bearer {api_key}"
    return base_url.rstrip("/") + path, all_headers, body


def _messages_request(
    base_url: str,
    messages: Sequence[Mapping[str, object]],
    model: str,
    api_key: str | None,
    headers: Mapping[str, str] | None,
    params: Mapping[str, object],
) -> tuple[str, dict[str, str], dict[str, object]]:
    """An Anthropic Messages request for the same chat (see :data:`APIS`)."""
    system = "\n\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "system")
    turns = [dict(m) for m in messages if m.get("role") != "system"]
    body: dict[str, object] = {"model": model, "messages": turns, "stream": True}
    body["max_tokens"] = MESSAGES_MAX_TOKENS
    if system:
        body["system"] = system
    body.update(params)
    all_headers = {"Accept": "text/event-stream", "anthropic-version": ANTHROPIC_VERSION, **(headers or {})}
    if api_key:
        all_headers["x-api-key"] = api_key
    return base_url.rstrip("/") + "/messages", all_headers, body


def stream_chat(
    base_url: str,
    messages: Sequence[Mapping[str, object]],
    *,
    model: str = "",
    client: httpx.Client | None = None,
    api_key: str | None = None,
    headers: Mapping[str, str] | None = None,
    include_usage: bool = True,
    allow_truncated: bool = False,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
    api: Api = "chat",
    **params: object,
) -> Generator[ChatDelta | ChatReasoning | ChatResult, None, None]:
    """Stream an OpenAI-compatible chat completion: :class:`ChatDelta` items (and :class:`ChatReasoning` for
    reasoning, apart), then one :class:`ChatResult`.

    ``base_url`` is the API root as the OpenAI SDK takes it (``http://host:port/v1``); ``params`` go into the
    request body (``max_tokens=...``, ``temperature=...``). ``api="responses"`` asks the OpenAI Responses API
    (``/responses``) instead, ``api="messages"`` Anthropic's Messages API (``/messages``), and reads its stream
    into the same results (``finish_reason`` in the chat API's terms: ``"stop"``, ``"length"``,
    ``"tool_calls"``).
    """
    url, all_headers, body = _chat_request(
        base_url, messages, model, include_usage, api_key, headers, params, api
    )
    http = client if client is not None else httpx.Client(timeout=timeout)
    try:
        run = _ChatRun(max_event_bytes, api)
        cut: httpx.TransportError | None = None
        with http.stream("POST", url, headers=all_headers, json=body) as response:
            if response.status_code != 200 or not _is_event_stream(response):
                raise _response_error(response, _read_limited(response))
            try:
                for chunk in response.iter_bytes():
                    yield from run.feed(chunk)
                    if run.decoder.done:
                        break
            except httpx.TransportError as exc:
                cut = exc
        yield run.result(cut, allow_truncated)
    finally:
        if client is None:
            http.close()


async def astream_chat(
    base_url: str,
    messages: Sequence[Mapping[str, object]],
    *,
    model: str = "",
    client: httpx.AsyncClient | None = None,
    api_key: str | None = None,
    headers: Mapping[str, str] | None = None,
    include_usage: bool = True,
    allow_truncated: bool = False,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
    api: Api = "chat",
    **params: object,
) -> AsyncGenerator[ChatDelta | ChatReasoning | ChatResult, None]:
    """:func:`stream_chat` for ``httpx.AsyncClient``."""
    url, all_headers, body = _chat_request(
        base_url, messages, model, include_usage, api_key, headers, params, api
    )
    http = client if client is not None else httpx.AsyncClient(timeout=timeout)
    try:
        run = _ChatRun(max_event_bytes, api)
        cut: httpx.TransportError | None = None
        async with http.stream("POST", url, headers=all_headers, json=body) as response:
            if response.status_code != 200 or not _is_event_stream(response):
                raise _response_error(response, await _aread_limited(response))
            try:
                async for chunk in response.aiter_bytes():
                    for delta in run.feed(chunk):
                        yield delta
                    if run.decoder.done:
                        break
            except httpx.TransportError as exc:
                cut = exc
        yield run.result(cut, allow_truncated)
    finally:
        if client is None:
            await http.aclose()

"""A streaming client, sync and async (httpx): events of any SSE URL, and OpenAI chat deltas.

A thin shell around the sans-I/O parts: one :class:`SSEParser` per connection, one
:class:`ChatStreamDecoder` per chat stream. The shell owns what they must not: sockets, the clock, sleeping.

- A response that is not an event stream (a status other than 200, or another content type) raises the
  :class:`TokenRelayError` its body describes; the message is the server's own.
- ``[DONE]`` or a ``finish_reason`` means a chat stream finished; EOF (or a broken connection) before either
  raises :class:`StreamTruncated`, or, with ``allow_truncated=True``, gives a result with ``finished=False``.
- Plain SSE endpoints may be followed across reconnections, as a browser's EventSource does: the
  ``Last-Event-ID`` header, the server's ``retry`` (capped), and HTTP 204 to stop.
- Every chunk read is recorded with its arrival time and size; chat results carry the timings.
- ``api="responses"``: the same chat stream asked of the OpenAI Responses API, read by
  ``ResponsesStreamDecoder`` into the same results.

At ~430 lines the module is over the usual size because every loop is written twice, for httpx's sync and
async clients, and the twins must stay line for line alike: split, each half would be a copy of the other's.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import anyio
import httpx

from tokenrelay._errors import ProtocolError, StreamTruncated, TokenRelayError
from tokenrelay._stream import Usage
from tokenrelay.wire._chat_reader import ChatStreamDecoder, error_from_body
from tokenrelay.wire._responses_reader import ResponsesStreamDecoder
from tokenrelay.wire._sse import DEFAULT_MAX_EVENT_BYTES, ServerSentEvent, SSEParser

__all__ = [
    "DEFAULT_TIMEOUT", "ChatDelta", "ChatResult", "ChunkArrival", "ClientTimings", "StreamLog",
    "aiter_events", "astream_chat", "iter_events", "stream_chat",
]  # fmt: skip

#: Reads may pause between tokens (a slow first token, a busy GPU): a minute before a read gives up.
DEFAULT_TIMEOUT = httpx.Timeout(10.0, read=60.0)
_MAX_ERROR_BODY = 64 * 1024  # an error page is quoted, not streamed forever


@dataclass(frozen=True, slots=True)
class ChunkArrival:
    """One chunk as the network delivered it: seconds since the request was sent, and its size in bytes."""

    at: float
    nbytes: int


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
class ChatResult:
    """The last item of a chat stream."""

    text: str
    finish_reason: str | None
    usage: Usage | None
    finished: bool  # [DONE] or a finish_reason arrived; False only with allow_truncated=True
    timings: ClientTimings
    chunks: tuple[ChunkArrival, ...]


@dataclass
class StreamLog:
    """What an event stream did, filled in while it runs; pass one to :func:`iter_events` to keep it."""

    chunks: list[ChunkArrival] = field(default_factory=list)
    connections: int = 0
    last_event_id: str = ""
    truncated: bool = False


def _is_event_stream(response: httpx.Response) -> bool:
    content_type: str = response.headers.get("content-type", "")
    return content_type.partition(";")[0].strip().lower() == "text/event-stream"


def _response_error(response: httpx.Response, body: bytes) -> TokenRelayError:
    if response.status_code != 200:
        return error_from_body(response.status_code, body, reason=response.reason_phrase)
    content_type = response.headers.get("content-type", "")
    said = error_from_body(200, body).message
    return ProtocolError(f"expected text/event-stream from {response.url}, got {content_type!r}: {said}")


class _EventSession:
    """The reconnection state of one plain event stream, shared by the sync and async loops."""

    def __init__(
        self,
        headers: Mapping[str, str] | None,
        reconnects: int,
        last_event_id: str,
        default_retry: float,
        max_retry_delay: float,
        max_event_bytes: int,
        log: StreamLog | None,
    ) -> None:
        self.extra_headers = dict(headers or {})
        self.reconnects_left = reconnects
        self.delay = default_retry
        self.max_retry_delay = max_retry_delay
        self.max_event_bytes = max_event_bytes
        self.log = log if log is not None else StreamLog()
        self.log.last_event_id = last_event_id
        self.start = time.perf_counter()

    def headers(self) -> dict[str, str]:
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-store", **self.extra_headers}
        if self.log.last_event_id:
            headers["Last-Event-ID"] = self.log.last_event_id
        return headers

    def connected(self) -> SSEParser:
        self.log.connections += 1
        return SSEParser(self.max_event_bytes, last_event_id=self.log.last_event_id)

    def feed(self, parser: SSEParser, chunk: bytes) -> list[ServerSentEvent]:
        self.log.chunks.append(ChunkArrival(time.perf_counter() - self.start, len(chunk)))
        return parser.feed(chunk)

    def ended(self, parser: SSEParser, cut: httpx.TransportError | None) -> float | None:
        """After a body ended or broke: seconds to wait before reconnecting, or ``None`` to stop."""
        parser.close()
        self.log.last_event_id = parser.last_event_id
        self.log.truncated = cut is not None or parser.truncated
        if parser.retry is not None:
            self.delay = parser.retry / 1000
        if self.reconnects_left > 0:
            self.reconnects_left -= 1
            return min(self.delay, self.max_retry_delay)
        if self.log.truncated:
            raise StreamTruncated(f"event stream cut off mid-event ({cut or 'EOF'})") from cut
        return None


def iter_events(
    url: str,
    *,
    client: httpx.Client | None = None,
    method: str = "GET",
    headers: Mapping[str, str] | None = None,
    json: object = None,
    reconnect: bool = False,
    max_reconnects: int = 5,
    last_event_id: str = "",
    default_retry: float = 3.0,
    max_retry_delay: float = 30.0,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
    log: StreamLog | None = None,
) -> Iterator[ServerSentEvent]:
    """The events of an SSE endpoint.

    With ``reconnect``, a body that ends (or breaks) is followed by up to ``max_reconnects`` new requests, as
    EventSource does: ``Last-Event-ID`` set, after the server's ``retry`` (else ``default_retry`` seconds,
    capped at ``max_retry_delay``); HTTP 204 ends the stream. Without it, a stream cut mid-event raises
    :class:`StreamTruncated`. A request that fails to connect, or gets another status, raises.
    """
    reconnects = max_reconnects if reconnect else 0
    session = _EventSession(
        headers, reconnects, last_event_id, default_retry, max_retry_delay, max_event_bytes, log
    )
    http = client if client is not None else httpx.Client(timeout=timeout)
    try:
        while True:
            cut: httpx.TransportError | None = None
            with http.stream(method, url, headers=session.headers(), json=json) as response:
                if response.status_code == 204:  # the server's way to say "do not reconnect"
                    return
                if response.status_code != 200 or not _is_event_stream(response):
                    raise _response_error(response, _read_limited(response))
                parser = session.connected()
                try:
                    for chunk in response.iter_bytes():
                        yield from session.feed(parser, chunk)
                except httpx.TransportError as exc:
                    cut = exc
            delay = session.ended(parser, cut)
            if delay is None:
                return
            time.sleep(delay)
    finally:
        if client is None:
            http.close()


async def aiter_events(
    url: str,
    *,
    client: httpx.AsyncClient | None = None,
    method: str = "GET",
    headers: Mapping[str, str] | None = None,
    json: object = None,
    reconnect: bool = False,
    max_reconnects: int = 5,
    last_event_id: str = "",
    default_retry: float = 3.0,
    max_retry_delay: float = 30.0,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
    log: StreamLog | None = None,
) -> AsyncIterator[ServerSentEvent]:
    """:func:`iter_events` for ``httpx.AsyncClient``."""
    reconnects = max_reconnects if reconnect else 0
    session = _EventSession(
        headers, reconnects, last_event_id, default_retry, max_retry_delay, max_event_bytes, log
    )
    http = client if client is not None else httpx.AsyncClient(timeout=timeout)
    try:
        while True:
            cut: httpx.TransportError | None = None
            async with http.stream(method, url, headers=session.headers(), json=json) as response:
                if response.status_code == 204:
                    return
                if response.status_code != 200 or not _is_event_stream(response):
                    raise _response_error(response, await _aread_limited(response))
                parser = session.connected()
                try:
                    async for chunk in response.aiter_bytes():
                        for event in session.feed(parser, chunk):
                            yield event
                except httpx.TransportError as exc:
                    cut = exc
            delay = session.ended(parser, cut)
            if delay is None:
                return
            await anyio.sleep(delay)
    finally:
        if client is None:
            await http.aclose()


class _ChatRun:
    """One chat stream: its parser, its decoder, and the clock readings, shared by the sync and async loops."""

    def __init__(self, max_event_bytes: int, api: str = "chat") -> None:
        self.start = time.perf_counter()
        self.parser = SSEParser(max_event_bytes)
        self.decoder: ChatStreamDecoder | ResponsesStreamDecoder = (
            ResponsesStreamDecoder() if api == "responses" else ChatStreamDecoder()
        )
        self.chunks: list[ChunkArrival] = []
        self.deltas: list[ChatDelta] = []

    def feed(self, chunk: bytes) -> list[ChatDelta]:
        at = time.perf_counter() - self.start
        self.chunks.append(ChunkArrival(at, len(chunk)))
        deltas = []
        for event in self.parser.feed(chunk):
            if self.decoder.done:
                break  # nothing after [DONE] belongs to the reply
            text = self.decoder.feed(event)
            if text:
                deltas.append(ChatDelta(text, at))
        self.deltas += deltas
        return deltas

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
        return ChatResult(
            text, decoder.finish_reason, decoder.usage, decoder.finished, timings, tuple(self.chunks)
        )


#: The APIs a chat stream may ask: ``/chat/completions``, or ``/responses`` (the Responses API: the messages are
#: its ``input``, ``max_tokens`` its ``max_output_tokens``, and the usage always comes).
APIS = ("chat", "responses")


def _chat_request(
    base_url: str,
    messages: Sequence[Mapping[str, object]],
    model: str,
    include_usage: bool,
    api_key: str | None,
    headers: Mapping[str, str] | None,
    params: Mapping[str, object],
    api: str = "chat",
) -> tuple[str, dict[str, str], dict[str, object]]:
    if api not in APIS:
        raise ValueError(f"api must be one of {', '.join(APIS)}, not {api!r}")
    fields = dict(params)
    body: dict[str, object] = {"model": model, "messages": list(messages), "stream": True}
    if api == "responses":
        body = {"model": model, "input": body.pop("messages"), "stream": True}
        if "max_tokens" in fields:
            fields["max_output_tokens"] = fields.pop("max_tokens")
    elif include_usage:
        body["stream_options"] = {"include_usage": True}
    body.update(fields)
    path = "/responses" if api == "responses" else "/chat/completions"
    all_headers = {"Accept": "text/event-stream", **(headers or {})}
    if api_key:
        all_headers["Authorization"] = f"Bearer {api_key}"
    return base_url.rstrip("/") + path, all_headers, body


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
    api: str = "chat",
    **params: object,
) -> Generator[ChatDelta | ChatResult, None, None]:
    """Stream an OpenAI-compatible chat completion: :class:`ChatDelta` items, then one :class:`ChatResult`.

    ``base_url`` is the API root as the OpenAI SDK takes it (``http://host:port/v1``); ``params`` go into the
    request body (``max_tokens=...``, ``temperature=...``). ``api="responses"`` asks the OpenAI Responses API
    (``/responses``) instead and reads its stream into the same results (``finish_reason`` ``"stop"``,
    ``"length"`` or ``"tool_calls"``).
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
    api: str = "chat",
    **params: object,
) -> AsyncGenerator[ChatDelta | ChatResult, None]:
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


def _read_limited(response: httpx.Response) -> bytes:
    body = b""
    for chunk in response.iter_bytes():
        if len(body := body + chunk) >= _MAX_ERROR_BODY:
            break
    return body


async def _aread_limited(response: httpx.Response) -> bytes:
    body = b""
    async for chunk in response.aiter_bytes():
        if len(body := body + chunk) >= _MAX_ERROR_BODY:
            break
    return body

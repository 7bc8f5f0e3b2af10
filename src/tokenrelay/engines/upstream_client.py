"""The upstream engine's HTTP/1.1 client: kept-alive connections per replica, each read parsed where it lands.

Why not httpx here (issue 22; py-spy on the front under ``benchmarks/front.py``): per read of a streamed body,
httpx → httpcore → anyio enter a cancel scope, arm a timer and await an event, and h11 parses the chunked
framing in Python; that was a third of the front's CPU per token, more than the detokenizer, stop matcher and
chunk writer together. Here a read of the replica's socket is one ``data_received`` call: httptools (C)
removes the HTTP framing, ``SSEParser`` cuts the events, and the events join the stream's queue; the stream's
consumer is woken once per read however many events it carried, and takes every event that arrived since it
last looked, so tokens that arrive together (a busy front, a slow client) are relayed together.

- pool: per replica, connections whose last response was read to its end are kept (at most ``max_idle``) and
  reused, newest first; one the server closed while idle leaves the pool. A request on a reused connection
  that gets no byte back before the connection closes is sent once more on a new one: the server may have
  closed an idle connection just as it was reused, and nothing was generated.
- flow control: a consumer that falls behind (its client reads slowly) pauses reading once ``high_water``
  bytes of events wait, so memory stays bounded and TCP's flow control reaches the replica; reading resumes
  when the consumer takes them.
- stall: no byte for ``read_timeout`` seconds while an answer is awaited (reading not paused) fails the
  response with ``TimeoutError``: one loop timer per response, re-armed once per period, not per read.
- end: a response read to its end returns its connection to the pool; one closed before (the client left, a
  stop string ended the reply) closes the connection, which is how a replica learns to stop generating.

Errors: ``ConnectionError`` (refused, reset, closed mid-answer), ``TimeoutError`` (connect or stall),
``ProtocolError`` (not HTTP/1.1, an event over the size limit); the engine maps them to its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl
from typing import Any
from urllib.parse import urlsplit

import httptools

from tokenrelay import __version__
from tokenrelay._errors import ProtocolError
from tokenrelay.wire._sse import ServerSentEvent, SSEParser

__all__ = ["ReplicaConnections", "Response"]

#: Bytes of events a stream may hold before reading from its replica pauses (a few hundred chat chunks).
HIGH_WATER = 64 * 1024
#: The most body bytes read from an answer that is not an event stream (an error body, an HTML page).
MAX_ERROR_BODY = 64 * 1024


class Response:
    """One answer from a replica: status and content type once the headers are in, then events or a body.

    The httptools parser calls the ``on_*`` methods; the consumer calls :meth:`next_events` (or :meth:`read`)
    and, when done with it, :meth:`release`.
    """

    __slots__ = (
        "_body", "_buffered", "_conn", "_done", "_error", "_events", "_framed", "_headers_done", "_pieces",
        "_sse", "_waiter", "content_type", "reason", "status",
    )  # fmt: skip

    def __init__(self, conn: _Connection) -> None:
        self._conn = conn
        self.status = 0
        self.reason = ""
        self.content_type = ""
        self._framed = False  # a Content-Length or chunked body: its end is not the connection's end
        self._headers_done = False
        self._sse: SSEParser | None = None  # set once the answer is known to be an event stream
        self._events: list[ServerSentEvent] = []
        self._buffered = 0  # bytes of the events waiting
        self._body: list[bytes] = []
        self._pieces: list[bytes] = []  # body bytes of the current read, not yet parsed
        self._done = False  # the whole answer was read
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None

    # -- httptools' callbacks (never raise from them: httptools would wrap the error) -------------------------

    def on_status(self, reason: bytes) -> None:
        self.reason = reason.decode("latin-1")

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-type":
            self.content_type = value.decode("latin-1").lower()
        elif name in (b"content-length", b"transfer-encoding"):
            self._framed = True

    def on_headers_complete(self) -> None:
        self.status = self._conn.parser.get_status_code()
        self._headers_done = True
        if self.status == 200 and self.content_type.startswith("text/event-stream"):
            self._sse = SSEParser()
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self._sse is not None:
            self._pieces.append(body)  # parsed once per read, however many HTTP chunks it held
        elif sum(map(len, self._body)) < MAX_ERROR_BODY:
            self._body.append(body)

    def parse_read(self) -> None:
        """Cut the events out of the body bytes of the latest read and hand them to the consumer."""
        pieces, self._pieces = self._pieces, []
        data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        try:
            events = self._sse.feed(data)  # type: ignore[union-attr]  # (pieces are only kept when it is set)
        except ProtocolError as exc:  # an event over the size limit
            self.fail(exc)
            return
        if events:
            if self._events:
                self._events += events
            else:
                self._events = events
            self._buffered += len(data)
            if self._buffered > HIGH_WATER:
                self._conn.pause()
            self._wake()

    def on_message_complete(self) -> None:
        self._done = True
        self._conn.answered(keep_alive=self._conn.parser.should_keep_alive())
        self._wake()

    # -- the connection's side ---------------------------------------------------------------------------

    def fail(self, error: BaseException) -> None:
        if not self._done and self._error is None:
            self._error = error
            self._conn.close()
            self._wake()

    def eof(self) -> None:
        """The connection closed: the end of a body that runs to it, else a failure."""
        if self._done or self._error is not None:
            return
        if self._headers_done and not self._framed:
            self._done = True
            self._wake()
        else:
            self.fail(ConnectionError("the upstream closed the connection before the answer ended"))

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- the consumer's side -----------------------------------------------------------------------------

    async def headers(self) -> None:
        while not self._headers_done:
            if self._error is not None:
                raise self._error
            await self._wait()

    async def next_events(self) -> list[ServerSentEvent]:
        """Every event that arrived since the last call (waiting for one); ``[]`` when the answer ended."""
        while True:
            events = self._events
            if events:
                self._events = []
                if self._buffered > HIGH_WATER:
                    self._conn.resume()
                self._buffered = 0
                return events
            if self._error is not None:
                raise self._error
            if self._done:
                return []
            await self._wait()

    async def read(self) -> bytes:
        """The whole body (at most ``MAX_ERROR_BODY`` bytes of it) of an answer that is not an event stream."""
        while not self._done:
            if self._error is not None:
                raise self._error
            await self._wait()
        return b"".join(self._body)[:MAX_ERROR_BODY]

    async def _wait(self) -> None:
        self._waiter = self._conn.loop.create_future()  # (_wake skips it once done, cancelled included)
        await self._waiter

    def release(self, *, drain: float = 0.0) -> None:
        """Done with this answer: its connection goes back to the pool if the answer was read to its end, or,
        with ``drain``, once its end arrives within that many seconds (a reply whose last event was read, the
        rest of the body still on its way); otherwise it is closed."""
        self._events = []
        if self._done and self._error is None:
            self._conn.reuse()
        elif drain > 0 and self._error is None:
            self._conn.reuse_when_answered(drain)
        else:
            self._conn.close()


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection to a replica, one request at a time."""

    def __init__(self, pool: ReplicaConnections) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser: Any = None
        self.response: Response | None = None
        self.closed = False
        self._paused = False
        self.got_bytes = False  # any byte of the current answer
        self._last = 0.0  # loop time of the last read
        self._timer: asyncio.TimerHandle | None = None
        self._reuse_when_answered = False
        self._keep_alive = False  # the last answer allows another request on this connection
        self.loop = asyncio.get_running_loop()

    # -- asyncio's callbacks -----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # (uvloop's is no asyncio.Transport subclass)

    def data_received(self, data: bytes) -> None:
        response = self.response
        if response is None:  # nothing was asked: a server that talks out of turn
            self.close()
            return
        self.got_bytes = True
        self._last = self.loop.time()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            response.fail(ProtocolError(f"upstream answer is not valid HTTP/1.1: {exc}"))
        if response._pieces:
            response.parse_read()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._cancel_timer()
        self.pool.forget(self)
        if self.response is not None:
            self.response.eof()

    # -- requests ----------------------------------------------------------------------------------------

    def send(self, data: bytes, read_timeout: float) -> Response:
        assert self.transport is not None
        self.response = response = Response(self)
        self.parser = httptools.HttpResponseParser(response)
        self.got_bytes = self._reuse_when_answered = self._keep_alive = False
        self._last = self.loop.time()
        self._arm(read_timeout, read_timeout)
        self.transport.write(data)
        return response

    def pause(self) -> None:
        if not self._paused and not self.closed and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self._paused and not self.closed and self.transport is not None:
            self._paused = False
            self._last = self.loop.time()  # the stall clock starts again now
            self.transport.resume_reading()

    def answered(self, *, keep_alive: bool) -> None:
        """The answer was read to its end; the connection may carry another if ``keep_alive``."""
        self._cancel_timer()
        self._keep_alive = keep_alive
        if self._reuse_when_answered:
            self.reuse()

    def reuse(self) -> None:
        self.response = None
        self.parser = None
        self._cancel_timer()
        if self.closed or not self._keep_alive or not self.pool.keep(self):
            self.close()

    def reuse_when_answered(self, within: float) -> None:
        self._reuse_when_answered = True
        self._cancel_timer()
        self._timer = self.loop.call_later(within, self.close)
        self.resume()  # the rest of the body must be read for its end to arrive

    def close(self) -> None:
        self._cancel_timer()
        if not self.closed and self.transport is not None:
            self.closed = True
            self.transport.close()
            self.pool.forget(self)

    # -- the stall clock ---------------------------------------------------------------------------------

    def _arm(self, delay: float, timeout: float) -> None:
        self._cancel_timer()
        if timeout > 0:
            self._timer = self.loop.call_later(delay, self._check_stall, timeout)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check_stall(self, timeout: float) -> None:
        self._timer = None
        response = self.response
        if response is None or self.closed:
            return
        if self._paused:  # the consumer is behind, not the replica
            self._arm(timeout, timeout)
            return
        idle = self.loop.time() - self._last
        if idle >= timeout:
            response.fail(TimeoutError(f"no data from the upstream for {timeout:g} s"))
        else:
            self._arm(timeout - idle, timeout)


class ReplicaConnections:
    """The connections to one replica (``base_url``: ``http://host:port`` or ``https://…``, maybe a path)."""

    def __init__(
        self,
        base_url: str,
        *,
        connect_timeout: float = 5.0,
        read_timeout: float = 300.0,
        max_idle: int = 64,
        headers: dict[str, str] | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl: ssl.SSLContext | None = ssl.create_default_context() if parts.scheme == "https" else None
        self._prefix = parts.path.rstrip("/")
        host = f"[{self._host}]" if ":" in self._host else self._host
        if parts.port is not None:
            host += f":{parts.port}"
        lines = [f"Host: {host}", f"User-Agent: tokenrelay/{__version__}", "Accept: text/event-stream"]
        lines += ["Content-Type: application/json"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self._fixed = ("\r\n".join(lines) + "\r\n").encode()
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._max_idle = max_idle
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()

    async def post(self, path: str, body: bytes) -> Response:
        """Send ``body`` (JSON) to ``path``; the answer once its headers are in."""
        data = (
            f"POST {self._prefix}{path} HTTP/1.1\r\n".encode()
            + self._fixed
            + b"Content-Length: %d\r\n\r\n" % len(body)
            + body
        )
        while True:
            conn = self._take_idle()
            fresh = conn is None
            if conn is None:
                conn = await self._connect()
            response = conn.send(data, self.read_timeout)
            try:
                await response.headers()
                return response
            except ConnectionError:
                conn.close()
                if fresh or conn.got_bytes:
                    raise
                # The server closed the idle connection as it was reused: nothing was asked; ask afresh.
            except BaseException:
                conn.close()
                raise

    def _take_idle(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        factory = functools.partial(_Connection, self)
        hostname = self._host if self._ssl is not None else None
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(
                    factory, self._host, self._port, ssl=self._ssl, server_hostname=hostname
                ),
                self.connect_timeout,
            )
        except asyncio.TimeoutError as exc:
            raise TimeoutError(f"connecting took over {self.connect_timeout:g} s") from exc
        except OSError as exc:
            raise ConnectionError(f"cannot connect: {exc.strerror or exc}") from exc
        self._open.add(conn)
        return conn

    def keep(self, conn: _Connection) -> bool:
        """Take back an idle connection; false if the pool is full (then it is closed)."""
        if len(self._idle) >= self._max_idle:
            return False
        self._idle.append(conn)
        return True

    def forget(self, conn: _Connection) -> None:
        self._open.discard(conn)
        with contextlib.suppress(ValueError):
            self._idle.remove(conn)

    def close(self) -> None:
        """Close every connection (the engine is closing)."""
        for conn in list(self._open):
            conn.close()
        self._idle.clear()

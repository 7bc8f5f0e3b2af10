"""ASGI responses that run a generation: an SSE stream done right, and a whole JSON body.

``EventStreamResponse`` is a raw ASGI response rather than Starlette's ``StreamingResponse`` because it must:

* send the headers at once (with a first comment frame), before the model's first token;
* send one ASGI message per SSE frame, as soon as the frame exists (no buffering, no joining) — or, where the
  server offers the ``tokenrelay.body`` extension (``server.run``), write the frame straight to the
  connection as one chunk, under uvicorn's flow control: the same bytes for less CPU;
* send keep-alive comments while nothing else is sent (queue wait, prefill, a stalled engine), from a ticker
  that writes only when the stream has been idle, so the token path stays a plain ``async for``;
* notice a client that went away — an ``http.disconnect`` message, a failed send, or a send that does not
  complete within ``send_timeout`` because the client stopped reading — and cancel the generation at once,
  so the engine computes at most the step it is in.

A client that stopped reading has its connection aborted (through the ``tokenrelay.abort`` scope extension that
``server.run`` installs), so the server neither waits on it nor reports a half-sent response as an error.

``interrupt()`` ends a response from outside (server shutdown after the grace period): a stream sends the
given final frames (an error event and ``[DONE]``) and ends its body cleanly; a whole-body response answers
with the given error status and body.

``JSONGenerationResponse`` runs a non-streamed generation under the same disconnect watch, then sends one body.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol

from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from tokenrelay.wire._sse import KEEPALIVE

__all__ = [
    "KEEPALIVE",
    "OPENING",
    "STREAM_HEADERS",
    "EventStreamResponse",
    "JSONGenerationResponse",
    "Outcome",
    "watch_disconnect",
]

#: The first bytes of every stream: a comment, so headers and a first chunk leave before prefill ends.
OPENING = b": stream open\n\n"

STREAM_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    # no-transform: proxies and CDNs must not recompress or rewrite the stream.
    (b"cache-control", b"no-cache, no-transform"),
    # nginx: do not buffer this response even where proxy_buffering is on.
    (b"x-accel-buffering", b"no"),
]


class Outcome:
    """How a generation response ended, for metrics and the log line."""

    def __init__(self) -> None:
        self.disconnected = False  # the client went away (or stopped reading) before the end
        self.send_timed_out = False  # ... by not reading for send_timeout seconds
        self.interrupted = False  # ended by interrupt() (server shutdown)
        self.completed = False  # the whole body was sent


async def watch_disconnect(receive: Receive, gone: Callable[[], object]) -> None:
    """Call ``gone()`` when the client has left (``http.disconnect``); every other message is ignored.

    The one disconnect watch of the server: both generation responses and the diagnostic stream run it in
    a task beside the one that sends.
    """
    while (await receive())["type"] != "http.disconnect":
        pass
    gone()


def _abort(scope: Scope) -> None:
    """Close the connection at once, where the server offers it (``server.run``'s protocol does)."""
    abort = scope.get("extensions", {}).get("tokenrelay.abort")
    if callable(abort):
        abort()


class EventStreamResponse(Response):
    def __init__(
        self,
        frames: AsyncIterator[bytes],
        *,
        keepalive_interval: float = 15.0,
        send_timeout: float = 30.0,
        on_done: Callable[[Outcome], None] | None = None,
        keepalive: bytes = KEEPALIVE,
    ) -> None:
        """``keepalive``: the frame sent after ``keepalive_interval`` seconds of silence (the dialect's own:
        a comment, or the Messages API's ``ping`` event)."""
        self._frames = frames
        self._keepalive_frame = keepalive
        self._keepalive = keepalive_interval if keepalive_interval > 0 else math.inf
        self._send_timeout = send_timeout
        self._on_done = on_done
        self.status_code = 200
        self.background = None
        self.raw_headers = list(STREAM_HEADERS)
        self._host: asyncio.Task[Any] | None = None
        self._tail: bytes | None = None  # set by interrupt(): the frames that end the stream
        self._over = False  # the body's last message is being (or was) sent: too late to interrupt

    def interrupt(self, tail: bytes) -> None:
        """End the stream now with ``tail`` (final frames) and a clean end of body."""
        if self._tail is None and not self._over:
            self._tail = tail
            if self._host is not None:
                self._host.cancel()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        outcome = Outcome()
        # The token path is the hot path (one send per frame, thousands of streams), so it carries no lock,
        # no timer and no cancel scope per write, and a stream costs one extra task: the frames are pumped in
        # this task; a watcher task waits for http.disconnect; a timer (not a task) sends a keep-alive after
        # `keepalive` seconds of silence and gives up on a send stuck past `send_timeout` (a client that
        # stopped reading). Either one stops the stream by cancelling this task, which cancels the generation
        # at the step it waits for. Sends overlap only while a keep-alive and a frame both wait for the
        # transport to drain; ASGI servers write each message to the transport before they wait, so frames
        # keep their order.
        loop = asyncio.get_running_loop()
        host = self._host = asyncio.current_task()
        clock = time.monotonic
        last_write = clock()  # when the last send completed (or, while one is in progress, when it began)
        sending = ending = stopped = False
        extra: set[asyncio.Future[Any]] = set()
        direct: _Body | None = None  # the body writer while frames bypass send (see _direct_body)

        def stop() -> None:
            nonlocal stopped
            if not stopped and not ending and host is not None:
                stopped = True
                self._over = True  # an interrupt cannot send to a client that is gone
                host.cancel()

        async def write(message: Message) -> bool:
            nonlocal last_write, sending
            sending, last_write = True, clock()
            try:
                await send(message)
            except OSError:  # the connection is gone (ASGI 2.4 servers raise instead of dropping the send)
                outcome.disconnected = True
                return False
            finally:
                sending = False
            last_write = clock()
            return True

        def gone() -> None:
            outcome.disconnected = True
            stop()

        period = min(self._keepalive, self._send_timeout) / 3

        def tick() -> bool:
            nonlocal last_write
            now = clock()
            if sending and now - last_write > self._send_timeout:
                # Flow control has blocked this send too long: the client stopped reading. Abort the
                # connection (the blocked send returns) and stop the generation.
                outcome.disconnected = outcome.send_timed_out = True
                _abort(scope)  # first: it also frees a final write that stop() must not cancel
                stop()
                return False
            if not sending and not ending and now - last_write >= self._keepalive:
                if direct is not None:  # the frames go straight to the connection: so does a keep-alive
                    if direct.write(self._keepalive_frame):
                        last_write = now
                    return True
                keep = asyncio.ensure_future(
                    write({"type": "http.response.body", "body": self._keepalive_frame, "more_body": True})
                )
                extra.add(keep)
                keep.add_done_callback(extra.discard)
            return True

        async def end(tail: bytes) -> None:
            nonlocal ending
            ending = self._over = True
            sent = await write({"type": "http.response.body", "body": tail, "more_body": False})
            outcome.completed = sent and not outcome.disconnected

        watcher = asyncio.ensure_future(watch_disconnect(receive, gone))
        timer = _Repeating(loop, period, tick)
        started = exhausted = False
        try:
            try:
                started = await write(
                    {"type": "http.response.start", "status": 200, "headers": self.raw_headers}
                )
                opened = started and await write(
                    {"type": "http.response.body", "body": OPENING, "more_body": True}
                )
                if opened and self._tail is None:  # (interrupted before it began: straight to the tail)
                    body = direct = _direct_body(scope, send)
                    if body is None:
                        async for frame in self._frames:
                            if not await write(
                                {"type": "http.response.body", "body": frame, "more_body": True}
                            ):
                                break
                        else:
                            exhausted = True  # the generator has returned: nothing is left to close
                    else:
                        async for frame in self._frames:
                            if not body.write(frame):
                                outcome.disconnected = True
                                break
                            last_write = clock()
                            if body.paused:  # the client reads slower than frames come: wait, as send does
                                sending = True
                                try:
                                    await body.drained()
                                finally:
                                    sending = False
                                last_write = clock()
                        else:
                            exhausted = True
                    direct = None  # (the keep-alive ticker writes through send from here on)
                    if exhausted:
                        await end(b"")
            except asyncio.CancelledError:
                if not stopped and self._tail is None:
                    raise  # cancelled from outside (a server's forced shutdown): propagate after cleaning up
                # We stopped the stream ourselves (client gone, or interrupt()): its end, not an error.
                uncancel = getattr(host, "uncancel", None)  # Python 3.11+: take our cancel request back
                if uncancel is not None:
                    uncancel()
            if self._tail is not None and started and not stopped and not outcome.completed:
                outcome.interrupted = True
                await end(self._tail)
        except asyncio.CancelledError:
            if not stopped:  # only the send timeout (stop()) may cancel the final write
                raise
        finally:
            timer.cancel()
            watcher.cancel()
            for keep in list(extra):
                keep.cancel()
            # Shielded: on shutdown the server cancels this task and the event loop may cancel it again; the
            # generation must still be closed (the engine stops at the step it is in), counted and logged.
            # A stream that ran to its end has nothing to close and no keep-alive in flight: the cancelled
            # watcher ends on its own, and the common case costs no extra task.
            if not exhausted or extra:
                await asyncio.shield(_finish([watcher, *extra], self._frames))
            _done(self, outcome)


class JSONGenerationResponse(Response):
    """Run ``produce`` (a whole, non-streamed generation → status and JSON body) while watching the client."""

    media_type = "application/json"

    def __init__(
        self,
        produce: Callable[[], Awaitable[tuple[int, bytes]]],
        *,
        on_done: Callable[[Outcome], None] | None = None,
    ) -> None:
        self._produce = produce
        self._on_done = on_done
        self.status_code = 200
        self.background = None
        self.raw_headers = []
        self._task: asyncio.Future[tuple[int, bytes]] | None = None
        self._instead: tuple[int, bytes] | None = None  # set by interrupt(): the answer to send instead

    def interrupt(self, status: int, body: bytes) -> None:
        """Stop the generation and answer ``status`` with the JSON ``body`` instead."""
        if self._instead is None:
            self._instead = (status, body)
            if self._task is not None:
                self._task.cancel()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        outcome = Outcome()

        def gone() -> None:
            outcome.disconnected = True

        produce = self._task = asyncio.ensure_future(self._produce())
        if self._instead is not None:
            produce.cancel()
        watcher = asyncio.ensure_future(watch_disconnect(receive, gone))
        try:
            await asyncio.wait([produce, watcher], return_when=asyncio.FIRST_COMPLETED)
            if produce.done() and not outcome.disconnected:
                if produce.cancelled() and self._instead is not None:
                    outcome.interrupted = True
                    status, body = self._instead
                else:
                    status, body = produce.result()
                headers = [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    *self.raw_headers,
                ]
                try:
                    await send({"type": "http.response.start", "status": status, "headers": headers})
                    await send({"type": "http.response.body", "body": body, "more_body": False})
                    outcome.completed = True
                except OSError:
                    outcome.disconnected = True
        finally:
            produce.cancel()
            watcher.cancel()
            await asyncio.shield(asyncio.gather(produce, watcher, return_exceptions=True))
            self._task = None
            _done(self, outcome)


class _Body(Protocol):
    """A started chunked body written straight to its connection (``server.run.ChunkedBody``)."""

    def write(self, data: bytes) -> bool: ...
    @property
    def paused(self) -> bool: ...
    async def drained(self) -> None: ...


def _direct_body(scope: Scope, send: Send) -> _Body | None:
    """The ``tokenrelay.body`` extension's writer for this started response, where the server offers one
    (``server.run``: uvicorn's ``send`` costs a tenth of the CPU per token; it declines where ``send`` is
    not uvicorn's own)."""
    body_of = scope.get("extensions", {}).get("tokenrelay.body")
    return body_of(send) if callable(body_of) else None


class _Repeating:
    """Calls ``fn`` every ``period`` seconds on ``loop`` while it returns true, until ``cancel()``.

    A loop timer, not a task; cancelling it drops the handle, which refers back to it, so no reference cycle
    outlives the stream.
    """

    __slots__ = ("_fn", "_handle", "_loop", "_period")

    def __init__(self, loop: asyncio.AbstractEventLoop, period: float, fn: Callable[[], bool]) -> None:
        self._loop, self._period, self._fn = loop, period, fn
        self._handle: asyncio.TimerHandle | None = loop.call_later(period, self._run)

    def _run(self) -> None:
        self._handle = None
        if self._fn():
            self._handle = self._loop.call_later(self._period, self._run)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


def _done(response: EventStreamResponse | JSONGenerationResponse, outcome: Outcome) -> None:
    """Report ``outcome`` once, then let go of the callback.

    The callback is usually a method of the object that holds the response: kept, the two would form a cycle
    that only the cyclic collector frees, which under load must then walk every finished stream
    (tests/test_server_gc.py).
    """
    on_done, response._on_done = response._on_done, None
    if on_done is not None:
        on_done(outcome)


async def _finish(tasks: Sequence[asyncio.Future[Any]], frames: AsyncIterator[bytes]) -> None:
    await asyncio.gather(*tasks, return_exceptions=True)
    await _aclose(frames)


async def _aclose(frames: AsyncIterator[bytes]) -> None:
    aclose = getattr(frames, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):  # closing must never mask the real outcome
            await aclose()

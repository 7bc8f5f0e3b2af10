"""ASGI responses that run a generation: an SSE stream done right, and a whole JSON body.

``EventStreamResponse`` is a raw ASGI response rather than Starlette's ``StreamingResponse`` because it must:

* send the headers at once (with a first comment frame), before the model's first token;
* send one ASGI message per SSE frame, as soon as the frame exists (no buffering, no joining);
* send keep-alive comments while nothing else is sent (queue wait, prefill, a stalled engine), from a ticker
  that writes only when the stream has been idle, so the token path stays a plain ``async for``;
* notice a client that went away — an ``http.disconnect`` message, a failed send, or a send that does not
  complete within ``send_timeout`` because the client stopped reading — and cancel the generation at once,
  so the engine computes at most the step it is in.

``JSONGenerationResponse`` runs a non-streamed generation under the same disconnect watch, then sends one body.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

__all__ = ["KEEPALIVE", "OPENING", "EventStreamResponse", "JSONGenerationResponse", "Outcome"]

#: The first bytes of every stream: a comment, so headers and a first chunk leave before prefill ends.
OPENING = b": stream open\n\n"
#: A keep-alive: a comment line and a blank line. Every SSE client skips it; a blank line with no data
#: dispatches nothing (WHATWG), and a naive client that splits on "\n\n" sees a frame with no "data:" line.
KEEPALIVE = b": keep-alive\n\n"

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
        self.completed = False  # the whole body was sent


class EventStreamResponse(Response):
    def __init__(
        self,
        frames: AsyncIterator[bytes],
        *,
        keepalive_interval: float = 15.0,
        send_timeout: float = 30.0,
        on_done: Callable[[Outcome], None] | None = None,
    ) -> None:
        self._frames = frames
        self._keepalive = keepalive_interval if keepalive_interval > 0 else math.inf
        self._send_timeout = send_timeout
        self._on_done = on_done
        self.status_code = 200
        self.background = None
        self.raw_headers = list(STREAM_HEADERS)

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
        host = asyncio.current_task()
        clock = time.monotonic
        last_write = clock()  # when the last send completed (or, while one is in progress, when it began)
        sending = ending = stopped = False
        extra: set[asyncio.Future[Any]] = set()
        timer: asyncio.TimerHandle | None = None

        def stop() -> None:
            nonlocal stopped
            if not stopped and not ending and host is not None:
                stopped = True
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

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            outcome.disconnected = True
            stop()

        period = min(self._keepalive, self._send_timeout) / 3

        def tick() -> None:
            nonlocal timer
            now = clock()
            if sending and now - last_write > self._send_timeout:
                # Flow control has blocked this send too long: the client stopped reading. Returning without
                # finishing the body makes the server close the connection.
                outcome.disconnected = True
                stop()
                return
            if not sending and not ending and now - last_write >= self._keepalive:
                keep = asyncio.ensure_future(
                    write({"type": "http.response.body", "body": KEEPALIVE, "more_body": True})
                )
                extra.add(keep)
                keep.add_done_callback(extra.discard)
            timer = loop.call_later(period, tick)

        watcher = asyncio.ensure_future(watch())
        timer = loop.call_later(period, tick)
        try:
            if await write(
                {"type": "http.response.start", "status": 200, "headers": self.raw_headers}
            ) and await write({"type": "http.response.body", "body": OPENING, "more_body": True}):
                async for frame in self._frames:
                    if not await write({"type": "http.response.body", "body": frame, "more_body": True}):
                        break
                else:
                    ending = True
                    if await write({"type": "http.response.body", "body": b"", "more_body": False}):
                        outcome.completed = True
        except asyncio.CancelledError:
            if not stopped:
                raise  # cancelled from outside (server shutdown): propagate after cleaning up
            # We stopped the stream ourselves: that is its end, not an error.
            uncancel = getattr(host, "uncancel", None)  # Python 3.11+: take our cancel request back
            if uncancel is not None:
                uncancel()
        finally:
            if timer is not None:
                timer.cancel()
            watcher.cancel()
            for keep in list(extra):
                keep.cancel()
            # Shielded: on shutdown the server cancels this task and the event loop may cancel it again; the
            # generation must still be closed (the engine stops at the step it is in), counted and logged.
            await asyncio.shield(_finish([watcher, *extra], self._frames))
            if self._on_done is not None:
                self._on_done(outcome)


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

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        outcome = Outcome()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            outcome.disconnected = True

        produce = asyncio.ensure_future(self._produce())
        watcher = asyncio.ensure_future(watch())
        try:
            await asyncio.wait([produce, watcher], return_when=asyncio.FIRST_COMPLETED)
            if produce.done() and not outcome.disconnected:
                status, body = produce.result()
                headers = [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
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
            if self._on_done is not None:
                self._on_done(outcome)


async def _finish(tasks: Sequence[asyncio.Future[Any]], frames: AsyncIterator[bytes]) -> None:
    await asyncio.gather(*tasks, return_exceptions=True)
    await _aclose(frames)


async def _aclose(frames: AsyncIterator[bytes]) -> None:
    aclose = getattr(frames, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):  # closing must never mask the real outcome
            await aclose()

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

import contextlib
import math
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import anyio.abc
import anyio.lowlevel
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
        self._keepalive = keepalive_interval
        self._send_timeout = send_timeout
        self._on_done = on_done
        self.status_code = 200
        self.background = None
        self.raw_headers = list(STREAM_HEADERS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        outcome = Outcome()
        # No lock and no timer per write: the token path is the hot path (one send per frame, thousands of
        # streams). A watchdog task wakes a few times per keep-alive interval, sends a keep-alive when the
        # stream has been idle, and cancels the stream when one send has been stuck past send_timeout.
        # Sends may overlap only while both wait for the transport to drain; ASGI servers write each
        # message to the transport before they wait, so frames keep their order.
        last_write = anyio.current_time()
        stuck_since: float | None = None
        ending = False
        group: anyio.abc.TaskGroup

        async def write(message: Message) -> None:
            nonlocal last_write, stuck_since
            stuck_since = anyio.current_time()
            try:
                await send(message)
            except OSError:  # the connection is gone (ASGI 2.4 servers raise instead of dropping the send)
                outcome.disconnected = True
                group.cancel_scope.cancel()
                await anyio.lowlevel.checkpoint()
            stuck_since = None
            last_write = anyio.current_time()

        async def watchdog() -> None:
            keepalive = (
                self._keepalive if self._keepalive > 0 and math.isfinite(self._keepalive) else math.inf
            )
            period = min(keepalive, self._send_timeout) / 3
            while True:
                await anyio.sleep(period)
                now = anyio.current_time()
                if stuck_since is not None and now - stuck_since > self._send_timeout:
                    # The client stopped reading: flow control has blocked this send for too long. Returning
                    # without finishing the body makes the server close the connection.
                    outcome.disconnected = True
                    group.cancel_scope.cancel()
                    return
                if stuck_since is None and not ending and now - last_write >= keepalive:
                    await write({"type": "http.response.body", "body": KEEPALIVE, "more_body": True})

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            outcome.disconnected = True
            group.cancel_scope.cancel()

        try:
            async with anyio.create_task_group() as group:
                group.start_soon(watch)
                group.start_soon(watchdog)
                await write({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
                await write({"type": "http.response.body", "body": OPENING, "more_body": True})
                async for frame in self._frames:
                    await write({"type": "http.response.body", "body": frame, "more_body": True})
                ending = True
                await write({"type": "http.response.body", "body": b"", "more_body": False})
                outcome.completed = not outcome.disconnected
                group.cancel_scope.cancel()
        finally:
            # Closing the frames closes the generation: the engine stops within the step it is in. Shielded:
            # on shutdown the server cancels this task, and the event loop may cancel it again while it
            # cleans up; the generation must still be closed and counted.
            with anyio.CancelScope(shield=True):
                await _aclose(self._frames)
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
        result: tuple[int, bytes] | None = None

        async def watch(group: anyio.abc.TaskGroup) -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            outcome.disconnected = True
            group.cancel_scope.cancel()

        try:
            async with anyio.create_task_group() as group:
                group.start_soon(watch, group)
                result = await self._produce()
                group.cancel_scope.cancel()
            if result is not None and not outcome.disconnected:
                status, body = result
                headers = [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ]
                await send({"type": "http.response.start", "status": status, "headers": headers})
                await send({"type": "http.response.body", "body": body, "more_body": False})
                outcome.completed = True
        except OSError:
            outcome.disconnected = True
        finally:
            if self._on_done is not None:
                self._on_done(outcome)


async def _aclose(frames: AsyncIterator[bytes]) -> None:
    aclose = getattr(frames, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):  # closing must never mask the real outcome
            await aclose()

"""The diagnostic stream and its status endpoint: what ``tokenrelay doctor`` measures a deployment with.

``POST {prefix}/stream`` with a JSON body ``{"stream", "seed", "events", "cadence_ms", "eol"}`` (or ``GET``
with the same as query parameters)
    ``text/event-stream``: the payload of :class:`~tokenrelay.doctor._payload.DiagnosticPlan` (the opening
    comment a chat stream starts with, then emoji, a ZWJ sequence, Devanagari, a literal U+FFFD, CRLF line
    ends) cut at seeded random byte offsets into writes, write ``i`` sent ``i * C`` ms after the first, then
    one write holding the ``schedule`` event (every write's send time, offset and size) and ``data: [DONE]``.
    Every parameter is optional: a missing ``seed`` or ``stream`` is drawn at random and reported in the
    schedule and in the ``X-Tokenrelay-Stream`` header. Defaults: 60 events, 50 ms, CRLF.
``GET {prefix}/streams/{ID}``
    JSON: ``state`` (``running``, ``finished`` or ``cancelled``), ``cancelled_after_ms`` (when the server saw
    the client leave), ``writes_sent``, ``bytes_sent`` and the writes so far.

The probe must meet every hop exactly as a chat stream does, or it measures a set-up the chat streams never
see (issue 13: HAProxy and Caddy compressed a diagnostic stream that lacked ``no-transform`` and left the real
chat streams alone; Varnish passes a POST but looks a GET up in its cache). So the doctor offers it as a POST
with a JSON body, like a chat request, and the response carries the chat stream's own headers
(:data:`~tokenrelay.server.responses.STREAM_HEADERS`) and opens with the same small comment write.

Memory is bounded whatever the parameters (issue 12: 300 requests kept 256 plans of 4.4 MB each): at most
``max_running`` streams run at once (more get 429), a stream has at most 10,000 events (about 3 MB of body
while it runs), and the registry keeps finished streams as compact arrays (send time, offset and size: 16
bytes a write, no body), dropping the oldest beyond ``keep`` streams or ``keep_writes`` writes in all.

Pure ASGI, no response class in between: each write is exactly one ``http.response.body`` message, so what a
proxy does to the timing is the proxy's doing. A task listens on ``receive()`` for ``http.disconnect`` while
the writer sleeps between writes, so a client that leaves stops the stream at once and the status endpoint
can say so. Send times are ``time.monotonic()`` in ms since the response started.

Mount with :func:`add_diagnostics_routes` (any Starlette or FastAPI app) or take :func:`diagnostics_routes`
into a ``Router``/``Mount`` of your own.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from array import array
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TypeVar
from urllib.parse import parse_qs

import anyio
from starlette.applications import Starlette
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from tokenrelay._errors import (
    InvalidRequestError,
    NotFoundError,
    PayloadTooLargeError,
    RateLimitError,
    TokenRelayError,
)
from tokenrelay.doctor._payload import DiagnosticPlan
from tokenrelay.server.responses import STREAM_HEADERS, watch_disconnect

__all__ = ["DiagnosticsRegistry", "StreamRecord", "add_diagnostics_routes", "diagnostics_routes"]

MAX_EVENTS_PER_STREAM = 10_000  # 10k events of ~330 bytes: a 3.3 MB body, held only while the stream runs
_MAX_REQUEST_BYTES = 4096  # the JSON body of a POST: five small fields
_N = TypeVar("_N", int, float)
_PARAMS = ("stream", "seed", "events", "cadence_ms", "eol")


@dataclass
class StreamRecord:
    """What the server did for one diagnostic stream, as the status endpoint reports it.

    Holds no body: the plan is kept without its cached body and the writes as three flat arrays."""

    plan: DiagnosticPlan
    started_at: float  # wall clock, seconds since the epoch
    body_bytes: int
    sha256: str
    state: str = "running"
    cancelled_after_ms: float | None = None
    sent_ms: array[float] = field(default_factory=lambda: array("d"))
    offsets: array[int] = field(default_factory=lambda: array("I"))
    sizes: array[int] = field(default_factory=lambda: array("I"))

    def add_write(self, sent_ms: float, offset: int, size: int) -> None:
        self.sent_ms.append(sent_ms)
        self.offsets.append(offset)
        self.sizes.append(size)

    @property
    def writes(self) -> list[tuple[float, int, int]]:
        return list(zip(self.sent_ms, self.offsets, self.sizes, strict=True))

    def schedule_json(self) -> dict[str, object]:
        """The same object as :meth:`tokenrelay.doctor._payload.Schedule.to_json`, without the body."""
        plan = self.plan
        return {
            "stream": plan.stream,
            "seed": plan.seed,
            "events": plan.events,
            "cadence_ms": plan.cadence_ms,
            "eol": plan.eol,
            "bytes": self.body_bytes,
            "sha256": self.sha256,
            "writes": [[round(t, 3), offset, size] for t, offset, size in self.writes],
        }

    def to_json(self) -> dict[str, object]:
        return {
            "state": self.state,
            "started_at": self.started_at,
            "cancelled_after_ms": self.cancelled_after_ms,
            "writes_sent": len(self.sent_ms),
            "bytes_sent": sum(self.sizes),
            "last_write_ms": self.sent_ms[-1] if self.sent_ms else None,
            **self.schedule_json(),
        }


class DiagnosticsRegistry:
    """The running and recent diagnostic streams by id, bounded in count, in writes kept, and in streams
    running at once (see the module docstring)."""

    def __init__(self, keep: int = 256, *, keep_writes: int = 100_000, max_running: int = 8) -> None:
        self._keep = keep
        self._keep_writes = keep_writes
        self.max_running = max_running
        self.running = 0
        self._kept_writes = 0  # writes held by finished records
        self._records: OrderedDict[str, StreamRecord] = OrderedDict()

    def start(self, plan: DiagnosticPlan) -> StreamRecord:
        """A record for ``plan`` (running); :class:`RateLimitError` when ``max_running`` already run."""
        if self.running >= self.max_running:
            raise RateLimitError(
                f"{self.running} diagnostic streams are running; try again shortly", code="diagnostics_busy"
            )
        body = plan.body
        # replace() makes a plan without the cached body, so the record does not keep 3 MB alive.
        record = StreamRecord(replace(plan), time.time(), len(body), hashlib.sha256(body).hexdigest())
        self._drop(plan.stream)
        self._records[plan.stream] = record
        self.running += 1
        return record

    def finish(self, record: StreamRecord) -> None:
        """The stream ended: its writes count against ``keep_writes`` from now on."""
        self.running -= 1
        if self._records.get(record.plan.stream) is record:
            self._kept_writes += len(record.sent_ms)
        self._trim()

    def _drop(self, stream: str) -> None:
        record = self._records.pop(stream, None)
        if record is not None and record.state != "running":
            self._kept_writes -= len(record.sent_ms)

    def _trim(self) -> None:
        while len(self._records) > self._keep or self._kept_writes > self._keep_writes:
            oldest = next((k for k, r in self._records.items() if r.state != "running"), None)
            if oldest is None:
                return
            self._drop(oldest)

    def get(self, stream: str) -> StreamRecord | None:
        return self._records.get(stream)

    def __len__(self) -> int:
        return len(self._records)


def _plan(params: Mapping[str, object]) -> DiagnosticPlan:
    unknown = sorted(set(params) - set(_PARAMS))
    if unknown:
        raise InvalidRequestError(f"unknown parameter {unknown[0]!r}", param=unknown[0])
    try:
        events = _number(params.get("events", 60), int)
        if events > MAX_EVENTS_PER_STREAM:
            raise ValueError(f"events must be at most {MAX_EVENTS_PER_STREAM}")
        return DiagnosticPlan(
            stream=str(params.get("stream") or secrets.token_hex(8)),
            seed=_number(params["seed"], int) if params.get("seed") is not None else secrets.randbits(31),
            events=events,
            cadence_ms=_number(params.get("cadence_ms", 50), float),
            eol=str(params.get("eol", "crlf")),
        )
    except (ValueError, TypeError) as exc:
        raise InvalidRequestError(f"diagnostic stream: {exc}") from exc


def _number(value: object, kind: type[_N]) -> _N:
    """``value`` (a JSON number or a query string) as ``kind``; an int must not be a fraction or a bool."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"not a number: {value!r}")
    if kind is int and isinstance(value, float) and not value.is_integer():
        raise ValueError(f"not an integer: {value!r}")
    return kind(value)


async def _read_json(receive: Receive) -> dict[str, object]:
    """The POST body as a JSON object (empty: all defaults), at most ``_MAX_REQUEST_BYTES``."""
    data = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise InvalidRequestError("the client left before sending its request body")
        data += message.get("body", b"")
        if len(data) > _MAX_REQUEST_BYTES:
            raise PayloadTooLargeError(f"diagnostic stream request over {_MAX_REQUEST_BYTES} bytes")
        if not message.get("more_body", False):
            break
    if not data.strip():
        return {}
    try:
        body = json.loads(data)
    except ValueError as exc:
        raise InvalidRequestError(f"diagnostic stream: the body is not JSON ({exc})") from exc
    if not isinstance(body, dict):
        raise InvalidRequestError("diagnostic stream: the body must be a JSON object")
    return body


async def _send_json(send: Send, status: int, body: object, headers: list[tuple[bytes, bytes]]) -> None:
    data = json.dumps(body, ensure_ascii=False).encode("utf-8")
    headers = [(b"content-type", b"application/json"), (b"cache-control", b"no-store"), *headers]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data, "more_body": False})


async def _send_error(send: Send, error: TokenRelayError) -> None:
    retry = getattr(error, "retry_after", None)
    headers = [(b"retry-after", str(max(1, round(retry))).encode())] if retry is not None else []
    await _send_json(send, error.status_code, error.to_openai(), headers)


class _StreamEndpoint:
    """ASGI app for ``POST`` (and ``GET``/``HEAD``) ``{prefix}/stream``."""

    def __init__(self, registry: DiagnosticsRegistry) -> None:
        self._registry = registry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            if scope.get("method") == "POST":
                plan = _plan(await _read_json(receive))
            else:
                query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
                plan = _plan({k: v[-1] for k, v in query.items()})
            record = None if scope.get("method") == "HEAD" else self._registry.start(plan)
        except TokenRelayError as exc:
            await _send_error(send, exc)
            return
        # Exactly a chat stream's headers (issue 13), and the id the status endpoint knows the stream by.
        headers = [*STREAM_HEADERS, (b"x-tokenrelay-stream", plan.stream.encode())]
        try:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            if record is None:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            async with anyio.create_task_group() as tasks:
                gone = anyio.Event()
                tasks.start_soon(watch_disconnect, receive, gone.set)
                await _write(plan, record, send, gone)
                tasks.cancel_scope.cancel()
        finally:
            if record is not None:
                if record.state == "running":  # an error or a cancellation ended it
                    record.state = "cancelled"
                self._registry.finish(record)


async def _write(plan: DiagnosticPlan, record: StreamRecord, send: Send, gone: anyio.Event) -> None:
    """Send the writes on their schedule; stop at the first sign that the client left."""
    start = time.monotonic()
    cadence = plan.cadence_ms / 1000.0
    body = plan.body
    # Sleep to absolute targets, not by fixed steps: a late write must not delay every write after it.
    for i, (offset, size) in enumerate(plan.cuts):
        if await _left(gone, start + i * cadence):
            record.state = "cancelled"
            record.cancelled_after_ms = (time.monotonic() - start) * 1000.0
            return
        sent_ms = (time.monotonic() - start) * 1000.0
        try:
            await send(
                {"type": "http.response.body", "body": body[offset : offset + size], "more_body": True}
            )
        except OSError:  # servers that raise on a closed connection instead of dropping the write
            gone.set()
            continue
        record.add_write(sent_ms, offset, size)
    if await _left(gone, start + len(plan.cuts) * cadence):
        record.state = "cancelled"
        record.cancelled_after_ms = (time.monotonic() - start) * 1000.0
        return
    trailer = plan.trailer(record.schedule_json())
    await send({"type": "http.response.body", "body": trailer, "more_body": False})
    record.state = "finished"


async def _left(gone: anyio.Event, until: float) -> bool:
    """Wait until ``until`` (monotonic); True as soon as the client is gone."""
    with anyio.move_on_after(max(0.0, until - time.monotonic())):
        await gone.wait()
    return gone.is_set()


class _StatusEndpoint:
    """ASGI app for ``GET {prefix}/streams/{stream}``."""

    def __init__(self, registry: DiagnosticsRegistry) -> None:
        self._registry = registry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        stream = str(scope.get("path_params", {}).get("stream", ""))
        record = self._registry.get(stream)
        if record is None:
            await _send_error(send, NotFoundError(f"no diagnostic stream {stream!r}", param="stream"))
            return
        await _send_json(send, 200, record.to_json(), [])


def diagnostics_routes(
    registry: DiagnosticsRegistry | None = None, *, prefix: str = "/v1/diagnostics"
) -> list[BaseRoute]:
    """The two routes, sharing ``registry`` (a new one by default)."""
    registry = registry if registry is not None else DiagnosticsRegistry()
    return [
        Route(
            f"{prefix}/stream",
            _StreamEndpoint(registry),
            methods=["GET", "POST"],
            name="diagnostics_stream",
        ),
        Route(
            f"{prefix}/streams/{{stream}}",
            _StatusEndpoint(registry),
            methods=["GET"],
            name="diagnostics_status",
        ),
    ]


def add_diagnostics_routes(app: Starlette, *, prefix: str = "/v1/diagnostics") -> DiagnosticsRegistry:
    """Add the diagnostic stream and status routes to ``app`` (Starlette or FastAPI), and the doctor's page
    (``/doctor``, :mod:`tokenrelay.server.doctor_page`) with its report endpoint; returns their registry."""
    from tokenrelay.server.doctor_page import doctor_page_routes  # it judges with the doctor's modules

    registry = DiagnosticsRegistry()
    app.router.routes.extend(diagnostics_routes(registry, prefix=prefix))
    app.router.routes.extend(doctor_page_routes(registry, prefix))
    return registry

"""The diagnostic stream and its status endpoint: what ``tokenrelay doctor`` measures a deployment with.

``GET {prefix}/stream?stream=ID&seed=S&events=N&cadence_ms=C&eol=crlf|lf|cr``
    ``text/event-stream``: the payload of :class:`~tokenrelay.doctor._payload.DiagnosticPlan` (emoji, a ZWJ
    sequence, Devanagari, a literal U+FFFD, CRLF line ends) cut at seeded random byte offsets into ``N``
    writes, write ``i`` sent ``i * C`` ms after the first, then one write holding the ``schedule`` event
    (every write's send time, offset and size) and ``data: [DONE]``. Every parameter is optional: a missing
    ``seed`` or ``stream`` is drawn at random and reported in the schedule and in the ``X-Tokenrelay-Stream``
    header. Defaults: 60 events, 50 ms, CRLF.
``GET {prefix}/streams/{ID}``
    JSON: ``state`` (``running``, ``finished`` or ``cancelled``), ``cancelled_after_ms`` (when the server saw
    the client leave), ``writes_sent``, ``bytes_sent`` and the writes so far. The last 256 streams are kept.

Pure ASGI, no response class in between: each write is exactly one ``http.response.body`` message, so what a
proxy does to the timing is the proxy's doing. A task listens on ``receive()`` for ``http.disconnect`` while
the writer sleeps between writes, so a client that leaves stops the stream at once and the status endpoint
can say so (uvicorn drops writes to a closed connection silently; without the listener the stream would run
to its end unnoticed). Send times are ``time.monotonic()`` in ms since the response started.

Mount with :func:`add_diagnostics_routes` (any Starlette or FastAPI app) or take :func:`diagnostics_routes`
into a ``Router``/``Mount`` of your own.
"""

from __future__ import annotations

import json
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from urllib.parse import parse_qs

import anyio
from starlette.applications import Starlette
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from tokenrelay._errors import InvalidRequestError, NotFoundError, TokenRelayError
from tokenrelay.doctor._payload import DiagnosticPlan, Schedule

__all__ = ["DiagnosticsRegistry", "StreamRecord", "add_diagnostics_routes", "diagnostics_routes"]

_MAX_EVENTS_PER_STREAM = 10_000  # 10k events of ~300 bytes: a 3 MB body, built once per request


@dataclass
class StreamRecord:
    """What the server did for one diagnostic stream, as the status endpoint reports it."""

    plan: DiagnosticPlan
    started_at: float  # wall clock, seconds since the epoch
    state: str = "running"
    cancelled_after_ms: float | None = None
    writes: list[tuple[float, int, int]] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "stream": self.plan.stream,
            "state": self.state,
            "started_at": self.started_at,
            "cancelled_after_ms": self.cancelled_after_ms,
            "writes_sent": len(self.writes),
            "bytes_sent": sum(size for _, _, size in self.writes),
            "last_write_ms": self.writes[-1][0] if self.writes else None,
            **Schedule(self.plan, tuple(self.writes)).to_json(),
        }


class DiagnosticsRegistry:
    """The recent diagnostic streams by id, oldest dropped first (bounded: a status is a small dict)."""

    def __init__(self, keep: int = 256) -> None:
        self._keep = keep
        self._records: OrderedDict[str, StreamRecord] = OrderedDict()

    def start(self, plan: DiagnosticPlan) -> StreamRecord:
        record = StreamRecord(plan, started_at=time.time())
        self._records[plan.stream] = record
        self._records.move_to_end(plan.stream)
        while len(self._records) > self._keep:
            self._records.popitem(last=False)
        return record

    def get(self, stream: str) -> StreamRecord | None:
        return self._records.get(stream)


def _plan_from_query(query_string: bytes) -> DiagnosticPlan:
    query = {k: v[-1] for k, v in parse_qs(query_string.decode("latin-1")).items()}
    unknown = set(query) - {"stream", "seed", "events", "cadence_ms", "eol"}
    if unknown:
        raise InvalidRequestError(f"unknown parameter {sorted(unknown)[0]!r}", param=sorted(unknown)[0])
    try:
        events = int(query.get("events", "60"))
        if events > _MAX_EVENTS_PER_STREAM:
            raise ValueError(f"events must be at most {_MAX_EVENTS_PER_STREAM}")
        return DiagnosticPlan(
            stream=query.get("stream") or secrets.token_hex(8),
            seed=int(query["seed"]) if "seed" in query else secrets.randbits(31),
            events=events,
            cadence_ms=float(query.get("cadence_ms", "50")),
            eol=query.get("eol", "crlf"),
        )
    except ValueError as exc:
        raise InvalidRequestError(f"diagnostic stream: {exc}") from exc


async def _send_json(send: Send, status: int, body: object) -> None:
    data = json.dumps(body, ensure_ascii=False).encode("utf-8")
    headers = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data, "more_body": False})


async def _send_error(send: Send, error: TokenRelayError) -> None:
    await _send_json(send, error.status_code, error.to_openai())


class _StreamEndpoint:
    """ASGI app for ``GET {prefix}/stream``."""

    def __init__(self, registry: DiagnosticsRegistry) -> None:
        self._registry = registry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            plan = _plan_from_query(scope.get("query_string", b""))
        except InvalidRequestError as exc:
            await _send_error(send, exc)
            return
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            # nginx: do not buffer this response (it acts on the header and removes it).
            (b"x-accel-buffering", b"no"),
            (b"x-tokenrelay-stream", plan.stream.encode()),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if scope.get("method") == "HEAD":
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        record = self._registry.start(plan)
        async with anyio.create_task_group() as tasks:
            gone = anyio.Event()
            tasks.start_soon(_watch_disconnect, receive, gone)
            await _write(plan, record, send, gone)
            tasks.cancel_scope.cancel()


async def _watch_disconnect(receive: Receive, gone: anyio.Event) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass  # the (empty) request body of a GET
    gone.set()


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
        record.writes.append((sent_ms, offset, size))
    if await _left(gone, start + len(plan.cuts) * cadence):
        record.state = "cancelled"
        record.cancelled_after_ms = (time.monotonic() - start) * 1000.0
        return
    trailer = plan.trailer(Schedule(plan, tuple(record.writes)))
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
        await _send_json(send, 200, record.to_json())


def diagnostics_routes(
    registry: DiagnosticsRegistry | None = None, *, prefix: str = "/v1/diagnostics"
) -> list[BaseRoute]:
    """The two routes, sharing ``registry`` (a new one by default)."""
    registry = registry or DiagnosticsRegistry()
    return [
        Route(f"{prefix}/stream", _StreamEndpoint(registry), methods=["GET"], name="diagnostics_stream"),
        Route(
            f"{prefix}/streams/{{stream}}",
            _StatusEndpoint(registry),
            methods=["GET"],
            name="diagnostics_status",
        ),
    ]


def add_diagnostics_routes(app: Starlette, *, prefix: str = "/v1/diagnostics") -> DiagnosticsRegistry:
    """Add the diagnostic stream and status routes to ``app`` (Starlette or FastAPI); returns their registry."""
    registry = DiagnosticsRegistry()
    app.router.routes.extend(diagnostics_routes(registry, prefix=prefix))
    return registry

"""The doctor in the browser: ``GET /doctor`` (the page and its modules) and ``POST {prefix}/report``.

The page (``web/doctor.html``, ``web/doctor.js``) runs the diagnostic stream in the user's own browser,
through whatever CDN and proxies are really in front, and records per event when its bytes arrived (the
fetch reader's chunk), when it was parsed, when its text was handed to the DOM and the animation frame in
which it was painted. It posts what arrived (every chunk's bytes and time, the headers) to the report
endpoint, which judges it with the very code the CLI uses (:func:`~tokenrelay.doctor._diagnose.diagnose_diagnostic`),
so the page shows the CLI's PASS/WARN/FAIL lines, hops and fixes; the browser's own lanes (parse, render,
paint) come along as one more line. ``tokenrelay doctor URL --browser`` opens the page in headless Chromium.
The page's chat mode traces a real chat reply with the model's step times (``stream_options.include_step_times``),
drawn in the page alone: the report endpoint judges probes.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from tokenrelay._errors import InvalidRequestError, NotFoundError, PayloadTooLargeError, TokenRelayError
from tokenrelay.doctor._diagnose import diagnose_diagnostic
from tokenrelay.doctor._payload import DiagnosticPlan
from tokenrelay.doctor._recording import Chunk, Exchange
from tokenrelay.doctor._report import Check, Report, Status

__all__ = ["StreamRecords", "doctor_page_routes"]


class _Record(Protocol):
    def to_json(self) -> dict[str, object]: ...


class StreamRecords(Protocol):
    """Where the report endpoint looks up what the server did for a stream (``diagnostics``' registry)."""

    def get(self, stream: str) -> _Record | None: ...


WEB_DIR = Path(__file__).resolve().parents[1] / "web"
# The page's own files, and the chat page's modules it shares (used as is, never edited): the chat stream
# (chat mode), and from lib/ (the npm package's modules) the SSE parser, the chat reader and the lanes.
_FILES = {
    "doctor.js": "text/javascript",
    "doctor.css": "text/css",
    "chat.js": "text/javascript",
    "lib/sse.js": "text/javascript",
    "lib/stats.js": "text/javascript",
    "lib/lanes.js": "text/javascript",
    "lib/reply_chat.js": "text/javascript",
    "lib/reply_events.js": "text/javascript",
}
_MAX_REPORT_BYTES = 8 << 20  # a recording of a few thousand events, base64
LANES = ("network", "parse", "render", "paint")


def _page_headers() -> dict[str, str]:
    from tokenrelay.server.page import PAGE_HEADERS  # the chat page's policy (CSP, Trusted Types)

    return dict(PAGE_HEADERS)


async def _page(request: Request) -> Response:
    module = request.path_params.get("module")
    name = f"lib/{module}" if module is not None else request.path_params.get("name", "doctor.html")
    if name == "doctor.html":
        media = "text/html"
    elif name in _FILES:
        media = _FILES[name]
    else:
        error = NotFoundError(f"/doctor/{name}: no such file")
        return JSONResponse(error.to_openai(), status_code=error.status_code)
    path = WEB_DIR / name
    return Response(path.read_bytes(), media_type=f"{media}; charset=utf-8", headers=_page_headers())


def _recording(body: object) -> tuple[Exchange, DiagnosticPlan, str, dict[str, object]]:
    if not isinstance(body, dict):
        raise InvalidRequestError("report: the body must be a JSON object")
    try:
        plan_json = body["plan"]
        plan = DiagnosticPlan(
            str(plan_json["stream"]),
            int(plan_json["seed"]),
            int(plan_json["events"]),
            float(plan_json["cadence_ms"]),
            str(plan_json["eol"]),
        )
        chunks = [Chunk(float(at), base64.b64decode(data), 0) for at, data in body["chunks"]]
        chunks = [Chunk(c.at_ms, c.data, len(c.data)) for c in chunks]
        headers = {str(k).lower(): str(v) for k, v in dict(body["headers"]).items()}
        exchange = Exchange(
            str(body.get("request", "")), int(body["status"]), headers, float(body["headers_ms"]), chunks
        )
        lanes = body.get("lanes") or {}
        if not isinstance(lanes, dict):
            raise TypeError("lanes must be an object")
        return exchange, plan, str(body.get("url", "")), lanes
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidRequestError(f"report: not a recording ({exc})") from exc


def _lanes_check(lanes: dict[str, object]) -> Check:
    """The browser's hops after the socket, as one line: the most each lane held an event."""
    parts = []
    for lane in LANES:
        values = lanes.get(lane)
        if isinstance(values, dict) and isinstance(values.get("max_ms"), (int, float)):
            parts.append(
                f"{lane} max {float(values['max_ms']):.0f} ms p90 {float(values.get('p90_ms', 0)):.0f} ms"
            )
    return Check(
        Status.INFO, "browser", "held per hop: " + "; ".join(parts) if parts else "no lanes recorded"
    )


def report_endpoint(registry: StreamRecords) -> Callable[[Request], Awaitable[Response]]:
    """``POST {prefix}/report``: a browser's recording of a diagnostic stream in, the doctor's report out."""

    async def report(request: Request) -> Response:
        try:
            data = b""
            async for part in request.stream():
                data += part
                if len(data) > _MAX_REPORT_BYTES:
                    raise PayloadTooLargeError(f"report over {_MAX_REPORT_BYTES} bytes")
            try:
                body = json.loads(data)
            except ValueError as exc:
                raise InvalidRequestError(f"report: the body is not JSON ({exc})") from exc
            exchange, plan, url, lanes = _recording(body)
        except TokenRelayError as exc:
            return JSONResponse(exc.to_openai(), status_code=exc.status_code)
        record = registry.get(plan.stream)
        status = record.to_json() if record is not None else None
        result = diagnose_diagnostic(exchange, plan, status=status, url=url or exchange.url)
        result = Report(
            result.url, "browser", [*result.checks, _lanes_check(lanes)], result.timeline, result.facts
        )
        payload = result.to_json()
        payload["text"] = result.render_text()
        return JSONResponse(payload)

    return report


def doctor_page_routes(registry: StreamRecords, prefix: str) -> list[BaseRoute]:
    """The page at ``/doctor``, its files under ``/doctor/``, and the report endpoint under ``prefix``."""
    return [
        Route("/doctor", _page, methods=["GET"], include_in_schema=False),
        Route("/doctor/{name}", _page, methods=["GET"], include_in_schema=False),
        Route("/doctor/lib/{module}", _page, methods=["GET"], include_in_schema=False),
        Route(f"{prefix}/report", report_endpoint(registry), methods=["POST"], name="diagnostics_report"),
    ]

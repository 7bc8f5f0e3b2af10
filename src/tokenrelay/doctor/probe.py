"""The probe: streams from a real endpoint with httpx, records every read with its arrival time, then judges.

The thin I/O shell around the sans-I/O doctor. :func:`run_doctor` first asks for tokenrelay's diagnostic
stream (``POST {base}/v1/diagnostics/stream`` with a JSON body, shaped like a chat request so every hop treats
it as one); a server that has it gets the full examination (bytes, per-write holds, cancellation through its
status endpoint). Any other OpenAI-compatible endpoint gets an ordinary streamed chat request, judged from the
client's side alone. :func:`run_chain` probes each hop of a chain (origin, load balancer, public URL) in one
run and says which hop adds the hold.

Each read is timed as it comes off the socket (``aiter_raw``: after the chunked transfer coding, before the
content coding), then decoded by :class:`ContentDecoder`, so a compressed stream is timed as it travelled.
The probe offers ``Accept-Encoding: gzip, deflate``, as browsers do, so a compressing hop shows itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from urllib.parse import urlsplit, urlunsplit

import httpx

import tokenrelay
from tokenrelay.doctor._chain import ChainReport, judge_chain
from tokenrelay.doctor._diagnose import diagnose_chat, diagnose_diagnostic, unreachable
from tokenrelay.doctor._payload import DiagnosticPlan
from tokenrelay.doctor._recording import CancelObservation, Chunk, ContentDecoder, Exchange, join_headers
from tokenrelay.doctor._report import Check, Report, Status

__all__ = ["DoctorOptions", "endpoints", "record", "run_chain", "run_doctor"]

CHAT_PROMPT = (
    "Reply in two short sentences about llamas, using the emoji 🦙 and 👩\u200d💻, the word नमस्ते and the "
    "Japanese sentence 日本語の文。"
)


@dataclass(frozen=True)
class DoctorOptions:
    mode: str = "auto"  # "auto", "diagnostics" or "chat"
    events: int = 60
    cadence_ms: float = 50.0
    seed: int | None = None
    eol: str = "crlf"
    cancel: bool = True
    model: str | None = None
    max_tokens: int = 64
    prompt: str = CHAT_PROMPT
    timeout: float = 30.0
    headers: Mapping[str, str] = field(default_factory=dict)


def endpoints(url: str) -> tuple[str, str, str]:
    """``(base, diagnostics stream URL, chat completions URL)`` for a base URL, a ``.../v1`` URL, or either
    endpoint's own URL (a proxy may mount the API under a prefix, which is kept)."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    for tail in ("/v1/diagnostics/stream", "/v1/chat/completions", "/chat/completions", "/v1"):
        if path.endswith(tail):
            path = path[: -len(tail)]
            break
    base = urlunsplit((parts.scheme, parts.netloc, path, "", ""))
    return base, f"{base}/v1/diagnostics/stream", f"{base}/v1/chat/completions"


async def record(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    params: Mapping[str, str] | None = None,
    json: object = None,
    stop_after_events: int | None = None,
    stop_after_s: float | None = None,
) -> Exchange:
    """One streamed request, every read timed (ms since the request was sent) and decoded.

    With ``stop_after_events`` (or ``stop_after_s``) the response is closed as soon as that many ``data:``
    lines arrived (or that much time passed since the request, headers included: a proxy that holds the
    whole stream holds its headers too), the way a user closing the tab does; a recording that got no
    headers in time has status 0. Transport errors during the body end the recording and are kept in
    ``Exchange.error``; a failure to connect raises :class:`httpx.HTTPError`.
    """
    start = time.perf_counter()
    deadline = None if stop_after_s is None else time.monotonic() + stop_after_s
    request = client.build_request(
        method,
        url,
        params=params,
        json=json,
        headers={
            "Accept": "text/event-stream",
            "Accept-Encoding": "gzip, deflate",
            "Cache-Control": "no-cache",
        },
    )
    try:
        response = await asyncio.wait_for(client.send(request, stream=True), stop_after_s)
    except asyncio.TimeoutError:  # cancelling the send closed the connection
        return Exchange(
            str(request.url), 0, {}, stop_after_s or 0.0, [], "no headers before the deadline", method
        )
    headers_ms = (time.perf_counter() - start) * 1000.0
    chunks: list[Chunk] = []
    error: str | None = None
    data_lines = 0
    try:
        decoder = ContentDecoder(response.headers.get("content-encoding"))
        async for raw in _reads(response, deadline):
            at = (time.perf_counter() - start) * 1000.0
            data = decoder.feed(raw)
            chunks.append(Chunk(at, data, len(raw)))
            data_lines += data.count(b"data:")
            if stop_after_events is not None and data_lines >= stop_after_events:
                break
        else:
            tail = decoder.flush()
            if tail:
                chunks.append(Chunk((time.perf_counter() - start) * 1000.0, tail, 0))
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"
    except ValueError as exc:  # a content coding we cannot undo, or a corrupt compressed body
        error = str(exc)
    finally:
        await response.aclose()
    headers = join_headers([(k, v) for k, v in response.headers.multi_items()])
    return Exchange(str(request.url), response.status_code, headers, headers_ms, chunks, error, method)


async def _reads(response: httpx.Response, deadline: float | None) -> AsyncIterator[bytes]:
    """``aiter_raw()``, ending quietly at ``deadline`` (``time.monotonic()``; a held stream may send nothing)."""
    iterator = response.aiter_raw().__aiter__()
    while True:
        try:
            if deadline is None:
                raw = await iterator.__anext__()
            else:
                raw = await asyncio.wait_for(iterator.__anext__(), max(0.0, deadline - time.monotonic()))
        except (StopAsyncIteration, asyncio.TimeoutError):
            return
        yield raw


async def _status(client: httpx.AsyncClient, base: str, stream: str) -> dict[str, object] | None:
    try:
        response = await client.get(f"{base}/v1/diagnostics/streams/{stream}")
        body = response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return body if isinstance(body, dict) else None


async def _try_cancel(
    client: httpx.AsyncClient, base: str, url: str, plan: DiagnosticPlan
) -> CancelObservation:
    """Open a long diagnostic stream, close it after a few events, and watch the server stop."""
    long = DiagnosticPlan(secrets.token_hex(8), plan.seed + 1, 400, plan.cadence_ms, plan.eol)
    exchange = await record(
        client, "POST", url, json=long.request_json(), stop_after_events=3, stop_after_s=2.0
    )
    closed = time.perf_counter()
    received = len(exchange.body)
    writes_received = sum(1 for offset, size in long.cuts if offset + size <= received)
    events_read = exchange.body.count(b"data:")
    status = await _status(client, base, long.stream)
    if status is None:
        return CancelObservation(events_read, status_available=False)
    noticed: float | None = None
    deadline = closed + 3.0
    while status.get("state") == "running" and time.perf_counter() < deadline:
        await asyncio.sleep(0.05)
        status = await _status(client, base, long.stream) or status
    if status.get("state") != "running":
        noticed = (time.perf_counter() - closed) * 1000.0
    before = _int(status.get("writes_sent"))
    await asyncio.sleep(2 * long.cadence_ms / 1000.0 + 0.05)
    after = await _status(client, base, long.stream) or status
    return CancelObservation(
        events_read=events_read,
        status_available=True,
        state=str(after.get("state")),
        noticed_ms=noticed,
        writes_sent=_int(after.get("writes_sent")),
        writes_received=writes_received,
        writes_later=_int(after.get("writes_sent")) - before,
    )


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0


async def _first_model(client: httpx.AsyncClient, base: str) -> str | None:
    try:
        data = (await client.get(f"{base}/v1/models")).json().get("data")
        return str(data[0]["id"]) if data else None
    except (httpx.HTTPError, ValueError, AttributeError, KeyError, IndexError, TypeError):
        return None


async def run_doctor(url: str, options: DoctorOptions | None = None) -> Report:
    """Examine the streaming endpoint at ``url`` and return the :class:`Report` (stamped with tokenrelay's
    version and the time the run started)."""
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    report = await _examine(url, options or DoctorOptions())
    return dataclasses.replace(report, version=tokenrelay.__version__, time=started)


async def run_chain(urls: list[str], options: DoctorOptions | None = None) -> ChainReport:
    """Probe each hop of a chain, nearest the server first (origin, internal load balancer, public URL),
    one after the other with the same seed, and say which hop adds the hold."""
    options = options or DoctorOptions()
    if options.seed is None:  # one seed for every hop: the same writes, so the hops compare like for like
        options = dataclasses.replace(options, seed=secrets.randbits(31))
    reports = [await run_doctor(url, options) for url in urls]
    return ChainReport(reports, judge_chain(reports))


async def _examine(url: str, options: DoctorOptions) -> Report:
    base, diagnostics_url, chat_url = endpoints(url)
    timeout = httpx.Timeout(options.timeout, connect=min(10.0, options.timeout))
    async with httpx.AsyncClient(timeout=timeout, headers=dict(options.headers)) as client:
        try:
            if options.mode in ("auto", "diagnostics"):
                seed = options.seed if options.seed is not None else secrets.randbits(31)
                plan = DiagnosticPlan(
                    secrets.token_hex(8), seed, options.events, options.cadence_ms, options.eol
                )
                exchange = await record(client, "POST", diagnostics_url, json=plan.request_json())
                ctype = exchange.header("content-type") or ""
                if exchange.status == 200 and ctype.startswith("text/event-stream"):
                    status = await _status(client, base, plan.stream)
                    cancel = (
                        await _try_cancel(client, base, diagnostics_url, plan) if options.cancel else None
                    )
                    return diagnose_diagnostic(exchange, plan, status=status, cancel=cancel, url=url)
                if options.mode == "diagnostics":
                    message = f"no diagnostic stream at {diagnostics_url}: HTTP {exchange.status}"
                    return Report(
                        url, "diagnostics", [Check(Status.FAIL, "status", message, hop="the endpoint")]
                    )
            model = options.model or await _first_model(client, base) or "default"
            body: dict[str, object] = {
                "model": model,
                "messages": [{"role": "user", "content": options.prompt}],
                "stream": True,
                "max_tokens": options.max_tokens,
                "stream_options": {"include_usage": True},
            }
            exchange = await record(client, "POST", chat_url, json=body)
            if exchange.status == 400:  # some servers reject stream_options; ask again without it
                del body["stream_options"]
                exchange = await record(client, "POST", chat_url, json=body)
            return diagnose_chat(exchange, url=url)
        except httpx.HTTPError as exc:
            return unreachable(url, f"{type(exc).__name__}: {exc}")

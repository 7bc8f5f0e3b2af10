"""The checks both modes share: headers, who to blame for a hold, latency, the end of the stream, cancelling.

Sans-I/O, standard library only. Every problem names the hop it points to and the fix, worded for the person
who runs the proxy; which hop, and that hop's own directive, come from :mod:`tokenrelay.doctor._proxies`
(the headers each proxy leaves, and the shape of the hold).
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenrelay.doctor._proxies import (
    COMPRESSION,
    MIDDLEWARE,
    NGINX,
    PROXIES,
    blame,
    candidates,
    sightings,
)
from tokenrelay.doctor._recording import CancelObservation, Exchange, TimedEvent
from tokenrelay.doctor._report import Check, Status
from tokenrelay.doctor._verdict import Relay, RelayKind

__all__ = [
    "FIX_CANCEL",
    "FIX_COMPRESSION",
    "FIX_NAIVE_SPLIT",
    "FIX_NGINX",
    "FIX_WHOLE_BODY",
    "cancel_check",
    "culprit",
    "encoding",
    "end_check",
    "first_with_text",
    "header_checks",
    "late_headers",
    "latency_check",
    "proxy_name",
    "timing_check",
]

FIX_NGINX = NGINX.buffering
FIX_COMPRESSION = candidates(COMPRESSION)
FIX_WHOLE_BODY = MIDDLEWARE.buffering
FIX_NAIVE_SPLIT = "client splits on \\n\\n: accept CR, LF and CRLF line ends (WHATWG event-stream parsing)"
FIX_CANCEL = (
    "make every hop pass the client's close upstream (nginx: proxy_ignore_client_abort off, the default) "
    "and make the server stop generating on http.disconnect"
)


def proxy_name(exchange: Exchange) -> str | None:
    """The first proxy the response's headers name (``Server``, ``Via``, ``X-Varnish``, CDN ids…), if any."""
    named = sightings(exchange.headers)
    if named:
        return PROXIES[named[0].proxy].key
    via = exchange.header("via")
    return f"a proxy (Via: {via})" if via else None


def encoding(exchange: Exchange) -> str | None:
    """The response's content coding, or None for identity."""
    value = (exchange.header("content-encoding") or "").strip().lower()
    return None if value in ("", "identity") else value


def late_headers(exchange: Exchange) -> bool:
    """The headers arrived with the body's first bytes, well after the request: a hop that held the whole
    response held its headers too (a server streaming on its own sends them first)."""
    if not exchange.chunks:
        return False
    first = exchange.chunks[0].at_ms
    return exchange.headers_ms >= 150.0 and first - exchange.headers_ms < 20.0


def culprit(exchange: Exchange, relay: Relay | None = None) -> tuple[str, str]:
    """``(hop, fix)`` for a held stream, by :func:`tokenrelay.doctor._proxies.blame`."""
    bursts = relay is not None and relay.kind is RelayKind.BURSTS
    found = blame(
        exchange.headers,
        coding=encoding(exchange),
        bursts_period_ms=relay.burst_period_ms if bursts and relay is not None else None,
        burst_items=relay.burst_items if bursts and relay is not None else 0,
    )
    return found.hop, found.fix


def header_checks(exchange: Exchange, relay: Relay | None) -> list[Check]:
    """One line per streaming-relevant header. ``relay`` says whether the stream was held (for encodings)."""
    checks: list[Check] = []
    ctype = exchange.header("content-type") or ""
    if ctype.split(";")[0].strip().lower() == "text/event-stream":
        checks.append(Check(Status.PASS, "content-type", ctype))
    else:
        checks.append(
            Check(
                Status.FAIL,
                "content-type",
                f"{ctype or '(none)'}, not text/event-stream",
                hop="the server, or a hop that rewrote it",
                fix="send Content-Type: text/event-stream (EventSource requires it; proxies pick buffering "
                "and compression by it)",
            )
        )
    cache = exchange.header("cache-control")
    if cache and any(word in cache.lower() for word in ("no-cache", "no-store")):
        checks.append(Check(Status.PASS, "cache-control", cache))
    else:
        checks.append(
            Check(
                Status.WARN,
                "cache-control",
                f"{cache or '(none)'}: a cache or CDN may store, coalesce or replay the stream",
                hop="the server (or a hop that dropped the header)",
                fix="send Cache-Control: no-cache on event streams",
            )
        )
    checks.append(_accel_check(exchange))
    checks.append(_encoding_check(exchange, relay))
    length = exchange.header("content-length")
    if length is None:
        checks.append(Check(Status.PASS, "content-length", "absent, as a stream's should be"))
    else:
        checks.append(
            Check(Status.WARN, "content-length", f"{length}: the whole body was known before the first byte")
        )
    transfer = exchange.header("transfer-encoding")
    checks.append(Check(Status.INFO, "transfer-encoding", transfer or "(none: HTTP/2, or ended by closing)"))
    etag = exchange.header("etag")
    if etag is None:
        checks.append(Check(Status.PASS, "etag", "absent"))
    else:
        checks.append(
            Check(Status.WARN, "etag", f"{etag}: something hashed the whole body before sending it")
        )
    return checks


def _accel_check(exchange: Exchange) -> Check:
    value = exchange.header("x-accel-buffering")
    if value is not None and value.strip().lower() == "no":
        return Check(Status.PASS, "x-accel-buffering", "no")
    if value is not None:
        return Check(
            Status.WARN,
            "x-accel-buffering",
            f"{value}: asks nginx to buffer",
            hop="the server",
            fix="send X-Accel-Buffering: no on event streams",
        )
    if proxy_name(exchange) == "nginx":
        return Check(Status.INFO, "x-accel-buffering", "not visible: nginx acts on it and removes it")
    return Check(Status.INFO, "x-accel-buffering", "absent (only nginx reads it)")


def _encoding_check(exchange: Exchange, relay: Relay | None) -> Check:
    coding = encoding(exchange)
    if coding is None:
        return Check(Status.PASS, "content-encoding", "none")
    decoded = len(exchange.body)
    ratio = f"{exchange.wire_bytes} B on the wire for {decoded} B"
    if relay is not None and relay.kind in (RelayKind.LUMP, RelayKind.BURSTS, RelayKind.INITIAL_HOLD):
        hop, fix = culprit(exchange, relay)
        return Check(
            Status.FAIL, "content-encoding", f"{coding} ({ratio}), and the stream was held", hop, fix
        )
    verdict = (
        "events still arrived one by one" if relay and relay.kind is RelayKind.STREAMING else "see timing"
    )
    named = sightings(exchange.headers)
    proxy = PROXIES[named[0].proxy] if named else None
    return Check(
        Status.WARN,
        "content-encoding",
        f"{coding} ({ratio}): {verdict}; a hop that buffers compressed data would hold it",
        hop=f"compression ({coding}" + (f"; {named[0].evidence})" if named else ")"),
        fix=proxy.compression if proxy is not None else FIX_COMPRESSION,
    )


def timing_check(exchange: Exchange, relay: Relay, *, send_times: bool) -> Check:
    """The relay verdict as a check. Without send times (``send_times=False``) a hold cannot be told apart
    from a server that batches its output, so only evidence in the headers makes it a FAIL."""
    kind = relay.kind
    if kind is RelayKind.UNMEASURED:
        return Check(Status.INFO, "timing", relay.describe())
    if kind is RelayKind.STREAMING:
        return Check(Status.PASS, "timing", relay.describe())
    hop, fix = culprit(exchange, relay)
    if not send_times:
        evidence = _hold_evidence(exchange)
        status = Status.FAIL if kind is RelayKind.LUMP and evidence else Status.WARN
        note = (
            f" ({'; '.join(evidence)})"
            if status is Status.FAIL
            else " (without send times a hop and server batching look alike)"
        )
        return Check(status, "timing", relay.describe() + note, hop, fix)
    if kind is RelayKind.IRREGULAR:
        return Check(
            Status.WARN,
            "timing",
            relay.describe(),
            hop=f"unclear; possibly {hop}",
            fix="run again; if it persists, look for a hop that buffers under load",
        )
    if kind is RelayKind.INITIAL_HOLD and relay.holds and relay.holds[0] < 1000.0:
        return Check(Status.WARN, "timing", relay.describe(), hop, fix)
    return Check(Status.FAIL, "timing", relay.describe(), hop, fix)


def _hold_evidence(exchange: Exchange) -> list[str]:
    """What shows, without send times, that a hop held the stream rather than the server batching it."""
    evidence = [
        f"{name}: {value}"
        for name in ("content-encoding", "etag", "content-length")
        if (value := exchange.header(name)) is not None and (name != "content-encoding" or encoding(exchange))
    ]
    if late_headers(exchange):
        evidence.append(
            f"the headers came only with the body, {exchange.headers_ms:.0f} ms after the request"
        )
    evidence += [s.evidence for s in sightings(exchange.headers)]
    return evidence


def latency_check(exchange: Exchange, first_word: TimedEvent | None) -> Check:
    parts = [f"headers {exchange.headers_ms:.0f} ms"]
    if exchange.chunks:
        parts.append(f"first byte {exchange.chunks[0].at_ms:.0f} ms")
    parts.append(f"first word {first_word.at_ms:.0f} ms" if first_word else "no word")
    if exchange.chunks:
        parts.append(f"last byte {exchange.chunks[-1].at_ms:.0f} ms")
    return Check(Status.INFO, "latency", " · ".join(parts))


def cancel_check(cancel: CancelObservation | None, cadence_ms: float) -> Check:
    """Did the server stop writing after the client closed mid-stream?"""
    if cancel is None:
        return Check(
            Status.SKIP, "cancel", "not tried (only the diagnostic stream's status endpoint can show it)"
        )
    if not cancel.status_available:
        return Check(
            Status.SKIP,
            "cancel",
            f"closed after {cancel.events_read} events, but no status endpoint says whether the server stopped",
        )
    if cancel.state == "running" or cancel.writes_later:
        return Check(
            Status.FAIL,
            "cancel",
            f"closed after {cancel.events_read} events; the server was still writing "
            f"({_count(cancel.writes_sent, 'write')}, {cancel.writes_later} in the last check)",
            hop="a hop that keeps the upstream open after the client left, or a server that ignores "
            "http.disconnect",
            fix=FIX_CANCEL,
        )
    if cancel.state != "cancelled":
        return Check(
            Status.WARN, "cancel", f"the stream ended as {cancel.state!r} before the close reached it"
        )
    after = cancel.writes_sent - cancel.writes_received
    noticed = f" within {cancel.noticed_ms:.0f} ms" if cancel.noticed_ms is not None else ""
    message = (
        f"closed after {cancel.events_read} events; the server stopped{noticed}, "
        f"{_count(max(after, 0), 'write')} after the last one received"
    )
    slow = cancel.noticed_ms is not None and cancel.noticed_ms > max(1000.0, 10 * cadence_ms)
    if slow:
        return Check(
            Status.WARN, "cancel", message + " (slow)", hop="a hop that is slow to pass the close on"
        )
    return Check(Status.PASS, "cancel", message)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def end_check(
    exchange: Exchange,
    complete: bool,
    truncated: bool,
    detail: str,
    *,
    server_saw_close_ms: float | None = None,
) -> Check:
    """PASS when the stream ended as the protocol says it should; otherwise point at whoever cut it.
    ``server_saw_close_ms``: the diagnostic stream's status says the server saw its connection close that
    long into the stream, while this client was still reading: a hop closed its upstream connection."""
    if complete and not truncated and exchange.error is None:
        return Check(Status.PASS, "end", detail)
    why = f"; {exchange.error}" if exchange.error else ""
    if server_saw_close_ms is not None:
        named = sightings(exchange.headers)
        proxy = PROXIES[named[0].proxy].name if named else "a hop"
        return Check(
            Status.FAIL,
            "end",
            f"the stream stopped early after {len(exchange.body)} bytes{why}; the server saw its connection "
            f"close {server_saw_close_ms:.0f} ms into the stream while this client was still reading",
            hop=f"{proxy} closed its connection to the server mid-stream"
            + (f" ({named[0].evidence})" if named else ""),
            fix="look at that hop's upstream timeouts and connection reuse (keep-alive) towards the server, and "
            "at its error log for the moment of the cut; run the doctor again to see how often it happens",
        )
    return Check(
        Status.FAIL,
        "end",
        f"the stream stopped early after {len(exchange.body)} bytes{why}",
        hop="a hop that closed the stream (read/send timeouts, body size limits) or the server",
        fix="raise the proxy's read timeout above the longest pause between events (nginx proxy_read_timeout) "
        "and send a comment line as a keep-alive during long pauses",
    )


def first_with_text(events: Sequence[tuple[TimedEvent, str]]) -> TimedEvent | None:
    """The first event whose text is not empty (the client's first word)."""
    return next((timed for timed, text in events if text), None)

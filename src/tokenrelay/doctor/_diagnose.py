"""From recordings to a :class:`Report`: the diagnostic stream's checks and an ordinary chat stream's checks.

Sans-I/O, standard library only: the probe records, this module judges, so every verdict can be tested with
hand-made recordings.

With the diagnostic stream the doctor knows every byte that was sent and when, so it checks the body byte for
byte, each event's text, and each write's hold. With an ordinary chat stream it knows neither, so it checks
what a client would trip on: split surrogates and U+FFFD in the text, line ends a naive splitter misreads,
empty frames, the ``[DONE]`` terminator, and what the arrival times alone show.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping
from dataclasses import asdict

from tokenrelay.doctor._checks import (
    FIX_NAIVE_SPLIT,
    cancel_check,
    end_check,
    first_with_text,
    header_checks,
    latency_check,
    proxy_name,
    timing_check,
)
from tokenrelay.doctor._payload import DiagnosticPlan, Schedule, event_text, parse_schedule
from tokenrelay.doctor._recording import CancelObservation, Exchange, TimedEvent, line_ends, naive_event_count
from tokenrelay.doctor._report import Check, Report, Status
from tokenrelay.doctor._timeline import Timeline
from tokenrelay.doctor._verdict import Relay, judge_arrivals, judge_relay
from tokenrelay.wire._chat_reader import choice_content, choice_reasoning

__all__ = ["chunk_text", "diagnose_chat", "diagnose_diagnostic", "unreachable"]


def unreachable(url: str, error: str) -> Report:
    """The report for an endpoint that did not answer at all."""
    return Report(url, "none", [Check(Status.FAIL, "connect", error, hop="the network path to the endpoint")])


def chunk_text(data: str) -> str | None:
    """The text an OpenAI chat chunk adds (``""`` when it has none), its reasoning included (a reasoning
    model's tokens are streamed tokens too); None if the data is not a chat chunk at all. Read as the client
    reads it (``wire._chat_reader.choice_content`` and ``choice_reasoning``)."""
    try:
        chunk = json.loads(data)
    except ValueError:
        return None
    content = choice_content(chunk) if isinstance(chunk, dict) else None
    return None if content is None else choice_reasoning(chunk) + content[0]


def _texts(events: list[TimedEvent]) -> tuple[list[tuple[TimedEvent, str]], bool, list[int]]:
    """The chat chunks with their text, whether ``[DONE]`` came, and the indexes of non-chunk events."""
    texts: list[tuple[TimedEvent, str]] = []
    done = False
    bad: list[int] = []
    for i, timed in enumerate(events):
        if timed.event.data == "[DONE]":
            done = True
            continue
        if timed.event.event != "message":
            continue
        text = chunk_text(timed.event.data)
        if text is None:
            bad.append(i)
        else:
            texts.append((timed, text))
    return texts, done, bad


def _write_arrivals(exchange: Exchange, schedule: Schedule) -> list[float | None]:
    """When each scheduled write had fully arrived: the first read whose end passed the write's end."""
    ends = exchange.chunk_ends()
    out: list[float | None] = []
    j = 0
    for _, offset, size in schedule.writes:
        while j < len(ends) and ends[j] < offset + size:
            j += 1
        out.append(exchange.chunks[j].at_ms if j < len(ends) else None)
    return out


def _damage(expected: bytes, got: bytes, exchange: Exchange) -> Check:
    """Say how the body (``got``, the whole of it) differs from what was sent, in terms of the hop that did it."""
    hop = f"{proxy_name(exchange) or 'a hop'} between the server and the client rewrote the body"
    want, have = expected.decode("utf-8"), got.decode("utf-8", "replace")

    extra = have[: len(want)].count("\ufffd") - want[: len(have)].count("\ufffd")
    if extra > 0:
        return Check(
            Status.FAIL,
            "bytes",
            f"U+FFFD appeared {extra} more times than sent: characters split across writes were replaced",
            hop=hop + " (decoded UTF-8 chunk by chunk)",
            fix="pass the body through as bytes, or decode it with an incremental UTF-8 decoder",
        )
    # One being a prefix of the other: the body may have been cut as well as rewritten.
    lf = expected.replace(b"\r\n", b"\n")
    if b"\r\n" in expected and (got.startswith(lf) or lf.startswith(got)):
        return Check(
            Status.FAIL, "bytes", "CRLF line ends arrived as LF", hop=hop, fix="pass the body through"
        )
    nfc = unicodedata.normalize("NFC", want)
    if have.startswith(nfc) or nfc.startswith(have):
        return Check(
            Status.FAIL, "bytes", "the text arrived Unicode-normalised (NFC)", hop=hop, fix="pass it through"
        )
    at = next(
        (i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b),
        min(len(expected), len(got)),
    )
    return Check(
        Status.FAIL,
        "bytes",
        f"differs from byte {at}: sent {expected[at : at + 16]!r}, got {got[at : at + 16]!r}",
        hop=hop,
        fix="pass the body through byte for byte",
    )


def _find_schedule(events: list[TimedEvent], status: Mapping[str, object] | None) -> Schedule | None:
    """The send times: from the stream's own schedule event, else from the status endpoint's reply."""
    sources: list[str | Mapping[str, object]] = [t.event.data for t in events if t.event.event == "schedule"]
    for source in [*sources, *([status] if status else [])]:
        try:
            return parse_schedule(source)
        except ValueError:
            continue
    return None


def _server_saw_close(status: Mapping[str, object] | None) -> float | None:
    """When the server saw the client leave, from the status endpoint (None: it did not, or cannot say)."""
    if status is None or status.get("state") != "cancelled":
        return None
    after = status.get("cancelled_after_ms")
    return float(after) if isinstance(after, (int, float)) else None


def _bytes_check(exchange: Exchange, plan: DiagnosticPlan) -> Check:
    body, expected = exchange.body, plan.body
    if body[: len(expected)] != expected[: len(body)]:
        return _damage(expected, body, exchange)
    return Check(
        Status.PASS,
        "bytes",
        f"{min(len(body), len(expected))} of {len(expected)} bytes identical to what was sent in {len(plan.cuts)} "
        f"writes ({plan.cuts_inside_characters()} cuts inside a UTF-8 character, {plan.cuts_inside_crlf()} "
        "between CR and LF)",
    )


def _text_check(texts: list[tuple[TimedEvent, str]], bad: list[int], parse_error: str | None) -> Check:
    """Each event's text as a client decodes it, against the known payload (one literal U+FFFD each)."""
    exact = sum(1 for k, (_, text) in enumerate(texts) if text == event_text(k))
    fffd = sum(text.count("\ufffd") for _, text in texts)
    message = f"{exact} of {len(texts)} events exact; U+FFFD {fffd} times ({len(texts)} literal ones sent)"
    if bad or parse_error:
        message += f"; {len(bad)} events were not chat chunks" + (f"; {parse_error}" if parse_error else "")
    ok = exact == len(texts) and not bad and not parse_error
    return Check(Status.PASS if ok else Status.FAIL, "text", message)


def _diagnostic_timeline(
    exchange: Exchange, schedule: Schedule, arrivals: list[float | None], title: str
) -> Timeline:
    # Draw sends on the client's clock, shifted so the fastest write is vertical (see _timeline).
    transit = [a - w[0] for w, a in zip(schedule.writes, arrivals, strict=True) if a is not None]
    shift = min(transit, default=0.0)
    return Timeline(
        title=f"diagnostic stream: {title}",
        sends_ms=[w[0] + shift for w in schedule.writes],
        arrivals_ms=arrivals,
        sizes=[w[2] for w in schedule.writes],
        reads=[(c.at_ms, len(c.data)) for c in exchange.chunks],
        headers_ms=exchange.headers_ms,
    )


def diagnose_diagnostic(
    exchange: Exchange,
    plan: DiagnosticPlan,
    *,
    status: Mapping[str, object] | None = None,
    cancel: CancelObservation | None = None,
    url: str | None = None,
) -> Report:
    """Judge one run of the diagnostic stream. ``plan`` is what was asked for; ``status`` the status
    endpoint's reply after the stream (send times for a stream whose schedule event never arrived); ``url``
    is what the report is titled with (the request's URL by default)."""
    events, truncated, parse_error = exchange.events()
    schedule = _find_schedule(events, status)
    plan = schedule.plan if schedule is not None else plan  # what the server sent, should it differ
    texts, done, bad = _texts(events)
    relay: Relay | None = None
    arrivals: list[float | None] = []
    if schedule is not None:
        arrivals = _write_arrivals(exchange, schedule)
        arrived = [(w, a) for w, a in zip(schedule.writes, arrivals, strict=True) if a is not None]
        relay = judge_relay([w[0] for w, _ in arrived], [a for _, a in arrived], [w[2] for w, _ in arrived])

    checks = [
        Check(Status.INFO, "probe", _probe_line(exchange, plan)),
        Check(Status.PASS if exchange.status == 200 else Status.FAIL, "status", str(exchange.status)),
    ]
    checks += header_checks(exchange, relay)
    if relay is not None:
        checks.append(timing_check(exchange, relay, send_times=True))
    else:
        checks.append(Check(Status.SKIP, "timing", "no send times: the schedule never arrived"))
    checks.append(latency_check(exchange, first_with_text(texts)))
    checks.append(_bytes_check(exchange, plan))
    checks.append(_text_check(texts, bad, parse_error))
    # The probe picked these line ends, not the deployment (tokenrelay's chat streams use LF), so the
    # naive-splitter fix is printed only for a stream whose own line ends call for it (chat mode).
    naive = naive_event_count(exchange.body)
    checks.append(
        Check(
            Status.INFO,
            "framing",
            f"{plan.eol.upper()} line ends: parsed {len(texts)} events; a client splitting on \\n\\n would "
            f"see {naive}",
        )
    )
    complete = done and schedule is not None and len(texts) == plan.events
    checks.append(
        end_check(
            exchange,
            complete,
            truncated,
            f"complete: {plan.events} events, schedule, [DONE]",
            server_saw_close_ms=_server_saw_close(status),
        )
    )
    checks.append(cancel_check(cancel, plan.cadence_ms))

    facts: dict[str, object] = {
        "plan": {
            **plan.query(),
            "bytes": len(plan.body),
            "cuts_inside_characters": plan.cuts_inside_characters(),
        },
        **_exchange_facts(exchange, relay),
        "request": exchange.url,
    }
    timeline = None
    if schedule is not None:
        facts["writes"] = [[w[0], a, w[2]] for w, a in zip(schedule.writes, arrivals, strict=True)]
        timeline = _diagnostic_timeline(
            exchange, schedule, arrivals, relay.kind.value if relay else "no timing"
        )
    if cancel is not None:
        facts["cancel"] = asdict(cancel)
    return Report(url or exchange.url, "diagnostics", checks, timeline, facts)


def _probe_line(exchange: Exchange, plan: DiagnosticPlan) -> str:
    """What was asked for, with the seed to replay it (``tokenrelay doctor URL --seed S``)."""
    return (
        f"{exchange.method} diagnostic stream: {plan.events} events {plan.cadence_ms:g} ms apart in "
        f"{len(plan.cuts)} writes, {plan.eol.upper()}, seed {plan.seed} (replay: --seed {plan.seed})"
    )


def _chat_text_check(text: str) -> Check:
    lone = sum(1 for ch in text if "\ud800" <= ch <= "\udfff")
    if lone:
        return Check(
            Status.FAIL,
            "text",
            f"{lone} lone surrogate halves: the server split characters between chunks",
            hop="the server (it escaped half a UTF-16 pair per chunk)",
            fix="hold a partial character until it is complete before sending a chunk",
        )
    if "\ufffd" in text:
        return Check(
            Status.WARN,
            "text",
            f"U+FFFD in the text ({text.count(chr(0xFFFD))}): a detokenizer or a hop may have cut "
            "multi-byte characters (or the model wrote it)",
            hop="the server's detokenizer, or a hop decoding chunk by chunk",
            fix="decode token bytes incrementally, emitting a character only when complete",
        )
    return Check(Status.PASS, "text", f"{len(text)} characters, no U+FFFD, no split surrogates")


def _chat_framing_check(body: bytes, events: int) -> Check:
    ends = line_ends(body)
    naive = naive_event_count(body)
    if not ends["crlf"] and not ends["cr"]:
        return Check(Status.PASS, "framing", f"LF line ends; {events} events")
    if naive >= events:  # CR or CRLF somewhere, but not where a naive splitter would lose an event
        return Check(
            Status.PASS,
            "framing",
            f"line ends: {ends['crlf']} CRLF, {ends['cr']} CR, {ends['lf']} LF; a client splitting on \\n\\n "
            f"still sees all {events} events",
        )
    return Check(
        Status.WARN,
        "framing",
        f"line ends: {ends['crlf']} CRLF, {ends['cr']} CR, {ends['lf']} LF (valid SSE); a client "
        f"splitting on \\n\\n would see {naive} of {events} events",
        hop="clients of this endpoint",
        fix=FIX_NAIVE_SPLIT,
    )


def _is_empty_frame(data: str) -> bool:
    """A chunk that carries nothing at all: no text, no role, no finish_reason, no tool call, no usage."""
    try:
        chunk = json.loads(data)
        choice = chunk["choices"][0]
        delta = choice.get("delta") or {}
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return False
    meaningful = ("content", "role", "tool_calls", "function_call", "refusal")
    return (
        not any(delta.get(k) for k in meaningful)
        and not choice.get("finish_reason")
        and not chunk.get("usage")
    )


def _frames_check(events: list[TimedEvent], texts: list[tuple[TimedEvent, str]], with_text: int) -> Check:
    empty = sum(1 for t, _ in texts if _is_empty_frame(t.event.data))
    usage = _usage_tokens(events)
    per_token = f"; {with_text / usage:.2f} frames per token" if usage else ""
    message = f"{len(texts)} chunks, {with_text} with text, {empty} empty{per_token}"
    if empty > max(1, len(texts) // 10):
        return Check(Status.WARN, "frames", message + ": empty frames cost a parse and a render each")
    return Check(Status.INFO, "frames", message)


def diagnose_chat(
    exchange: Exchange, *, cancel: CancelObservation | None = None, url: str | None = None
) -> Report:
    """Judge an ordinary streamed chat completion from any OpenAI-compatible endpoint."""
    url = url or exchange.url
    if exchange.status != 200:
        snippet = exchange.body[:200].decode("utf-8", "replace")
        check = Check(Status.FAIL, "status", f"{exchange.status}: {snippet}", hop="the endpoint")
        return Report(url, "chat", [check], None, _exchange_facts(exchange, None))
    events, truncated, parse_error = exchange.events()
    texts, done, bad = _texts(events)
    content = [t for t, s in texts if s]
    sizes = [len(t.event.data.encode()) for t in content]
    relay = judge_arrivals([t.at_ms for t in content], sizes)
    checks = [Check(Status.PASS, "status", "200"), *header_checks(exchange, relay)]
    checks.append(timing_check(exchange, relay, send_times=False))
    checks.append(latency_check(exchange, first_with_text(texts)))
    checks.append(_chat_text_check("".join(s for _, s in texts)))
    if bad or parse_error:
        message = f"{len(bad)} events are not chat chunks {parse_error or ''}".strip()
        checks.append(Check(Status.FAIL, "chunks", message, hop="the endpoint"))
    checks.append(_chat_framing_check(exchange.body, len(events)))
    checks.append(_frames_check(events, texts, len(content)))
    checks.append(end_check(exchange, done, truncated, "ended with data: [DONE]"))
    checks.append(cancel_check(cancel, relay.cadence_ms or 0.0))
    timeline = Timeline(
        title=f"chat stream (arrivals only): {relay.kind.value}",
        sends_ms=[None] * len(content),
        arrivals_ms=[t.at_ms for t in content],
        sizes=sizes,
        reads=[(c.at_ms, len(c.data)) for c in exchange.chunks],
        headers_ms=exchange.headers_ms,
    )
    return Report(url, "chat", checks, timeline, _exchange_facts(exchange, relay))


def _usage_tokens(events: list[TimedEvent]) -> int | None:
    for timed in reversed(events):
        try:
            usage = json.loads(timed.event.data).get("usage")
        except (ValueError, AttributeError):
            continue
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            return int(usage["completion_tokens"])
    return None


def _exchange_facts(exchange: Exchange, relay: Relay | None) -> dict[str, object]:
    facts: dict[str, object] = {
        "status": exchange.status,
        "headers": dict(exchange.headers),
        "headers_ms": exchange.headers_ms,
        "first_byte_ms": exchange.chunks[0].at_ms if exchange.chunks else None,
        "last_byte_ms": exchange.chunks[-1].at_ms if exchange.chunks else None,
        "bytes": len(exchange.body),
        "wire_bytes": exchange.wire_bytes,
        "reads": [[c.at_ms, len(c.data), c.wire] for c in exchange.chunks],
    }
    if relay is not None:
        facts["relay"] = {
            "kind": relay.kind.value,
            "items": relay.items,
            "cadence_ms": relay.cadence_ms,
            "coalesced": relay.coalesced,
            "groups": list(relay.groups),
            "group_bytes": list(relay.group_bytes),
            "max_hold_ms": relay.max_hold_ms,
        }
    return facts

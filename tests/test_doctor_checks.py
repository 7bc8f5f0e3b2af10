"""Recordings → checks, without a network: each hop's damage is simulated on the real diagnostic payload and
the report must name it, point at the right hop and give its fix; chat recordings likewise."""

from __future__ import annotations

import json
import unicodedata
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from tokenrelay._errors import TokenRelayError
from tokenrelay.doctor._checks import (
    FIX_COMPRESSION,
    FIX_NAIVE_SPLIT,
    FIX_NGINX,
    FIX_WHOLE_BODY,
    cancel_check,
)
from tokenrelay.doctor._diagnose import chunk_text, diagnose_chat, diagnose_diagnostic, unreachable
from tokenrelay.doctor._payload import DiagnosticPlan, Schedule
from tokenrelay.doctor._recording import CancelObservation, Chunk, Exchange
from tokenrelay.doctor._report import Report, Status
from tokenrelay.wire._chat_reader import ChatStreamDecoder
from tokenrelay.wire._sse import ServerSentEvent

PLAN = DiagnosticPlan("chk", seed=11, events=30, cadence_ms=50.0)
SSE = {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache",
    "x-accel-buffering": "no",
}


def record(
    plan: DiagnosticPlan = PLAN,
    *,
    arrive: Callable[[int, float], float] = lambda i, sent: sent + 4.0,
    rewrite: Callable[[bytes], bytes] = lambda b: b,
    headers: Mapping[str, str] = SSE,
    writes: int | None = None,
    trailer: bool = True,
) -> Exchange:
    """What a client would record if the server sent ``plan`` and a hop delivered write i at arrive(i, sent),
    passing each write through ``rewrite``; ``writes`` stops the stream early."""
    sent = [i * plan.cadence_ms + 0.3 for i in range(len(plan.cuts))]
    schedule = Schedule(plan, tuple((s, o, n) for s, (o, n) in zip(sent, plan.cuts, strict=True)))
    count = len(plan.cuts) if writes is None else writes
    chunks = [
        Chunk(arrive(i, sent[i]), rewrite(plan.body[o : o + n]), n)
        for i, (o, n) in enumerate(plan.cuts[:count])
    ]
    if trailer and writes is None:
        chunks.append(Chunk(chunks[-1].at_ms + plan.cadence_ms, plan.trailer(schedule), 1))
    return Exchange("http://proxy/v1/diagnostics/stream", 200, dict(headers), 2.0, chunks)


def status_of(report: Report) -> dict[str, Status]:
    return {check.name: check.status for check in report.checks}


def test_a_clean_relay_passes_everything() -> None:
    report = diagnose_diagnostic(record(), PLAN, url="http://proxy")
    assert not report.failed and report.exit_status == 0
    statuses = status_of(report)
    for name in ("status", "content-type", "cache-control", "timing", "bytes", "text", "end"):
        assert statuses[name] is Status.PASS, report.render_text()
    assert report.check("framing").message.endswith("would see 0")
    # The probe chose CRLF, not the deployment: the naive-splitter fix is not the deployment's to apply.
    assert report.check("framing").fix is None
    probe = report.check("probe")
    assert probe.status is Status.INFO and "seed 11 (replay: --seed 11)" in probe.message
    assert report.url == "http://proxy" and report.facts["request"] == "http://proxy/v1/diagnostics/stream"
    assert report.check("cancel").status is Status.SKIP


def test_bursts_behind_nginx_point_at_proxy_buffering() -> None:
    held = {"server": "nginx/1.22.1", **SSE}
    del held["x-accel-buffering"]
    report = diagnose_diagnostic(record(arrive=lambda i, s: (i // 5 + 1) * 250.0 + 1, headers=held), PLAN)
    timing = report.check("timing")
    assert timing.status is Status.FAIL and timing.message.startswith("bursts of 5")
    assert timing.hop == "nginx buffering (Server: nginx/1.22.1)" and timing.fix == FIX_NGINX
    assert report.check("x-accel-buffering").status is Status.INFO and report.exit_status == 1


def test_a_lump_with_gzip_points_at_compression_and_the_encoding_line_says_so() -> None:
    report = diagnose_diagnostic(
        record(arrive=lambda i, s: 1600.0, headers={**SSE, "content-encoding": "gzip"}), PLAN
    )
    assert report.check("timing").status is Status.FAIL and report.check("timing").message.startswith(
        "one lump"
    )
    assert report.check("timing").hop == "compression (Content-Encoding: gzip; no proxy named: no Via)"
    encoding = report.check("content-encoding")
    assert encoding.status is Status.FAIL and encoding.fix == FIX_COMPRESSION and "held" in encoding.message


def test_gzip_that_still_streams_is_a_warning_naming_it() -> None:
    report = diagnose_diagnostic(record(headers={**SSE, "content-encoding": "gzip"}), PLAN)
    encoding = report.check("content-encoding")
    assert encoding.status is Status.WARN and encoding.message.startswith("gzip")
    assert "one by one" in encoding.message and report.check("timing").status is Status.PASS
    assert not report.failed


def test_a_lump_with_etag_points_at_whole_body_middleware() -> None:
    headers = {**SSE, "etag": '"abc"', "content-length": "9999"}
    report = diagnose_diagnostic(record(arrive=lambda i, s: 1600.0, headers=headers), PLAN)
    timing = report.check("timing")
    assert timing.status is Status.FAIL and timing.fix == FIX_WHOLE_BODY
    assert timing.hop == "middleware that needs the whole body (ETag and Content-Length on a stream)"
    assert report.check("etag").status is Status.WARN and report.check("content-length").status is Status.WARN


def test_a_hop_decoding_utf8_per_write_is_caught_by_bytes_and_text() -> None:
    assert PLAN.cuts_inside_characters() > 0
    rewrite = lambda b: b.decode("utf-8", "replace").encode()  # noqa: E731 - what a naive hop does
    report = diagnose_diagnostic(record(rewrite=rewrite, headers={**SSE, "via": "1.1 somecdn"}), PLAN)
    assert report.check("bytes").status is Status.FAIL
    assert "U+FFFD appeared" in report.check("bytes").message
    hop = report.check("bytes").hop
    assert hop is not None and hop.startswith("a proxy (Via: 1.1 somecdn)")
    text = report.check("text")
    assert text.status is Status.FAIL and f"({PLAN.events} literal ones sent)" in text.message


def test_line_end_rewriting_and_unicode_normalisation_are_named() -> None:
    crlf = diagnose_diagnostic(record(rewrite=lambda b: b.replace(b"\r\n", b"\n")), PLAN)
    assert crlf.check("bytes").message == "CRLF line ends arrived as LF"
    whole = record().body  # a hop that rewrites the whole body at once
    nfc = unicodedata.normalize("NFC", whole.decode()).encode()
    assert nfc != whole
    report = diagnose_diagnostic(Exchange("u", 200, SSE, 1.0, [Chunk(5.0, nfc, len(nfc))]), PLAN)
    assert report.check("bytes").message == "the text arrived Unicode-normalised (NFC)"
    assert report.check("text").status is Status.FAIL
    flipped = bytearray(whole)
    flipped[100] ^= 1
    report = diagnose_diagnostic(Exchange("u", 200, SSE, 1.0, [Chunk(5.0, bytes(flipped), 1)]), PLAN)
    assert report.check("bytes").message.startswith("differs from byte 100: ")


def test_a_stream_cut_short_fails_at_the_end_check() -> None:
    report = diagnose_diagnostic(record(writes=12), PLAN)
    assert report.check("end").status is Status.FAIL and "stopped early" in report.check("end").message
    assert report.check("bytes").status is Status.PASS  # what did arrive was intact
    assert report.check("timing").status is Status.SKIP  # no schedule, no status endpoint: no send times


def test_send_times_come_from_the_status_endpoint_when_the_schedule_never_arrived() -> None:
    sent = [i * PLAN.cadence_ms for i in range(12)]
    status = {
        "state": "cancelled",
        **Schedule(PLAN, tuple((s, o, n) for s, (o, n) in zip(sent, PLAN.cuts, strict=False))).to_json(),
    }
    report = diagnose_diagnostic(record(writes=12), PLAN, status=status)
    assert report.check("timing").status is Status.PASS and "12 arrivals" in report.check("timing").message


def test_headers_that_break_streaming() -> None:
    report = diagnose_diagnostic(record(headers={"content-type": "application/json"}), PLAN)
    assert report.check("content-type").status is Status.FAIL
    assert report.check("cache-control").status is Status.WARN
    yes = diagnose_diagnostic(record(headers={**SSE, "x-accel-buffering": "yes"}), PLAN)
    assert yes.check("x-accel-buffering").status is Status.WARN


@pytest.mark.parametrize(
    ("cancel", "status", "needle"),
    [
        (None, Status.SKIP, "not tried"),
        (CancelObservation(3, status_available=False), Status.SKIP, "no status endpoint"),
        (
            CancelObservation(3, True, "cancelled", 12.0, 5, 3),
            Status.PASS,
            "stopped within 12 ms, 2 writes after",
        ),
        (CancelObservation(3, True, "cancelled", 4000.0, 5, 3), Status.WARN, "(slow)"),
        (CancelObservation(3, True, "running", None, 40, 3, 2), Status.FAIL, "still writing"),
        (CancelObservation(3, True, "cancelled", 9.0, 40, 3, 1), Status.FAIL, "still writing"),
        (CancelObservation(3, True, "finished", 9.0, 400, 3), Status.WARN, "ended as 'finished'"),
    ],
)
def test_cancel_verdicts(cancel: CancelObservation | None, status: Status, needle: str) -> None:
    check = cancel_check(cancel, 50.0)
    assert check.status is status and needle in check.message
    assert (check.fix is not None) == (status is Status.FAIL)


# -- chat streams -------------------------------------------------------------------------------------------


def chat_body(
    pieces: list[str], *, eol: str = "\n", done: bool = True, usage: int | None = None
) -> list[bytes]:
    frames: list[dict[str, object]] = [
        {"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}
    ]
    frames += [{"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in pieces]
    frames.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    if usage is not None:
        frames.append({"choices": [], "usage": {"completion_tokens": usage}})
    out = [f"data: {json.dumps(f)}{eol}{eol}".encode() for f in frames]
    return out + ([f"data: [DONE]{eol}{eol}".encode()] if done else [])


def chat(frames: list[bytes], *, every: float = 20.0, headers: Mapping[str, str] = SSE) -> Exchange:
    chunks = [Chunk(10.0 + i * every, frame, len(frame)) for i, frame in enumerate(frames)]
    return Exchange("http://api/v1/chat/completions", 200, dict(headers), 3.0, chunks)


def test_a_healthy_chat_stream_passes() -> None:
    report = diagnose_chat(chat(chat_body(["Hello", " 🦙", " world"] * 4, usage=12)), url="http://api")
    assert not report.failed and report.mode == "chat" and report.url == "http://api"
    assert status_of(report)["text"] is Status.PASS and status_of(report)["framing"] is Status.PASS
    assert report.check("frames").message == "15 chunks, 12 with text, 0 empty; 1.00 frames per token"
    assert report.check("frames").status is Status.INFO
    assert report.check("end").status is Status.PASS and report.check("cancel").status is Status.SKIP


def test_chat_stream_problems_are_named() -> None:
    split = chat(chat_body(["a", "\ud83e", "\udd99", "b"]))  # JSON escapes of half a surrogate pair each
    assert split.body.count(b"\\ud83e") == 1
    report = diagnose_chat(split)
    assert report.check("text").status is Status.FAIL and "lone surrogate" in report.check("text").message
    assert diagnose_chat(chat(chat_body(["a\ufffd", "b"]))).check("text").status is Status.WARN
    crlf = diagnose_chat(chat(chat_body(["a", "b"], eol="\r\n")))
    assert crlf.check("framing").status is Status.WARN and crlf.check("framing").fix == FIX_NAIVE_SPLIT
    assert "would see 0 of 5 events" in crlf.check("framing").message
    assert diagnose_chat(chat(chat_body(["a", "b"], done=False))).check("end").status is Status.FAIL
    empty = diagnose_chat(chat(chat_body(["a", "", "", "", "", "b"])))
    assert empty.check("frames").status is Status.WARN and "4 empty" in empty.check("frames").message


def test_chat_timing_from_arrivals_alone() -> None:
    frames = chat_body([f"w{i} " for i in range(30)])
    lump = Exchange("u", 200, {**SSE, "etag": '"x"'}, 1900.0, [Chunk(2000.0, b"".join(frames), 1)])
    report = diagnose_chat(lump)
    assert report.check("timing").status is Status.FAIL and report.check("timing").fix == FIX_WHOLE_BODY
    plain_lump = diagnose_chat(Exchange("u", 200, SSE, 1900.0, [Chunk(2000.0, b"".join(frames), 1)]))
    assert plain_lump.check("timing").status is Status.WARN  # a fast server looks the same without send times
    assert "look alike" in plain_lump.check("timing").message


def test_chat_errors_and_unreachable() -> None:
    error = Exchange(
        "u", 401, {"content-type": "application/json"}, 1.0, [Chunk(2.0, b'{"error": "key"}', 16)]
    )
    report = diagnose_chat(error)
    assert report.failed and report.check("status").message.startswith("401")
    down = unreachable("http://nowhere", "ConnectError: refused")
    assert down.exit_status == 1 and down.check("connect").hop == "the network path to the endpoint"


def test_chunk_text_reads_only_chat_chunks() -> None:
    assert chunk_text('{"choices": [{"delta": {"content": "x"}}]}') == "x"
    assert chunk_text('{"choices": [{"delta": {"role": "assistant"}}]}') == ""
    # a reasoning model's chunks count as streamed text too (the lanes count reasoning tokens)
    assert chunk_text('{"choices": [{"delta": {"reasoning_content": "hm"}}]}') == "hm"
    assert chunk_text('{"choices": [{"delta": {"reasoning": "hm"}}]}') == "hm"
    assert chunk_text('{"choices": [], "usage": {}}') == ""
    for not_a_chunk in ("nope", "[1]", '{"choices": 3}', '{"a": 1}'):
        assert chunk_text(not_a_chunk) is None


def test_chunk_text_reads_the_shared_vectors_as_the_client_does() -> None:
    vectors = json.loads((Path(__file__).parent / "vectors" / "chat_chunks.json").read_text("utf-8"))
    for vector in vectors["vectors"]:
        decoder = ChatStreamDecoder()
        for data in vector["events"]:
            before = decoder.not_chunks
            try:
                text = decoder.feed(ServerSentEvent(data=data))
            except TokenRelayError:
                break
            if decoder.done:
                break
            was_chunk = decoder.not_chunks == before
            assert chunk_text(data) == (text if was_chunk else None), (vector["name"], data)


# -- renderings ---------------------------------------------------------------------------------------------


def test_text_json_html_and_svg_renderings() -> None:
    held = {"server": "nginx", **SSE}
    report = diagnose_diagnostic(record(arrive=lambda i, s: (i // 5 + 1) * 250.0), PLAN, url="http://a<b>")
    report = Report(report.url, report.mode, report.checks, report.timeline, report.facts)
    text = report.render_text()
    assert text.splitlines()[0] == "tokenrelay doctor http://a<b>  (diagnostics)"
    assert (
        "FAIL  timing" in text and "hop: " in text and text.rstrip().splitlines()[-1].startswith("FAILED: ")
    )
    data = json.loads(report.render_json())
    assert data["ok"] is False and data["mode"] == "diagnostics"
    assert {c["check"] for c in data["checks"]} >= {"timing", "bytes", "text", "end", "cancel"}
    assert len(data["facts"]["writes"]) == len(PLAN.cuts) and data["facts"]["relay"]["kind"] == "bursts"
    svg = report.svg()
    assert svg is not None
    root = ET.fromstring(svg)  # well-formed, self-contained
    lines = [e for e in root.iter("{http://www.w3.org/2000/svg}line") if e.find("{*}title") is not None]
    assert len(lines) == len(PLAN.cuts)  # one send→arrival line per write
    html = report.render_html()
    assert "<svg" in html and "http://a&lt;b&gt;" in html and "<b>hop</b>" in html
    chat_svg = diagnose_chat(chat(chat_body(["a", "b", "c", "d", "e"]), headers=held)).svg()
    assert chat_svg is not None and "client received" in chat_svg and "server sent" not in chat_svg


def test_a_cut_the_server_saw_as_a_close_names_the_hop_that_closed_it() -> None:
    cut = record(writes=3, headers={**SSE, "server": "Caddy, uvicorn"})
    status = {"state": "cancelled", "cancelled_after_ms": 4.2}
    end = diagnose_diagnostic(cut, PLAN, status=status).check("end")
    assert (
        end.status is Status.FAIL
        and "the server saw its connection close 4 ms into the stream" in end.message
    )
    assert end.hop == "Caddy closed its connection to the server mid-stream (Server: Caddy, uvicorn)"
    plain = diagnose_diagnostic(cut, PLAN).check("end")  # no status: it cannot say who closed
    assert plain.hop is not None and plain.hop.startswith("a hop that closed the stream")

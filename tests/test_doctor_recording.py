"""The recording types: content decoding over every split, events timed by the read that completed them, the
naive splitter the doctor demonstrates, and header joining."""

from __future__ import annotations

import gzip
import zlib

import pytest

from _cuts import cuttings
from tokenrelay.doctor._payload import DiagnosticPlan
from tokenrelay.doctor._recording import (
    Chunk,
    ContentDecoder,
    Exchange,
    join_headers,
    line_ends,
    naive_event_count,
)

PLAIN = DiagnosticPlan("rec", 1, 6).body


def deflate_raw(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


@pytest.mark.parametrize(
    ("encoding", "encode"),
    [
        (None, lambda b: b),
        ("identity", lambda b: b),
        ("gzip", gzip.compress),
        ("x-gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", deflate_raw),  # what some servers send for "deflate"
    ],
)
def test_decoding_over_any_split_equals_the_one_shot_result(encoding: str | None, encode: object) -> None:
    wire = encode(PLAIN)  # type: ignore[operator]
    for pieces in cuttings(wire, every=max(1, len(wire) // 60)):
        decoder = ContentDecoder(encoding)
        assert b"".join(decoder.feed(p) for p in pieces) + decoder.flush() == PLAIN


def test_unknown_and_corrupt_encodings_are_value_errors() -> None:
    with pytest.raises(ValueError, match="br"):
        ContentDecoder("br")
    decoder = ContentDecoder("gzip")
    with pytest.raises(ValueError, match="corrupt gzip"):
        decoder.feed(b"not gzip at all")
    decoder = ContentDecoder("deflate")
    assert decoder.feed(b"x") == b""
    with pytest.raises(ValueError):
        decoder.flush()


def test_events_carry_the_arrival_of_the_read_that_completed_them() -> None:
    body = b"data: one\r\n\r\ndata: t"
    chunks = [Chunk(10.0, body, len(body)), Chunk(25.0, b"wo\r", 3), Chunk(40.0, b"\n\r\n: tail", 9)]
    exchange = Exchange("http://x", 200, {"content-type": "text/event-stream"}, 5.0, chunks)
    events, truncated, error = exchange.events()
    assert [(t.event.data, t.at_ms, t.index) for t in events] == [("one", 10.0, 0), ("two", 40.0, 2)]
    assert not truncated and error is None
    assert exchange.chunk_ends() == [len(body), len(body) + 3, len(body) + 12]
    assert exchange.wire_bytes == len(body) + 12 and exchange.header("Content-Type") == "text/event-stream"


def test_events_report_truncation_and_parser_limits() -> None:
    cut = Exchange("u", 200, {}, 0.0, [Chunk(1.0, b"data: a\n\ndata: half", 19)])
    events, truncated, error = cut.events()
    assert [t.event.data for t in events] == ["a"] and truncated and error is None
    huge = Exchange("u", 200, {}, 0.0, [Chunk(1.0, b"data: " + b"x" * (1 << 21), 0)])
    events, truncated, error = huge.events()
    assert events == [] and truncated and error is not None and "max_event_bytes" in error


def test_naive_splitter_sees_only_lf_framed_events() -> None:
    assert naive_event_count(b"data: a\n\ndata: b\n\n") == 2
    assert naive_event_count(b"data: a\r\n\r\ndata: b\r\n\r\n") == 0
    assert naive_event_count(b"data: a\r\rdata: b\r\r") == 0
    assert naive_event_count(b"data: a\n\n: comment\n\ndata: never ended") == 1


def test_line_ends_and_header_joining() -> None:
    assert line_ends(b"a\r\nb\rc\nd\r\n") == {"crlf": 2, "cr": 1, "lf": 1}
    joined = join_headers([("Vary", "Accept"), ("Content-Type", "text/plain"), ("vary", "Origin")])
    assert joined == {"vary": "Accept, Origin", "content-type": "text/plain"}

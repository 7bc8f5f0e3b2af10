"""SSE codec: the shared vectors, a literal reading of the WHATWG algorithm as an oracle, round trips, fuzz.

Every check feeds the same bytes whole, one byte at a time, at every split offset and at random cuts, and
expects one outcome: the contract "joined outputs over any split equal the one-shot result".
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _cuts import cut_at, cuttings
from tokenrelay._errors import ProtocolError, UseAfterFinishError
from tokenrelay.wire._sse import DEFAULT_MAX_EVENT_BYTES, ServerSentEvent, SSEParser, encode_event

VECTORS = json.loads((Path(__file__).parent / "vectors" / "sse.json").read_text(encoding="utf-8"))["vectors"]


class Outcome(NamedTuple):
    events: list[ServerSentEvent]
    last_event_id: str
    retry: int | None
    truncated: bool
    error: str | None  # the ProtocolError message, when the stream broke the size limit


def parse_by_feed(chunks: Iterable[bytes], max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> Outcome:
    parser = SSEParser(max_event_bytes)
    events: list[ServerSentEvent] = []
    try:
        for chunk in chunks:
            events.extend(parser.feed(chunk))
        events.extend(parser.close())
    except ProtocolError as exc:
        return Outcome(events, parser.last_event_id, parser.retry, False, exc.message)
    return Outcome(events, parser.last_event_id, parser.retry, parser.truncated, None)


def parse_by_iter(chunks: Iterable[bytes], max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> Outcome:
    parser = SSEParser(max_event_bytes)
    events: list[ServerSentEvent] = []
    try:
        for event in parser.iter_events(iter(chunks)):  # a one-shot iterator, as a network read gives
            events.append(event)
    except ProtocolError as exc:
        return Outcome(events, parser.last_event_id, parser.retry, False, exc.message)
    return Outcome(events, parser.last_event_id, parser.retry, parser.truncated, None)


def parse(chunks: Iterable[bytes], max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> Outcome:
    """The outcome of ``feed`` per chunk and ``close``; ``iter_events`` over the same chunks must agree."""
    chunks = list(chunks)
    outcome = parse_by_feed(chunks, max_event_bytes)
    assert parse_by_iter(chunks, max_event_bytes) == outcome, chunks
    return outcome


def assert_split_invariant(stream: bytes, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> Outcome:
    whole = parse([stream], max_event_bytes)
    for chunks in cuttings(stream):
        assert parse(chunks, max_event_bytes) == whole, chunks
    return whole


# -- the vectors --------------------------------------------------------------------------------------------


def vector_bytes(vector: dict[str, object]) -> bytes:
    if "input_base64" in vector:
        return base64.b64decode(str(vector["input_base64"]))
    pieces = vector["input"]
    assert isinstance(pieces, list)
    return "".join(pieces).encode()


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_vector(vector: dict[str, object]) -> None:
    stream = vector_bytes(vector)
    limit = int(vector.get("max_event_bytes", DEFAULT_MAX_EVENT_BYTES))  # type: ignore[call-overload]
    outcome = assert_split_invariant(stream, limit)
    assert [e._asdict() for e in outcome.events] == vector["events"]
    assert (outcome.error is not None) == vector.get("error", False)
    if outcome.error is None:
        assert outcome.last_event_id == vector["last_event_id"]
        assert outcome.retry == vector["retry"]
        assert outcome.truncated == vector["truncated"]
    if "input" in vector and outcome.error is None:
        assert parse([p.encode() for p in vector["input"]], limit) == outcome  # type: ignore[attr-defined]


def test_vectors_cover_the_spec_examples_and_the_edges() -> None:
    names = {v["name"] for v in VECTORS}
    assert sum(v["source"] == "whatwg" for v in VECTORS) >= 6
    assert {
        "BOM split over chunks",
        "line ends: CRLF split over chunks",
        "invalid UTF-8 becomes U+FFFD",
    } <= names


# -- an oracle: the spec's algorithm read literally, on decoded text ----------------------------------------


def reference(stream: bytes) -> Outcome:
    """WHATWG event stream interpretation, step by step, over the whole stream at once."""
    if stream.startswith(b"\xef\xbb\xbf"):
        stream = stream[3:]
    *lines, rest = re.split(r"\r\n|\r|\n", stream.decode("utf-8", "replace"))
    events: list[ServerSentEvent] = []
    data = event_type = id_buffer = last_event_id = ""
    retry: int | None = None
    event_retry: int | None = None
    open_event = False
    for line in lines:
        if not line:
            last_event_id = id_buffer
            if data:
                events.append(ServerSentEvent(event_type or "message", data[:-1], last_event_id, event_retry))
            data = event_type = ""
            event_retry = None
            open_event = False
            continue
        if line.startswith(":"):
            continue
        open_event = True
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            event_type = value
        elif name == "data":
            data += value + "\n"
        elif name == "id" and "\0" not in value:
            id_buffer = value
        elif name == "retry" and value and all(c in "0123456789" for c in value):
            retry = event_retry = int(value)
    truncated = open_event or (rest != "" and not rest.startswith(":"))
    return Outcome(events, last_event_id, retry, truncated, None)


TOKENS = [
    b"data", b"data:", b"data: ", b"event:", b"id:", b"id: ", b"retry:", b"retry: ", b":", b": ", b" ", b"x",
    b"1", b"42", b"\r", b"\n", b"\r\n", b"\n\n", b"\x00", b"\xef\xbb\xbf", b"\xef\xbb", b"\xe0", b"\xa4",
    b"\xff", "é".encode(), "😀".encode(), "😀".encode()[:3], b"\xc0\xaf", b"\t", "\u2028".encode(),
]  # fmt: skip
streams = st.lists(st.sampled_from(TOKENS), max_size=40).map(b"".join)


@st.composite
def split_stream(
    draw: st.DrawFn, stream_strategy: st.SearchStrategy[bytes] = streams
) -> tuple[bytes, list[bytes]]:
    stream = draw(stream_strategy)
    return stream, cut_at(stream, draw(st.lists(st.integers(0, len(stream)), max_size=8)))


@settings(max_examples=300, deadline=None)
@given(split_stream())
def test_matches_the_literal_algorithm_under_any_cutting(case: tuple[bytes, list[bytes]]) -> None:
    stream, chunks = case
    assert parse(chunks) == reference(stream)


# Streams shaped like real ones, to reach the parser's shortcuts for runs of ``data: ...`` + blank line (one
# event or several per chunk, long payloads) and the places where they must give way to the line-by-line path.
PAYLOAD = st.binary(max_size=80).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))
FRAME_PIECES = st.sampled_from(
    [
        b"data: ",
        b"data:",
        b"\n",
        b"\n\n",
        b"\n\ndata: ",
        b"\r\n",
        b"id: 7\n",
        b"event: e\n",
        b": c\n",
        b"\xe2\x82",
    ]
)
frame_streams = st.lists(
    st.one_of(PAYLOAD.map(lambda p: b"data: " + p + b"\n\n"), PAYLOAD, FRAME_PIECES), max_size=30
).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(split_stream(frame_streams))
def test_chat_shaped_streams_match_the_literal_algorithm(case: tuple[bytes, list[bytes]]) -> None:
    stream, chunks = case
    assert parse(chunks) == reference(stream)


UNLIMITED = [v for v in VECTORS if not v.get("error")]  # the oracle has no size limit


@pytest.mark.parametrize("vector", UNLIMITED, ids=[v["name"] for v in UNLIMITED])
def test_oracle_agrees_with_the_vectors(vector: dict[str, object]) -> None:
    oracle = reference(vector_bytes(vector))
    assert [e._asdict() for e in oracle.events] == vector["events"]
    assert (oracle.last_event_id, oracle.retry, oracle.truncated) == (
        vector["last_event_id"],
        vector["retry"],
        vector["truncated"],
    )


# -- fuzz: any bytes give events or the parser's ProtocolError, the same for every cutting ------------------


@settings(max_examples=300, deadline=None)
@given(split_stream(st.binary(max_size=300) | streams), st.integers(1, 40))
def test_any_bytes_give_events_or_protocol_error_whatever_the_cutting(
    case: tuple[bytes, list[bytes]], limit: int
) -> None:
    stream, chunks = case
    assert parse(chunks, limit) == parse([stream], limit)  # parse() lets only ProtocolError through as data


def test_protocol_error_is_raised_after_the_good_events_and_then_sticks() -> None:
    parser = SSEParser(16)
    assert parser.feed(b"data: a\n\ndata: 0123456789ABCDEF\n\ndata: b\n\n") == [ServerSentEvent(data="a")]
    with pytest.raises(ProtocolError, match="max_event_bytes=16") as first:
        parser.feed(b"data: c\n\n")
    with pytest.raises(ProtocolError) as again:
        parser.close()
    assert again.value is first.value
    assert first.value.status_code == 502


def test_after_the_size_error_no_further_event_is_returned_by_either_driver() -> None:
    # After a first comment chunk (the BOM question settled), the next chunk completes "a" and then breaks
    # the limit with a 20-byte field line; the last holds a whole valid event, which must not come out: the
    # error is raised instead.
    chunks = [b": hi\n", b"data: a\n\n" + b"x" * 20 + b"\n", b"\ndata: b\n\n"]
    outcome = parse(chunks, 10)
    assert (outcome.events, outcome.error) == (
        [ServerSentEvent(data="a")],
        "SSE line or event exceeds max_event_bytes=10",
    )


def test_a_sticky_id_reaches_events_completed_together_in_a_later_chunk() -> None:
    # The later chunks hold several plain ``data:`` events, the shape the parser splits in one go.
    stream = b"id: 7\ndata: a\n\n" + b"data: b\n\ndata: c\n\ndata: d\n\n"
    assert assert_split_invariant(stream) == Outcome(
        [ServerSentEvent(data=x, id="7") for x in "abcd"], "7", None, False, None
    )


@pytest.mark.parametrize(
    "stream",
    [
        b"data: a\nb\n\n",
        b"data: a\n\n\n",
        b"data: a\ndata: b\n\n",
        b"data: a\n\ndata: b\nc\n\ndata: d\n\n",
        b"data: a\n\ndata:b\n\n",
        b"data: a\n\n:x\n\ndata: b\n\n",
        b"data: a\r\n\r\ndata: b\n\ndata: c\r\rdata: d\n\n",
    ],
)
def test_near_misses_of_the_plain_data_event_shape(stream: bytes) -> None:
    # Each is one byte or line away from ``data: p`` + blank line, cut everywhere.
    assert assert_split_invariant(stream) == reference(stream)


def test_empty_chunks_change_nothing() -> None:
    stream = b"data: a\n\n: comment\r\ndata: b\r\n\r\n" + b"x" * 20
    for limit in (DEFAULT_MAX_EVENT_BYTES, 10):
        whole = parse([stream], limit)
        assert parse([piece for byte in stream for piece in (b"", bytes([byte]))], limit) == whole
        assert parse([b"", stream, b""], limit) == whole
    assert parse([b"", b":" + b"y" * 20], 10).error is not None  # a comment still breaks the line limit
    # A comment piece after an empty chunk, inside an event that used up its budget: within the line limit.
    assert parse([b"data: 1234\n", b"", b":yy", b"\n\n"], 10).events == [ServerSentEvent(data="1234")]


def test_a_line_that_never_ends_is_refused_before_it_is_complete() -> None:
    parser = SSEParser(1000)
    fed = 0
    with pytest.raises(ProtocolError):
        while fed < 10_000:
            parser.feed(b"data: " if fed == 0 else b"x" * 100)
            fed += 6 if fed == 0 else 100
    assert fed <= 1000  # refused within one chunk of passing the limit, not at the end


def test_iter_events_refuses_a_line_that_never_ends_as_soon_as_feed_would() -> None:
    pulled = 0

    def endless() -> Iterator[bytes]:
        nonlocal pulled
        yield b"data: "
        while True:
            pulled += 100
            yield b"x" * 100

    with pytest.raises(ProtocolError):
        list(SSEParser(1000).iter_events(endless()))
    assert pulled <= 1000


@pytest.mark.parametrize("driver", ["feed", "iter_events"])
def test_many_short_comment_pieces_inside_a_full_event_stay_cheap(
    monkeypatch: pytest.MonkeyPatch, driver: str
) -> None:
    # After a comment line passes the event budget it is re-checked only against the line limit: otherwise
    # every further piece would re-measure the whole line (quadratic in the number of pieces).
    checks = []
    check = SSEParser._check_partial

    def counted(self: SSEParser) -> None:
        checks.append(1)
        check(self)

    monkeypatch.setattr(SSEParser, "_check_partial", counted)
    chunks = [b"data: " + b"x" * 1900 + b"\n:", *[b"y"] * 1500, b"\n\n", b":" + b"z" * 2000]
    events: list[ServerSentEvent] = []
    parser = SSEParser(2000)
    with pytest.raises(ProtocolError):
        if driver == "feed":
            for chunk in chunks:
                events += parser.feed(chunk)
        else:
            events.extend(parser.iter_events(chunks))
    assert len(checks) == 2  # once when the comment passed the event budget, once when it broke the limit
    assert events == [ServerSentEvent(data="x" * 1900)]


def test_iter_events_yields_each_event_before_reading_the_next_chunk() -> None:
    stream = b"data: a\n\ndata: b\n\n: ping\ndata: c\r\n\r\ndata: d\n\n"
    for chunks in cuttings(stream):
        read: list[bytes] = []

        def source(chunks: list[bytes] = chunks, read: list[bytes] = read) -> Iterator[bytes]:
            for chunk in chunks:
                read.append(chunk)
                yield chunk

        yielded = 0
        for event in SSEParser().iter_events(source()):
            # The chunks read so far complete this event, and without the last one they do not.
            done, before = reference(b"".join(read)).events, reference(b"".join(read[:-1])).events
            assert len(before) <= yielded < len(done) and done[yielded] == event
            yielded += 1
        assert yielded == 4


def test_leaving_iter_events_early_leaves_the_parser_open() -> None:
    parser = SSEParser()
    events = parser.iter_events([b"id: 1\ndata: a\n\n", b"data: b\n\nid: 2\ndata: c", b"\n\n"])
    assert [next(events).data, next(events).data] == ["a", "b"]
    events.close()
    assert (parser.last_event_id, parser.truncated) == ("1", False)
    # The chunk that completed "b" was read whole: its tail is pending, and the parser carries on from there.
    assert parser.feed(b"\n\n") == [ServerSentEvent(data="c", id="2")]
    parser.close()
    assert (parser.last_event_id, parser.truncated) == ("2", False)


def test_iter_events_closes_the_parser_at_the_end_of_the_chunks() -> None:
    parser = SSEParser()
    assert [e.data for e in parser.iter_events([b"data: a\n\nda", b"ta: b"])] == ["a"]
    assert parser.truncated
    with pytest.raises(UseAfterFinishError):  # closed: the rule for every incremental object (test_end_rule)
        list(parser.iter_events([b"data: c\n\n"]))


def test_max_event_bytes_must_be_positive() -> None:
    with pytest.raises(ValueError):
        SSEParser(0)


def test_huge_retry_value_is_parsed_exactly() -> None:
    digits = b"1" + b"0" * 5000  # past CPython's int-from-string digit limit
    [event] = SSEParser(10_000).feed(b"retry: " + digits + b"\ndata: x\n\n")
    assert event.retry == 10**5000


# -- state: last event id, truncated, close -----------------------------------------------------------------


def test_last_event_id_seeds_a_reconnected_stream() -> None:
    parser = SSEParser(last_event_id="41")
    assert parser.last_event_id == "41"
    assert parser.feed(b"data: a\n\nid: 42\ndata: b\n\n") == [
        ServerSentEvent(data="a", id="41"),
        ServerSentEvent(data="b", id="42"),
    ]


def test_truncated_is_false_until_close_and_close_is_idempotent() -> None:
    parser = SSEParser()
    parser.feed(b"data: cut")
    assert not parser.truncated
    assert parser.close() == []
    assert parser.truncated
    assert parser.close() == []


def test_events_are_plain_values() -> None:
    event = ServerSentEvent(data="x")
    assert (event.event, event.data, event.id, event.retry) == ("message", "x", "", None)
    with pytest.raises(AttributeError):
        event.data = "y"  # type: ignore[misc]


# -- encode_event ------------------------------------------------------------------------------------------


def test_encode_event_writes_every_field() -> None:
    frame = encode_event("a\nb", event="update", id="7", retry=1500, comment="hi")
    assert frame == b": hi\nevent: update\nid: 7\nretry: 1500\ndata: a\ndata: b\n\n"
    assert parse([frame]).events == [ServerSentEvent("update", "a\nb", "7", 1500)]


def test_encode_event_splits_data_on_every_line_break() -> None:
    frame = encode_event("one\r\ntwo\rthree\n\nfive")
    assert frame.count(b"\n\n") == 1 and frame.endswith(b"\n\n")
    assert parse([frame]).events == [ServerSentEvent(data="one\ntwo\nthree\n\nfive")]


def test_encode_event_keeps_leading_spaces_and_empty_data() -> None:
    assert parse([encode_event("  x"), encode_event("")]).events == [
        ServerSentEvent(data="  x"),
        ServerSentEvent(data=""),
    ]


def test_comment_only_frame_is_a_keep_alive() -> None:
    frame = encode_event(comment="ping")
    assert frame == b": ping\n"
    assert parse([frame, frame, encode_event("x"), frame]) == Outcome(
        [ServerSentEvent(data="x")], "", None, False, None
    )


def test_id_only_frame_sets_the_last_event_id() -> None:
    assert parse([encode_event(id="9")]) == Outcome([], "9", None, False, None)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"event": "a\nb"},
        {"event": "a\rb"},
        {"event": "a\0b"},
        {"id": "1\n"},
        {"id": "1\r"},
        {"id": "1\0"},
        {"retry": -1},
        {"retry": 1.5},
        {"retry": True},
        {"retry": "100"},
        {},
    ],
)
def test_encode_event_refuses_what_it_would_have_to_rewrite(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        encode_event("x" if kwargs else None, **kwargs)  # type: ignore[arg-type]


no_surrogates = st.characters(blacklist_categories=["Cs"])
field_text = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\r\n\0"), max_size=12)
frames = st.lists(
    st.tuples(
        st.one_of(st.none(), st.text(no_surrogates, max_size=30)),
        st.one_of(st.none(), field_text),
        st.one_of(st.none(), field_text),
        st.one_of(st.none(), st.integers(0, 10**6)),
        st.one_of(st.none(), st.text(no_surrogates, max_size=10)),
    ),
    max_size=8,
)


def expected_events(
    frames: Sequence[tuple[str | None, str | None, str | None, int | None, str | None]],
) -> Outcome:
    events, last_id, retry = [], "", None
    for data, event, id_, frame_retry, _comment in frames:
        if id_ is not None:
            last_id = id_
        if frame_retry is not None:
            retry = frame_retry
        if data is not None:
            text = data.replace("\r\n", "\n").replace("\r", "\n")
            events.append(ServerSentEvent(event or "message", text, last_id, frame_retry))
    return Outcome(events, last_id, retry, False, None)


@settings(max_examples=200, deadline=None)
@given(frames, st.data())
def test_round_trip_encode_cut_anywhere_parse(
    frames_: list[tuple[str | None, ...]], data: st.DataObject
) -> None:
    usable = [f for f in frames_ if any(part is not None for part in f)]
    stream = b"".join(
        encode_event(d, event=e, id=i, retry=r, comment=c)  # type: ignore[arg-type]
        for d, e, i, r, c in usable
    )
    chunks = cut_at(stream, data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    assert parse(chunks) == expected_events(usable)  # type: ignore[arg-type]


def test_the_size_budget_is_restored_after_every_event_on_every_path() -> None:
    # Each frame is 16 bytes of lines against a limit of 20: fine alone, not fine if a path forgot to reset
    # the partial line's budget after dispatching. Cuts: mid-line then exactly at the frame end (no tail),
    # mid-line then into the next frame (a tail), and several frames per chunk.
    stream = b"data: 0123456789\n\n" * 50
    for chunks in (
        [piece for i in range(0, len(stream), 18) for piece in (stream[i : i + 11], stream[i + 11 : i + 18])],
        [stream[i : i + 13] for i in range(0, len(stream), 13)],
        [stream[i : i + 41] for i in range(0, len(stream), 41)],
    ):
        assert parse(chunks, 20) == Outcome([ServerSentEvent(data="0123456789")] * 50, "", None, False, None)

"""The streaming client against real uvicorn sockets: events, chat deltas, errors, cuts, reconnection."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import httpx
import pytest

from _apps import REPLY, USAGE, Visits, app
from _uvicorn import serve
from tokenrelay._errors import (
    InvalidRequestError,
    NotFoundError,
    ProtocolError,
    StreamTruncated,
    TokenRelayError,
)
from tokenrelay.client import (
    ChatDelta,
    ChatResult,
    StreamLog,
    aiter_events,
    astream_chat,
    iter_events,
    stream_chat,
)
from tokenrelay.wire._sse import ServerSentEvent

MESSAGES = [{"role": "user", "content": "Say hello"}]
VISITS = Visits()


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with serve(app(VISITS)) as base:
        yield base


@pytest.fixture
def visits() -> Visits:
    VISITS.last_event_ids.clear()
    VISITS.times.clear()
    return VISITS


def chat(url: str, model: str, **kwargs: object) -> tuple[str, ChatResult]:
    items = list(stream_chat(url + "/v1", MESSAGES, model=model, **kwargs))  # type: ignore[arg-type]
    *deltas, result = items
    assert all(isinstance(d, ChatDelta) for d in deltas) and isinstance(result, ChatResult)
    return "".join(d.text for d in deltas if isinstance(d, ChatDelta)), result


# -- plain event streams ------------------------------------------------------------------------------------


def test_iter_events_reads_a_stream_and_records_every_chunk(url: str) -> None:
    log = StreamLog()
    events = list(iter_events(url + "/events", log=log))
    assert events == [
        ServerSentEvent("greeting", "one", "1", None),
        ServerSentEvent("message", "two\nlines", "1", 2500),
    ]
    body = httpx.get(url + "/events").content
    assert sum(chunk.nbytes for chunk in log.chunks) == len(body)
    assert all(b.at >= a.at >= 0 for a, b in itertools.pairwise(log.chunks))
    assert (log.connections, log.last_event_id, log.truncated) == (1, "1", False)


@pytest.mark.parametrize(
    ("path", "error", "says"),
    [
        ("/json-error", InvalidRequestError, "model 'nope' is not loaded"),
        ("/html", ProtocolError, "Welcome to nginx!"),
        ("/plain-500", TokenRelayError, "HTTP 503 Service Unavailable: upstream exploded"),
    ],
)
def test_a_response_that_is_not_an_event_stream_raises_what_the_body_says(
    url: str, path: str, error: type[TokenRelayError], says: str
) -> None:
    with pytest.raises(error) as raised:
        list(iter_events(url + path))
    assert says in raised.value.message
    if path == "/html":
        assert "text/html" in raised.value.message
    if path == "/json-error":
        assert (raised.value.param, raised.value.status_code) == ("model", 400)
    if path == "/plain-500":
        assert raised.value.status_code == 503


def test_a_stream_cut_mid_event_raises_after_the_events_before_it(url: str) -> None:
    log = StreamLog()
    received = []
    with pytest.raises(StreamTruncated):
        for event in iter_events(url + "/truncated", log=log):
            received.append(event.data)
    assert received == ["a"] and log.truncated


def test_reconnect_sends_last_event_id_waits_retry_and_stops_on_204(url: str, visits: Visits) -> None:
    log = StreamLog()
    events = list(iter_events(url + "/reconnect", reconnect=True, log=log))
    assert [(e.data, e.id) for e in events] == [("one", "1"), ("two", "2")]  # the cut event is dropped
    assert visits.last_event_ids == [None, "1", "2"]
    gaps = [b - a for a, b in itertools.pairwise(visits.times)]
    assert min(gaps) >= 0.1  # the server's "retry: 100"
    assert log.connections == 2 and log.last_event_id == "2"


def test_reconnections_are_bounded_and_retry_is_capped(url: str) -> None:
    log = StreamLog()
    events = list(
        iter_events(url + "/events", reconnect=True, max_reconnects=2, max_retry_delay=0.01, log=log)
    )
    assert [e.data for e in events] == ["one", "two\nlines"] * 3
    assert log.connections == 3


def test_the_first_request_carries_the_given_last_event_id(url: str, visits: Visits) -> None:
    events = iter_events(url + "/reconnect", last_event_id="1", reconnect=True, default_retry=0.01)
    assert [e.data for e in events] == ["two"]
    assert visits.last_event_ids == ["1", "2"]


async def test_aiter_events_reconnects_too(url: str, visits: Visits) -> None:
    log = StreamLog()
    events = [event async for event in aiter_events(url + "/reconnect", reconnect=True, log=log)]
    assert [e.data for e in events] == ["one", "two"]
    assert visits.last_event_ids == [None, "1", "2"] and log.chunks


async def test_aiter_events_raises_on_a_cut_and_on_an_error_page(url: str) -> None:
    with pytest.raises(StreamTruncated):
        [event async for event in aiter_events(url + "/truncated")]
    with pytest.raises(ProtocolError, match="text/html"):
        [event async for event in aiter_events(url + "/html")]


# -- chat streams -------------------------------------------------------------------------------------------


def test_stream_chat_yields_deltas_then_the_result(url: str) -> None:
    text, result = chat(url, "ok")
    assert text == result.text == "".join(REPLY)
    assert (result.finished, result.finish_reason, result.usage) == (True, "stop", USAGE)
    timings = result.timings
    assert timings.time_to_first_byte is not None and timings.time_to_first_token is not None
    assert 0 <= timings.time_to_first_byte <= timings.time_to_first_token <= timings.total
    assert len(timings.inter_token_gaps) == len(REPLY) - 1
    raw = httpx.post(
        url + "/v1/chat/completions",
        json={"model": "ok", "stream": True, "stream_options": {"include_usage": True}},
    )
    assert sum(chunk.nbytes for chunk in result.chunks) == len(raw.content)


def test_timings_separate_first_byte_first_token_and_gaps(url: str) -> None:
    _, result = chat(url, "slow")
    timings = result.timings
    assert timings.time_to_first_byte is not None and timings.time_to_first_token is not None
    assert timings.time_to_first_token - timings.time_to_first_byte >= 0.025  # the role chunk came first
    # The server sleeps 30 ms before each delta. One late read on a busy machine shortens the gap after it, so
    # each gap only shows that two deltas did not arrive together, and their sum shows the pacing.
    gaps = timings.inter_token_gaps
    assert min(gaps) >= 0.005
    assert sum(gaps) >= 0.025 * len(gaps)
    assert timings.total >= sum(timings.inter_token_gaps)


def test_finish_reason_without_done_is_finished(url: str) -> None:
    text, result = chat(url, "no-done")
    assert text == "".join(REPLY) and result.finished and result.finish_reason == "stop"


def test_nothing_after_done_is_read(url: str) -> None:
    text, _ = chat(url, "junk-after-done")
    assert text == "".join(REPLY)


@pytest.mark.parametrize("scenario", ["cut", "cut-mid-frame", "broken"])
def test_a_chat_stream_ending_early_raises_truncated(url: str, scenario: str) -> None:
    received = []
    with pytest.raises(StreamTruncated) as raised:
        for item in stream_chat(url + "/v1", MESSAGES, model=scenario):
            assert isinstance(item, ChatDelta)
            received.append(item.text)
    assert received and "".join(received) in "".join(REPLY)
    if scenario == "broken":
        assert isinstance(raised.value.__cause__, httpx.TransportError)


def test_allow_truncated_flags_instead_of_raising(url: str) -> None:
    text, result = chat(url, "cut", allow_truncated=True)
    assert text == "".join(REPLY[:3]) and not result.finished and result.finish_reason is None


def test_an_in_stream_error_raises_with_its_message(url: str) -> None:
    with pytest.raises(TokenRelayError, match="the engine crashed") as raised:
        list(stream_chat(url + "/v1", MESSAGES, model="error"))
    assert raised.value.code == "engine_failed"


def test_an_error_response_raises_before_any_delta(url: str) -> None:
    with pytest.raises(NotFoundError, match="does not exist"):
        list(stream_chat(url + "/v1", MESSAGES, model="no-such-model"))


def test_a_given_client_is_used_and_left_open(url: str) -> None:
    with httpx.Client() as client:
        items = list(stream_chat(url + "/v1", MESSAGES, model="ok", client=client, include_usage=False))
        assert isinstance(items[-1], ChatResult) and items[-1].usage is None
        assert not client.is_closed


async def test_astream_chat(url: str) -> None:
    items = [item async for item in astream_chat(url + "/v1", MESSAGES, model="ok")]
    *deltas, result = items
    assert isinstance(result, ChatResult) and result.finished and result.usage == USAGE
    assert "".join(d.text for d in deltas if isinstance(d, ChatDelta)) == "".join(REPLY)
    with pytest.raises(StreamTruncated):
        [item async for item in astream_chat(url + "/v1", MESSAGES, model="cut")]

"""``stream_options.include_step_times`` (issue 13): each chunk says when the model step of each of its tokens
ran and when the chunk was sent, so the doctor's lanes start at the model, not at the server's write."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, cast

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionChunk

from _uvicorn import serve
from server_helpers import replay_app
from tokenrelay import load_tokenizer
from tokenrelay._protocols import Tokenizer
from tokenrelay._stream import StepTime, StepTimeline, TextDelta, Usage
from tokenrelay.engines.base import Prompt, SamplingParams, Step, TextStep, TimedIds, stream_events, timed_ids
from tokenrelay.engines.replay import ReplayEngine
from tokenrelay.wire._chat import ChatChunkWriter, TextChunkWriter, timed_frame
from tokenrelay.wire._sse import SSEParser

TEXT = "Tea ☕ for 🦙 llamas, नमस्ते."
MESSAGES = [{"role": "user", "content": "hi"}]
ASK = {"include_usage": True, "include_step_times": True}


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return load_tokenizer("smollm2")


class Clock:
    """A clock the test moves by hand: 1 s per read, so every time is distinct and known."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


# -- the core: tokens paired with their steps ------------------------------------------------------------


def test_timeline_pairs_tokens_with_their_steps_in_order() -> None:
    timeline = StepTimeline()
    timeline.add(1, 1.0, 2.0, measured=True)
    timeline.add(3, 2.0, 3.0, measured=True)
    assert len(timeline) == 4
    assert timeline.take(2) == (StepTime(1.0, 2.0, True), StepTime(2.0, 3.0, True))
    assert timeline.take(5) == (StepTime(2.0, 3.0, True),) * 2  # no more than were added
    assert timeline.take(1) == ()


def test_timed_ids_are_a_plain_tuple_of_ids_too() -> None:
    step = timed_ids([5, 6], 1.5, 2.5)
    assert isinstance(step, TimedIds)
    assert (step.started, step.ended) == (1.5, 2.5)
    assert step == (5, 6) and list(step) == [5, 6] and len(step) == 2


async def test_every_token_carries_its_own_step_even_when_a_character_spans_steps(tok: Tokenizer) -> None:
    # ☕ and 🦙 are two byte tokens each: the first is held until the second completes the character, and the
    # delta that shows it carries both tokens' steps, each its own.
    ticks = Clock()
    engine = ReplayEngine(tok, TEXT, rate=None, clock=ticks)
    params = SamplingParams(max_tokens=200)
    events = [e async for e in stream_events(engine, "p", params, clock=ticks, step_times=True)]
    ids: list[int] = []
    steps: list[StepTime] = []
    for event in events:
        assert event.steps is not None and len(event.steps) == len(event.token_ids)
        ids.extend(event.token_ids)
        steps.extend(event.steps)
    assert ids == engine.reply_ids("p", params)  # the end-of-sequence id of Finished included
    assert all(s.measured and s.start < s.end for s in steps)
    assert all(a.end < b.start for a, b in itertools.pairwise(steps))  # one step each, in order
    split = [e for e in events if isinstance(e, TextDelta) and len(e.token_ids) == 2]
    assert {e.text for e in split} == {"☕", "🦙"}
    for event in split:
        assert event.steps is not None and event.steps[0].end < event.steps[1].start


async def test_a_burst_step_times_all_its_tokens_alike(tok: Tokenizer) -> None:
    engine = ReplayEngine(tok, "one two three four five six", rate=None, burst=3, clock=Clock())
    events = [e async for e in stream_events(engine, "p", SamplingParams(), step_times=True)]
    steps = [s for e in events for s in e.steps or ()]
    assert steps[0] == steps[1] == steps[2] != steps[3]


async def test_a_stop_string_cut_leaves_only_the_reply_tokens_timed(tok: Tokenizer) -> None:
    engine = ReplayEngine(tok, TEXT, rate=None, clock=Clock())
    events = [e async for e in stream_events(engine, "p", SamplingParams(), stops=["for"], step_times=True)]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Tea ☕ "
    for event in events:
        assert event.steps is not None and len(event.steps) == len(event.token_ids)


async def test_an_engine_that_does_not_time_its_steps_falls_back_to_their_arrival(tok: Tokenizer) -> None:
    ticks = Clock()
    engine = ReplayEngine(tok, TEXT, rate=None, timed=False)
    events = [e async for e in stream_events(engine, "p", SamplingParams(), clock=ticks, step_times=True)]
    steps = [s for e in events for s in e.steps or ()]
    assert steps and all(not s.measured and s.start == s.end for s in steps)
    assert all(a.end < b.end for a, b in itertools.pairwise(steps))  # each its own arrival


class TextEngine:
    """An engine that hands over text, as the llama.cpp-server upstream does (its ids are incomplete)."""

    def __init__(self, tok: Tokenizer, pieces: list[str]) -> None:
        self.tokenizer = tok
        self.model = "text"
        self.stop_token_ids: frozenset[int] = frozenset()
        self.pieces = pieces

    def prompt_ids(self, prompt: Prompt) -> list[int]:
        return [1]

    async def generate(
        self, prompt: Prompt, params: SamplingParams, *, prompt_ids: Sequence[int]
    ) -> AsyncIterator[Step]:
        for piece in self.pieces:
            yield TextStep(piece, tokens=len(piece))

    async def aclose(self) -> None:
        return None


async def test_text_steps_are_timed_by_arrival_one_time_per_token(tok: Tokenizer) -> None:
    engine = TextEngine(tok, ["a", "b", "cd"])
    events = [e async for e in stream_events(engine, "p", SamplingParams(), stops=["bx"], step_times=True)]
    deltas = [e for e in events if isinstance(e, TextDelta)]
    # "b" was held back (it might start the stop string): the delta that shows it carries its step too.
    assert [(d.text, len(d.steps or ())) for d in deltas] == [("a", 1), ("bcd", 3)]
    assert all(not s.measured for d in deltas for s in d.steps or ())


async def test_without_asking_events_carry_no_steps(tok: Tokenizer) -> None:
    engine = ReplayEngine(tok, TEXT, rate=None)
    events = [e async for e in stream_events(engine, "p", SamplingParams())]
    assert all(e.steps is None for e in events)


# -- the wire ----------------------------------------------------------------------------------------------


def chunks_of(frames: list[bytes]) -> list[dict[str, object]]:
    parser = SSEParser()
    events = [e for frame in frames for e in parser.feed(frame)]
    return [json.loads(e.data) for e in events if e.data != "[DONE]"]


def test_timed_frames_keep_every_shape_the_sdk_reads() -> None:
    steps = (StepTime(10.001, 10.0025, True), StepTime(10.003, 10.004, True))
    chat = ChatChunkWriter(id="c", model="m", created=1, include_usage=True)
    chat.prompt_token_ids([1])
    frames = [
        timed_frame(chat.role(), origin=10.0, sent=10.0005, steps=None),
        timed_frame(chat.delta("a\n☕"), origin=10.0, sent=10.005, steps=steps),
        timed_frame(chat.delta_with_ids("b", [3]), origin=10.0, sent=10.006, steps=steps[:1]),
        timed_frame(chat.finish("stop"), origin=10.0, sent=10.007, steps=(StepTime(10.006, 10.006, False),)),
        timed_frame(chat.usage(chat_usage()), origin=10.0, sent=10.008, steps=None),
    ]
    assert all(f.count(b"\n") == 2 and f.endswith(b"}\n\n") for f in frames)  # one data line per frame
    first, delta, with_ids, finish, usage = chunks_of(frames)
    assert first["tokenrelay"] == {"sent_ms": 0.5, "steps_ms": []}
    assert first["prompt_token_ids"] == [1]
    assert delta["tokenrelay"] == {"sent_ms": 5.0, "steps_ms": [[1.0, 2.5], [3.0, 4.0]], "source": "engine"}
    assert with_ids["choices"][0]["token_ids"] == [3]  # type: ignore[index]
    assert finish["tokenrelay"] == {"sent_ms": 7.0, "steps_ms": [[6.0, 6.0]], "source": "arrival"}
    assert usage["choices"] == [] and usage["tokenrelay"] == {"sent_ms": 8.0, "steps_ms": []}
    for chunk in (first, delta, with_ids, finish, usage):
        parsed = ChatCompletionChunk.model_validate(chunk)  # the SDK reads it; the field is kept as an extra
        assert parsed.model_extra is not None and parsed.model_extra["tokenrelay"] == chunk["tokenrelay"]
    text = TextChunkWriter(id="t", model="m", created=1)
    (legacy,) = chunks_of([timed_frame(text.delta("x"), origin=0.0, sent=0.001, steps=steps)])
    assert legacy["choices"][0]["text"] == "x" and legacy["tokenrelay"]["sent_ms"] == 1.0  # type: ignore[index]


def chat_usage() -> Usage:
    return Usage(3, 4)


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, ReplayEngine]]:
    app, engine = replay_app(TEXT, rate=200.0)
    with serve(app) as url:
        yield url, engine


def stream(url: str, body: dict[str, object], path: str = "/v1/chat/completions") -> list[dict[str, object]]:
    with httpx.stream("POST", url + path, json=body, timeout=20) as response:
        assert response.status_code == 200
        return chunks_of([response.read()])


def test_the_server_times_every_token_of_the_stream(server: tuple[str, ReplayEngine]) -> None:
    url, engine = server
    body = {"messages": MESSAGES, "stream": True, "stream_options": ASK, "return_token_ids": True}
    chunks = stream(url, body)
    timings = [c["tokenrelay"] for c in chunks]
    assert all(isinstance(t, dict) for t in timings)
    ids: list[int] = []
    steps: list[list[float]] = []
    for chunk in chunks[1:-1]:  # between the role chunk and the usage chunk: the chunks with tokens
        timing = chunk["tokenrelay"]
        token_ids = chunk["choices"][0]["token_ids"]  # type: ignore[index]
        assert isinstance(timing, dict) and len(timing["steps_ms"]) == len(token_ids)
        assert timing["source"] == "engine"
        for start, end in timing["steps_ms"]:
            assert 0 <= start < end <= timing["sent_ms"]  # the step ended before its chunk left
        ids.extend(token_ids)
        steps.extend(timing["steps_ms"])
    assert ids == engine.reply_ids(MESSAGES)  # each token's step is there, the end-of-sequence one too
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(steps))  # monotonic, one step each
    sent = [t["sent_ms"] for t in timings]  # type: ignore[index]
    assert sent == sorted(sent)
    assert timings[0]["steps_ms"] == [] and timings[-1]["steps_ms"] == []  # type: ignore[index]
    # At 200 tokens/s each step of the replay lasts ~5 ms: the step lane is the engine's, not the write's.
    assert max(end - start for start, end in steps) >= 3.0


def test_legacy_completions_are_timed_too(server: tuple[str, ReplayEngine]) -> None:
    url, _ = server
    chunks = stream(
        url, {"prompt": "p", "stream": True, "stream_options": ASK, "max_tokens": 3}, "/v1/completions"
    )
    with_tokens = [c for c in chunks if c["choices"]]
    assert sum(len(cast(Any, c["tokenrelay"])["steps_ms"]) for c in with_tokens) == 3


def test_without_asking_no_chunk_has_the_field(server: tuple[str, ReplayEngine]) -> None:
    url, _ = server
    for options in (None, {"include_usage": True}, {"include_step_times": False}):
        body: dict[str, object] = {"messages": MESSAGES, "stream": True, "max_tokens": 4}
        if options is not None:
            body["stream_options"] = options
        chunks = stream(url, body)
        assert chunks and all("tokenrelay" not in c for c in chunks)
    # A whole (non-streamed) reply has no chunks: the option changes nothing there.
    whole = httpx.post(
        url + "/v1/chat/completions",
        json={"messages": MESSAGES, "max_tokens": 4, "stream_options": ASK},
        timeout=20,
    )
    assert whole.status_code == 200 and "tokenrelay" not in whole.json()


@pytest.mark.parametrize("value", ["yes", 1, None, [True], {"on": True}])
def test_a_bad_value_is_an_openai_shaped_400(server: tuple[str, ReplayEngine], value: object) -> None:
    url, _ = server
    body = {"messages": MESSAGES, "stream": True, "stream_options": {"include_step_times": value}}
    response = httpx.post(url + "/v1/chat/completions", json=body, timeout=20)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "stream_options.include_step_times"


def test_the_official_sdk_reads_a_timed_stream(server: tuple[str, ReplayEngine]) -> None:
    url, _ = server
    client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
    chunks = list(
        client.chat.completions.create(  # type: ignore[call-overload]
            model="replay",
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True, "include_step_times": True},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == TEXT
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    extras = [c.model_extra or {} for c in chunks]
    assert all("tokenrelay" in e for e in extras)
    assert sum(len(e["tokenrelay"]["steps_ms"]) for e in extras) == chunks[-1].usage.completion_tokens


def test_the_schema_documents_the_option(server: tuple[str, ReplayEngine]) -> None:
    url, _ = server
    schema = httpx.get(url + "/openapi.json", timeout=20).json()
    option = schema["components"]["schemas"]["StreamOptions"]["properties"]["include_step_times"]
    assert option["type"] == "boolean" and "sent_ms" in option["description"]

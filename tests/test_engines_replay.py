"""ReplayEngine: a real tokenizer's ids, released on a recorded (injectable) schedule."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from pathlib import Path

import pytest

from _steps import closable, generate, ids
from tokenrelay._errors import ConfigError, EngineError, InvalidRequestError
from tokenrelay._protocols import Tokenizer
from tokenrelay._stream import Finished, TextDelta
from tokenrelay.engines.base import Engine, SamplingParams, stream_events
from tokenrelay.engines.replay import ReplayEngine
from tokenrelay.tokenizers import load_tokenizer

CORPUS = (Path(__file__).resolve().parent / "data" / "multilingual.txt").read_bytes().decode("utf-8")
PARAMS = SamplingParams(max_tokens=None)


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return load_tokenizer("smollm2")


class Recorder:
    """A sleep that records the delays and returns at once (still yielding to the event loop)."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        await asyncio.sleep(0)


async def collect(
    engine: ReplayEngine, params: SamplingParams = PARAMS, prompt: str = "hi"
) -> list[Sequence[int]]:
    return [ids(step) async for step in generate(engine, prompt, params)]


async def test_releases_the_tokenizers_ids_then_eos(tok: Tokenizer) -> None:
    engine = ReplayEngine(tok, CORPUS, rate=None, sleep=Recorder())
    assert isinstance(engine, Engine)
    steps = await collect(engine)
    assert all(len(s) == 1 for s in steps)
    assert [i for s in steps for i in s] == [*tok.encode(CORPUS), min(tok.eos_token_ids)]
    assert engine.steps_computed == len(steps)


async def test_without_text_it_replays_the_prompt(tok: Tokenizer) -> None:
    engine = ReplayEngine(tok, eos=False, rate=None)
    steps = await collect(engine, prompt="echo ☕ me")
    assert [i for s in steps for i in s] == tok.encode("echo ☕ me")
    assert engine.prompt_ids("echo ☕ me") == tok.encode("echo ☕ me")
    # What it replays is the ids it was handed (the server's intake tokenized them), not a new encode.
    given = tok.encode("other words")
    replayed = [ids(s) async for s in engine.generate("echo ☕ me", PARAMS, prompt_ids=given)]
    assert [i for s in replayed for i in s] == given


async def test_bursts_and_max_tokens(tok: Tokenizer) -> None:
    ids = tok.encode(CORPUS)
    engine = ReplayEngine(tok, CORPUS, rate=None, burst=4)
    steps = await collect(engine, SamplingParams(max_tokens=10))
    assert [len(s) for s in steps] == [4, 4, 2]
    assert [i for s in steps for i in s] == ids[:10]


async def test_schedule_rate_jitter_and_first_token_delay(tok: Tokenizer) -> None:
    sleep = Recorder()
    engine = ReplayEngine(tok, "a b c d e f g h", rate=20.0, burst=2, first_token_delay=0.5, sleep=sleep)
    steps = await collect(engine)
    assert sleep.delays == pytest.approx([0.5 + 0.1] + [0.1] * (len(steps) - 1))

    def jittered(seed: int) -> list[float]:
        return ReplayEngine(tok, "x", rate=10.0, jitter=0.5, seed=seed).schedule(200)

    delays = jittered(3)
    assert delays == jittered(3)  # deterministic per seed
    assert delays != jittered(4)
    assert all(0.05 <= d <= 0.15 for d in delays)
    assert max(delays) - min(delays) > 0.05  # the jitter is really there


async def test_real_time_rate(tok: Tokenizer) -> None:
    engine = ReplayEngine(tok, "one two three four five six", rate=200.0, eos=False)
    loop = asyncio.get_running_loop()
    start = loop.time()
    steps = await collect(engine)
    assert loop.time() - start >= 0.9 * len(steps) / 200.0


async def test_failure_mid_stream_is_an_engine_error(tok: Tokenizer) -> None:
    engine = ReplayEngine(tok, CORPUS, rate=None, fail_after=5)
    seen: list[int] = []
    with pytest.raises(EngineError, match="after 5 tokens"):
        async for step in generate(engine, "hi", PARAMS):
            seen.extend(ids(step))
    assert seen == tok.encode(CORPUS)[:5]


async def test_cancel_stops_the_replay_at_once(tok: Tokenizer) -> None:
    engine = ReplayEngine(tok, CORPUS, rate=500.0)
    got = 0
    three = asyncio.Event()

    async def consume() -> None:
        nonlocal got
        async for _ in generate(engine, "hi", PARAMS):
            got += 1
            if got == 3:
                three.set()

    task = asyncio.create_task(consume())
    await three.wait()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    after_cancel = engine.steps_computed
    await asyncio.sleep(0.05)  # 25 more steps' worth of time at 500 tokens/s
    assert after_cancel <= 4 and engine.steps_computed == after_cancel


async def test_closing_the_iterator_stops_it(tok: Tokenizer) -> None:
    engine = ReplayEngine(tok, CORPUS, rate=None)
    async with contextlib.aclosing(closable(generate(engine, "hi", PARAMS))) as steps:
        async for _ in steps:
            if engine.steps_computed == 2:
                break
    await asyncio.sleep(0.01)
    assert engine.steps_computed == 2


async def test_stream_events_through_the_text_stream(tok: Tokenizer) -> None:
    engine = ReplayEngine(tok, CORPUS, rate=None, burst=3)
    clock = iter(range(10_000))
    events = [e async for e in stream_events(engine, "hi", PARAMS, clock=lambda: next(clock))]
    *deltas, final = events
    assert all(isinstance(d, TextDelta) and d.text for d in deltas)
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == tok.decode(tok.encode(CORPUS))
    assert isinstance(final, Finished) and final.reason == "stop"
    assert final.usage.prompt_tokens == len(tok.encode("hi"))
    assert final.timings is not None and final.timings.ttft is not None and final.timings.ttft > 0


async def test_stream_events_stop_closes_the_engine(tok: Tokenizer) -> None:
    engine = ReplayEngine(tok, CORPUS, rate=None)
    events = [e async for e in stream_events(engine, "hi", PARAMS, stops=["世界"])]
    final = events[-1]
    assert isinstance(final, Finished) and final.matched == "世界"
    assert engine.steps_computed == final.usage.completion_tokens  # no step computed past the stop


async def test_stream_events_wraps_engine_errors(tok: Tokenizer) -> None:
    engine = ReplayEngine(tok, CORPUS, rate=None, fail_after=2)
    with pytest.raises(EngineError):
        _ = [e async for e in stream_events(engine, "hi", PARAMS)]


@pytest.mark.parametrize(
    "options",
    [{"rate": 0.0}, {"rate": -1.0}, {"jitter": 1.0}, {"burst": 0}, {"first_token_delay": -0.1}],
)
def test_bad_options_are_config_errors(tok: Tokenizer, options: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        ReplayEngine(tok, "x", **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("options", [{"max_tokens": 0}, {"temperature": 2.5}, {"top_p": 0.0}])
def test_bad_sampling_params_are_invalid_requests(options: dict[str, float]) -> None:
    with pytest.raises(InvalidRequestError) as info:
        SamplingParams(**options)  # type: ignore[arg-type]
    assert info.value.param == next(iter(options))

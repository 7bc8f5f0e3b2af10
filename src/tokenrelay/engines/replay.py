"""The replay engine: a real tokenizer's ids for a fixed text, released on a schedule.

Deterministic by construction: the ids are ``tokenizer.encode(text)``, the schedule is ``burst`` ids every
``burst / rate`` seconds, each interval scaled by a factor drawn uniformly from ``[1 - jitter, 1 + jitter]``
with ``random.Random(seed)``, after an extra ``first_token_delay`` (a stand-in for prefill). Tests,
benchmarks and the doctor use it to get a reply with known text and known timing without a model.

The sleep function is injectable so a test can record the schedule instead of waiting for it; with the
default ``asyncio.sleep`` a cancelled consumer stops the replay at the sleep it is in.

Step times: each step is yielded as ``TimedIds``, the step running from when its sleep began to when it ended
(on ``clock``, ``time.perf_counter`` by default, the server's clock), as a model's step runs from the start to
the end of its decode; ``timed=False`` yields plain ids, as an engine that does not know its step times.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from tokenrelay._errors import ConfigError, EngineError
from tokenrelay._protocols import Tokenizer
from tokenrelay.engines.base import Prompt, SamplingParams, Step, render_plain_chat, timed_ids

__all__ = ["ReplayEngine"]

Sleep = Callable[[float], Awaitable[None]]


class ReplayEngine:
    """Replays ``text`` (or, when ``text`` is ``None``, the prompt itself) as token-id steps.

    ``rate`` is in tokens per second; ``None`` releases ids with no delay (but still yields to the event
    loop between steps). ``eos`` appends the tokenizer's end-of-sequence id when it has one, so the reply
    ends the way a model's does. ``fail_after`` raises ``EngineError`` after that many ids, to exercise the
    error path of whatever consumes the stream.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        text: str | None = None,
        *,
        rate: float | None = 50.0,
        jitter: float = 0.0,
        burst: int = 1,
        first_token_delay: float = 0.0,
        seed: int = 0,
        eos: bool = True,
        fail_after: int | None = None,
        model: str = "replay",
        sleep: Sleep = asyncio.sleep,
        timed: bool = True,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if rate is not None and rate <= 0:
            raise ConfigError(f"replay rate must be positive tokens/s, got {rate}")
        if not 0.0 <= jitter < 1.0:
            raise ConfigError(f"replay jitter must be in [0, 1), got {jitter}")
        if burst < 1:
            raise ConfigError(f"replay burst must be at least 1, got {burst}")
        if first_token_delay < 0:
            raise ConfigError(f"first_token_delay must not be negative, got {first_token_delay}")
        self._tokenizer = tokenizer
        self._text = text
        self._ids = tokenizer.encode(text) if text is not None else None
        self._rate = rate
        self._jitter = jitter
        self._burst = burst
        self._first_delay = first_token_delay
        self._seed = seed
        self._eos_id = min(tokenizer.eos_token_ids) if eos and tokenizer.eos_token_ids else None
        self._fail_after = fail_after
        self._model = model
        self._sleep = sleep
        self._timed = timed
        self._clock = clock
        self._schedules: dict[int, tuple[float, ...]] = {}
        self.steps_computed = 0
        """How many steps were produced over the engine's life (tests count it around a cancel)."""

    @property
    def model(self) -> str:
        return self._model

    @property
    def tokenizer(self) -> Tokenizer:
        return self._tokenizer

    @property
    def stop_token_ids(self) -> frozenset[int]:
        return self._tokenizer.eos_token_ids

    def prompt_ids(self, prompt: Prompt) -> list[int]:
        return self._tokenizer.encode(render_plain_chat(prompt))

    def reply_ids(self, prompt: Prompt, params: SamplingParams | None = None) -> list[int]:
        """Every id ``generate`` would yield for ``prompt``, in order (EOS included, max_tokens applied)."""
        return self._reply(self._ids if self._ids is not None else self.prompt_ids(prompt), params)

    def _reply(self, replayed: Sequence[int], params: SamplingParams | None) -> list[int]:
        ids = list(replayed)
        if self._eos_id is not None:
            ids.append(self._eos_id)
        if params is not None and params.max_tokens is not None:
            ids = ids[: params.max_tokens]
        return ids

    def schedule(self, steps: int) -> list[float]:
        """The delays slept before each of the first ``steps`` steps (the same on every call)."""
        # Memoised: it is the same for every request of a given length, and seeding a Mersenne Twister per
        # request was the largest single cost of starting a replay stream (benchmarks/server_load.py).
        return list(self._schedule(steps))

    def _schedule(self, steps: int) -> tuple[float, ...]:
        cached = self._schedules.get(steps)
        if cached is None:
            cached = self._schedules[steps] = tuple(self._compute_schedule(steps))
        return cached

    def _compute_schedule(self, steps: int) -> list[float]:
        rng = random.Random(self._seed)
        delays = []
        for i in range(steps):
            delay = self._burst / self._rate if self._rate is not None else 0.0
            if self._jitter:
                delay *= rng.uniform(1.0 - self._jitter, 1.0 + self._jitter)
            if i == 0:
                delay += self._first_delay
            delays.append(delay)
        return delays

    async def generate(
        self, prompt: Prompt, params: SamplingParams, *, prompt_ids: Sequence[int]
    ) -> AsyncIterator[Step]:
        ids = self._reply(prompt_ids if self._ids is None else self._ids, params)
        burst = self._burst
        released = 0
        # Each step's ids are sliced when it is due, not all up front: a stream holds no list per step while it
        # runs (the cyclic collector walks every list a live stream holds; tests/test_server_gc.py).
        for start, delay in zip(
            range(0, len(ids), burst), self._schedule(-(-len(ids) // burst)), strict=True
        ):
            step = ids[start : start + burst]
            # Sleep even for a zero delay: a consumer that cancels between steps must get the chance to.
            started = self._clock() if self._timed else 0.0
            await self._sleep(delay)
            if self._fail_after is not None and released + len(step) > self._fail_after:
                raise EngineError(f"replay engine failed after {self._fail_after} tokens (fail_after)")
            released += len(step)
            self.steps_computed += 1
            yield timed_ids(step, started, self._clock()) if self._timed else step

    async def aclose(self) -> None:
        return None

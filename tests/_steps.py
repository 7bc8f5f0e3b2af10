"""Engine steps as the tests read them: the engines under test yield token ids only."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import cast

from tokenrelay.engines.base import (
    Engine,
    EngineFinished,
    Prompt,
    PromptTokens,
    SamplingParams,
    Step,
    Stranded,
    TextStep,
)

__all__ = ["closable", "generate", "ids"]


def generate(engine: Engine, prompt: Prompt, params: SamplingParams) -> AsyncIterator[Step]:
    """``engine.generate`` for ``prompt`` with its ids tokenized once here, as the server's intake does."""
    return engine.generate(prompt, params, prompt_ids=engine.prompt_ids(prompt))


def ids(step: Step) -> Sequence[int]:
    """The token ids of ``step``; the test fails on a text or prompt-count step (only upstream relays yield
    those, or an engine's own finish)."""
    assert not isinstance(step, (TextStep, PromptTokens, EngineFinished, Stranded)), step
    return step


def closable(steps: AsyncIterator[Step]) -> AsyncGenerator[Step, None]:
    """``engine.generate(...)`` as the async generator it is (the protocol promises an iterator only), for
    ``contextlib.aclosing``."""
    assert isinstance(steps, AsyncGenerator)
    return cast(AsyncGenerator[Step, None], steps)

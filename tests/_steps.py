"""Engine steps as the tests read them: the engines under test yield token ids only."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import cast

from tokenrelay.engines.base import EngineFinished, PromptTokens, Step, Stranded, TextStep

__all__ = ["closable", "ids"]


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

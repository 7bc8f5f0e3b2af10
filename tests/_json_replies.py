"""JSON replies for the structured-output client tests: a replay server that replays what it is asked to.

``echo_app()`` serves the replay engine with SmolLM2's real tokenizer, replaying the last message's content
as the reply (so one server per test module replays any JSON text a test sends, through the real intake,
detokenizer, ``max_tokens`` cut and SSE framing) and recording the constraint each request carried. The
replay engine does not constrain: the text is replayed as it is, JSON or not.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from fastapi import FastAPI

from tokenrelay import load_tokenizer
from tokenrelay.engines import ReplayEngine
from tokenrelay.engines.base import JSONConstraint, Prompt, SamplingParams, Step
from tokenrelay.server import ServerConfig, create_app

__all__ = ["CITY", "CITY_TEXT", "EchoReplayEngine", "echo_app"]

#: A reply with emoji (a ZWJ sequence, a flag), CJK and Devanagari inside strings, an escape, and numbers.
CITY: dict[str, Any] = {
    "name": "東京 Tōkyō 🗼",
    "country": "日本 🇯🇵",
    "population": 37400068,
    "area_km2": 2194.07,
    "tags": ["寿司", "👩\u200d💻 tech", "नमस्ते", 'say "hi"'],
    "capital": True,
    "mayor": None,
}
CITY_TEXT = (
    '{"name": "東京 Tōkyō 🗼", "country": "日本 🇯🇵", "population": 37400068, "area_km2": 2194.07, '
    '"tags": ["寿司", "👩\\u200d💻 tech", "नमस्ते", "say \\"hi\\""], "capital": true, "mayor": null}'
)


class EchoReplayEngine(ReplayEngine):
    """Replays the last message's content (a prompt string as it is); remembers each request's constraint."""

    def __init__(self, **options: Any) -> None:
        super().__init__(load_tokenizer("smollm2"), None, **options)
        self.constraints: list[JSONConstraint | None] = []

    def prompt_ids(self, prompt: Prompt) -> list[int]:
        text = prompt if isinstance(prompt, str) else str(prompt[-1].get("content", ""))
        return self.tokenizer.encode(text)

    async def generate(
        self, prompt: Prompt, params: SamplingParams, *, prompt_ids: Sequence[int]
    ) -> AsyncIterator[Step]:
        self.constraints.append(params.constraint)
        async for step in super().generate(prompt, params, prompt_ids=prompt_ids):
            yield step


def echo_app(*, rate: float | None = None, **options: Any) -> tuple[FastAPI, EchoReplayEngine]:
    """An app over :class:`EchoReplayEngine` (``rate`` tokens/s; ``None``: as fast as the loop runs)."""
    engine = EchoReplayEngine(rate=rate, **options)
    return create_app(engine, ServerConfig()), engine

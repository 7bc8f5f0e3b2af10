"""Continuous batching, sans I/O: which tokens of which sequences go into the next decode step.

The embedded engine serves up to N chats with one ``llama_decode`` per step (as ``llama-server --parallel N``
and vLLM do). Each running request owns one KV-cache sequence (a :class:`Slot`). Every step carries:

- one token for each slot that is *generating*: the token it sampled last step, at the next position, with
  logits requested so the slot samples its next token from this step;
- prompt tokens for slots still *prefilling*, oldest request first, at most ``prefill_chunk`` tokens in all per
  step. A long prompt is therefore read over several steps, and the generating slots never wait for more than
  one chunk's compute: a new request joins at the next step without stalling the others for its whole prompt.
  The step that feeds a slot's last prompt token asks for its logits, so its first reply token is sampled
  right there.

This module decides and records; it never calls llama.cpp, sleeps or locks. ``LlamaCppEngine`` runs
:func:`plan_step` → decode → :meth:`Slot.accept` on its worker thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = ["DEFAULT_PARALLEL", "DEFAULT_PREFILL_CHUNK", "BatchEntry", "Slot", "plan_step"]

DEFAULT_PARALLEL = 8
"""Requests decoded together: 8 sequences × 2,048 tokens is a ~380 MB KV cache for SmolLM2."""
DEFAULT_PREFILL_CHUNK = 128
"""Prompt tokens per step: a new prompt stalls the running streams for at most one such chunk's compute."""


class BatchEntry(NamedTuple):
    """One token of one step: which sequence, at which position, and whether its logits are wanted."""

    token: int
    pos: int
    seq: int
    logits: bool


@dataclass
class Slot:
    """One request's sequence in the shared KV cache.

    ``prompt`` is read from position 0; ``limit`` is the most tokens the slot may sample (``max_tokens``,
    capped by the room its sequence has left), ``stop_ids`` end it early.
    """

    seq: int
    prompt: Sequence[int]
    limit: int
    stop_ids: frozenset[int] = frozenset()
    fed: int = 0
    """Prompt tokens already in the KV cache."""
    sampled: list[int] = field(default_factory=list)
    """Tokens sampled so far; the last one is decoded in the next step unless the slot is done."""

    def __post_init__(self) -> None:
        if not self.prompt:
            raise ValueError("a slot needs at least one prompt token")
        if self.limit < 1:
            raise ValueError("a slot must be allowed at least one token")

    @property
    def prefilling(self) -> bool:
        return self.fed < len(self.prompt)

    @property
    def done(self) -> bool:
        """Sampled its limit or a stop id: its sequence can be freed."""
        return len(self.sampled) >= self.limit or bool(self.sampled and self.sampled[-1] in self.stop_ids)

    def accept(self, token: int) -> None:
        """Record the token sampled for this slot from the step's logits."""
        if self.prefilling or self.done:
            raise RuntimeError("accept() for a slot that did not ask for logits this step")
        self.sampled.append(token)


def plan_step(
    slots: Iterable[Slot], *, prefill_chunk: int, n_batch: int
) -> tuple[list[BatchEntry], list[Slot]]:
    """The next step's entries, and the slots (in entry order) that sample from it.

    ``slots`` is in arrival order; a done slot contributes nothing. Generating slots come first (one token
    each), then prompt tokens up to ``prefill_chunk`` in all and ``n_batch`` in the whole step. The prompt
    chunks advance ``Slot.fed``: plan a step only when it will be decoded.
    """
    if prefill_chunk < 1 or n_batch < 1:
        raise ValueError("prefill_chunk and n_batch must be at least 1")
    entries: list[BatchEntry] = []
    samplers: list[Slot] = []
    waiting: list[Slot] = []
    for slot in slots:
        if slot.done:
            continue
        if slot.prefilling:
            waiting.append(slot)
        elif len(entries) < n_batch:
            pos = len(slot.prompt) + len(slot.sampled) - 1
            entries.append(BatchEntry(slot.sampled[-1], pos, slot.seq, True))
            samplers.append(slot)
    budget = min(prefill_chunk, n_batch - len(entries))
    for slot in waiting:
        if budget <= 0:
            break
        take = min(budget, len(slot.prompt) - slot.fed)
        end = slot.fed + take
        last = len(slot.prompt) - 1
        entries.extend(BatchEntry(slot.prompt[p], p, slot.seq, p == last) for p in range(slot.fed, end))
        slot.fed = end
        budget -= take
        if not slot.prefilling:
            samplers.append(slot)
    return entries, samplers

"""Continuous batching, sans I/O: which sequence a request takes, and which tokens go into each decode step.

The embedded engine serves up to N chats with one ``llama_decode`` per step (as ``llama-server --parallel N``
and vLLM do). Each running request owns one KV-cache sequence (a :class:`Slot`). Every step carries:

- one token for each slot that is *generating*: the token it sampled last step, at the next position, with
  logits requested so the slot samples its next token from this step;
- prompt tokens for slots still *prefilling*, oldest request first. When no slot is generating, nobody waits
  for the step: it reads up to ``n_batch`` prompt tokens (a whole prompt, or several), as llama-server does.
  While slots are generating, at most ``prefill_chunk`` prompt tokens go into a step, so a running stream's gap
  is bounded by one chunk's compute (issue 23); a long prompt is then read over several steps. The step that
  feeds a slot's last prompt token asks for its logits, so its first reply token is sampled right there.
  That last token is always read in a step of its own (the rest of the prompt before it): its logits then
  come from the same computation whether the rest was read just now or found in the prefix cache, so a
  request repeated at temperature 0 gets the same reply (issue 33: read in a 190-token step and alone, the
  last token's logits differed by up to 0.66, enough to turn a constrained "Zürich" into "CiYi").

The entries of a step are ordered by sequence id. With one KV stream per sequence, llama.cpp cuts a batch into
ubatches of sequences whose ids follow each other in batch order (``llama_batch_allocr::split_equal``), one
graph compute each: in arrival order, eight streams could cost eight graph computes a step instead of one.

Prefix cache (issue 23, as llama-server's ``cache_prompt``): a finished request's cells stay in its sequence,
and :class:`SequencePool` remembers which tokens they hold. A new request takes the free sequence whose cells
hold more of its prompt (the longest common prefix) than of anything else, which the request would overwrite
(another chat's history, a reply that may be continued); the best such, and failing one the least recently
used (an empty one first), as llama-server picks a slot by prompt similarity, else the least recently used.
So the next turn of a conversation finds its whole history, and a new chat that shares only a system prompt
with a long conversation leaves that conversation's cells alone unless they are the oldest. The engine
removes the cells from the divergence point on and the slot reads only the rest of the prompt; the last
prompt token is always read, even when the whole prompt is cached, because its logits give the first reply
token. Without the cache, a request takes the lowest free id and its sequence is cleared.

Cells are also copied between sequences (:meth:`SequencePool.copy_source`): when another sequence, running or
free, holds at least ``MIN_COPY`` more of the new prompt than the one taken, the engine copies that sequence's
cells into it and reads only the rest. Chats that arrive together with the same system prompt then read it
once, not once each (llama-server reads it once per slot); the copy is a memory copy of one sequence's KV
buffer, a few milliseconds, where reading the prompt again costs milliseconds a token.

This module decides and records; it never calls llama.cpp, sleeps or locks. ``LlamaCppEngine`` runs
:meth:`SequencePool.take` → :func:`plan_step` → decode → :meth:`Slot.accept` → :meth:`SequencePool.release` on
its worker thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = [
    "DEFAULT_PARALLEL",
    "DEFAULT_PREFILL_CHUNK",
    "MIN_COPY",
    "BatchEntry",
    "SequencePool",
    "Slot",
    "common_prefix",
    "plan_step",
]

DEFAULT_PARALLEL = 8
"""Requests decoded together: 8 sequences × 2,048 tokens is a ~380 MB KV cache for SmolLM2."""
DEFAULT_PREFILL_CHUNK = 128
"""Prompt tokens per step while streams are generating: a new prompt stalls them for at most one such chunk's
compute."""
MIN_COPY = 16
"""Prompt tokens another sequence must hold beyond what the taken one keeps before its cells are copied: the copy
moves a whole sequence's KV buffer (for SmolLM2, 2,048 cells in ~5 ms here, about one prompt token's compute),
so a smaller gain is not worth it."""


class BatchEntry(NamedTuple):
    """One token of one step: which sequence, at which position, and whether its logits are wanted."""

    token: int
    pos: int
    seq: int
    logits: bool


@dataclass
class Slot:
    """One request's sequence in the shared KV cache.

    ``prompt`` is read from position ``fed`` (0, or the prompt tokens whose cells the sequence still holds);
    ``limit`` is the most tokens the slot may sample (``max_tokens``, capped by the room its sequence has
    left), ``stop_ids`` end it early.
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
        if not 0 <= self.fed < len(self.prompt):
            raise ValueError("the last prompt token must be read: its logits give the first reply token")

    @property
    def prefilling(self) -> bool:
        return self.fed < len(self.prompt)

    @property
    def done(self) -> bool:
        """Sampled its limit or a stop id: its sequence can be freed."""
        return len(self.sampled) >= self.limit or bool(self.sampled and self.sampled[-1] in self.stop_ids)

    def cells(self) -> list[int]:
        """The tokens whose KV cells this slot's sequence holds, positions 0 on: the prompt read so far, then
        every sampled token but the last (it is decoded in the next step, if there is one)."""
        if self.prefilling:
            return list(self.prompt[: self.fed])
        return [*self.prompt, *self.sampled[:-1]]

    def accept(self, token: int) -> None:
        """Record the token sampled for this slot from the step's logits."""
        if self.prefilling or self.done:
            raise RuntimeError("accept() for a slot that did not ask for logits this step")
        self.sampled.append(token)


def plan_step(
    slots: Iterable[Slot], *, prefill_chunk: int, n_batch: int
) -> tuple[list[BatchEntry], list[Slot]]:
    """The next step's entries, ordered by sequence id, and the slots (in entry order) that sample from it.

    ``slots`` is in arrival order; a done slot contributes nothing. Each generating slot gets one token (at
    most ``n_batch`` of them); prompt tokens fill the rest, oldest request first: up to ``n_batch`` in the whole
    step when no slot is generating, else at most ``prefill_chunk``. The prompt chunks advance ``Slot.fed``:
    plan a step only when it will be decoded.
    """
    if prefill_chunk < 1 or n_batch < 1:
        raise ValueError("prefill_chunk and n_batch must be at least 1")
    generating: list[Slot] = []
    waiting: list[Slot] = []
    for slot in slots:
        if slot.done:
            continue
        if slot.prefilling:
            waiting.append(slot)
        elif len(generating) < n_batch:
            generating.append(slot)
    budget = min(prefill_chunk, n_batch - len(generating)) if generating else n_batch
    chunks: dict[int, tuple[int, int]] = {}  # id(slot) → the prompt positions it reads in this step
    reading: list[Slot] = []
    for slot in waiting:
        if budget <= 0:
            break
        take = min(budget, _readable(slot))
        chunks[id(slot)] = (slot.fed, slot.fed + take)
        slot.fed += take
        budget -= take
        reading.append(slot)
    entries: list[BatchEntry] = []
    samplers: list[Slot] = []
    for slot in sorted((*generating, *reading), key=_seq_of):
        span = chunks.get(id(slot))
        if span is None:
            entries.append(
                BatchEntry(slot.sampled[-1], len(slot.prompt) + len(slot.sampled) - 1, slot.seq, True)
            )
            samplers.append(slot)
            continue
        last = len(slot.prompt) - 1
        entries.extend(BatchEntry(slot.prompt[p], p, slot.seq, p == last) for p in range(*span))
        if not slot.prefilling:
            samplers.append(slot)
    return entries, samplers


def _seq_of(slot: Slot) -> int:
    return slot.seq


def _readable(slot: Slot) -> int:
    """The prompt tokens ``slot`` may read in one step: up to, not including, its last one; then the last one
    alone. A token's logits depend on how many tokens its step computes with it (llama.cpp's matrix kernels
    differ by batch size: up to 0.66 apart here), and a prompt found whole in the prefix cache reads only its
    last token; read alone every time, it gives the same first reply token cached or not (issue 33)."""
    last = len(slot.prompt) - 1
    return last - slot.fed if slot.fed < last else 1


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading ids ``a`` and ``b`` share."""
    # A binary search over slice comparisons: each comparison runs in C, so a 2,000-token match costs ~11 of
    # them instead of 2,000 Python steps.
    if type(a) is not type(b):  # a list never equals a tuple
        a, b = tuple(a), tuple(b)
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class SequencePool:
    """The KV-cache sequences: which are free, what each free one's cells still hold, which one a request gets.

    ``take(prompt)`` hands out a free sequence and how many leading prompt tokens' cells it keeps (``reused``:
    the caller removes the sequence's cells from position ``reused`` on); ``release(seq, cells)`` gives it back
    holding ``cells`` (the tokens at positions 0.., :meth:`Slot.cells`), or nothing: ``release(seq, ())``
    after the cells were cleared, or when the engine cannot tell what they hold (a failed step). With
    ``prefix_cache=False`` nothing is ever reused and the lowest free id is handed out.
    """

    def __init__(self, n: int, *, prefix_cache: bool = True) -> None:
        if n < 1:
            raise ValueError("a pool needs at least one sequence")
        self.prefix_cache = prefix_cache
        self._cells: list[tuple[int, ...]] = [() for _ in range(n)]
        self._free = set(range(n))
        self._used_at = [0] * n  # when each sequence was last given back (a counter, not a clock)
        self._releases = 0

    @property
    def free(self) -> int:
        """Sequences a request can take now."""
        return len(self._free)

    def cached(self, seq: int) -> Sequence[int]:
        """The tokens ``seq``'s cells hold (empty while a request runs in it)."""
        return self._cells[seq]

    def take(self, prompt: Sequence[int]) -> tuple[int, int]:
        """A free sequence for ``prompt`` and how many of its first tokens are already in that sequence's cells
        (never all of them: the last one is read for its logits)."""
        if not self._free:
            raise RuntimeError("no free sequence")
        if not prompt:
            raise ValueError("a prompt needs at least one token")
        if not self.prefix_cache:
            seq, reused = min(self._free), 0
        else:
            ids = tuple(prompt)
            shared = {s: common_prefix(self._cells[s], ids) for s in self._free}

            # Worth taking: a sequence whose cells of this prompt outnumber the others it holds (what it
            # saves beats what it throws away), the best of them; else the least recently used (an empty one
            # first), with whatever it shares.
            def net(s: int) -> int:
                return 2 * shared[s] - len(self._cells[s])

            seq = max(self._free, key=lambda s: (net(s), -self._used_at[s], -s))
            if net(seq) <= 0:
                seq = min(self._free, key=lambda s: (self._used_at[s], s))
            reused = min(shared[seq], len(prompt) - 1)
        self._free.remove(seq)
        self._cells[seq] = ()
        return seq, reused

    def copy_source(
        self, prompt: Sequence[int], seq: int, reused: int, busy: Mapping[int, Sequence[int]]
    ) -> tuple[int, int] | None:
        """Another sequence whose cells hold at least ``MIN_COPY`` more leading tokens of ``prompt`` than the
        ``reused`` that ``seq`` (just taken) keeps: ``(source, shared)``, the caller copying ``source``'s cells
        into ``seq`` and keeping ``shared`` of them, or None. ``busy`` maps each running sequence to the tokens
        its cells hold (:meth:`Slot.cells`); free sequences hold what they were released with. Never all of
        ``prompt``: the last token is read for its logits."""
        if not self.prefix_cache:
            return None
        ids = tuple(prompt)
        best, best_shared = None, reused + MIN_COPY - 1
        candidates = [*((s, self._cells[s]) for s in self._free), *busy.items()]
        for source, cells in candidates:
            if source == seq:
                continue
            shared = min(common_prefix(cells, ids), len(ids) - 1)
            if shared > best_shared:
                best, best_shared = source, shared
        return None if best is None else (best, best_shared)

    def release(self, seq: int, cells: Sequence[int]) -> None:
        """``seq`` is free again, its cells holding ``cells`` (positions 0..)."""
        if seq in self._free or not 0 <= seq < len(self._cells):
            raise RuntimeError(f"sequence {seq} was not taken")
        self._free.add(seq)
        self._cells[seq] = tuple(cells) if self.prefix_cache else ()
        self._releases += 1
        self._used_at[seq] = self._releases

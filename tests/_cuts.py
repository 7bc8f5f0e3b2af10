"""Cutting an input into pieces, for the "joined outputs over any split equal the one-shot result" tests.

Every incremental object (detokenizer, stop matcher, text stream, SSE parser, content decoder) is tested by
feeding the same input cut in many ways. These are the one set of cutters the tests share: fixed cut offsets,
cycling piece sizes, random cuts and steps from a seeded ``random.Random``, and the standard battery (whole,
one item at a time, every two-piece split, a few random cuttings).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

S = TypeVar("S", str, bytes)
T = TypeVar("T")


def cut_at(data: S, cuts: Iterable[int]) -> list[S]:
    """``data`` cut at the given offsets, in any order; a repeated offset, 0 or ``len(data)`` gives an empty
    piece (an empty feed is part of any split too)."""
    bounds = [0, *sorted(cuts), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def cut_sizes(data: S, sizes: Sequence[int]) -> list[S]:
    """``data`` cut into pieces whose lengths cycle through ``sizes`` (the last one may be shorter)."""
    pieces: list[S] = []
    pos = 0
    for size in itertools.cycle(sizes):
        if pos >= len(data):
            return pieces
        pieces.append(data[pos : pos + size])
        pos += size
    raise AssertionError("unreachable")  # itertools.cycle never ends


def random_cut(data: S, rng: random.Random, most: int = 8) -> list[S]:
    """``data`` cut at up to ``most`` distinct random offsets inside it: non-empty pieces (``[data]`` when it
    is shorter than two)."""
    if len(data) < 2:
        return [data]
    inner = range(1, len(data))
    return cut_at(data, rng.sample(inner, k=min(len(inner), rng.randint(0, most))))


def random_steps(items: Sequence[T], rng: random.Random, most: int = 4) -> list[list[T]]:
    """``items`` in consecutive steps of 1 to ``most`` items each (an engine's steps of token ids)."""
    steps: list[list[T]] = []
    pos = 0
    while pos < len(items):
        size = rng.randint(1, most)
        steps.append(list(items[pos : pos + size]))
        pos += size
    return steps


def cuttings(data: S, seed: int = 0, *, every: int = 1, random_cuts: int = 20) -> Iterator[list[S]]:
    """The standard battery: whole, one item at a time, the two-piece split at every ``every``-th offset, and
    ``random_cuts`` cuttings at 1 to 6 random offsets (empty pieces included) from a fixed seed."""
    yield [data]
    yield [data[i : i + 1] for i in range(len(data))]
    for i in range(0, len(data) + 1, every):
        yield [data[:i], data[i:]]
    rng = random.Random(seed)
    offsets = range(len(data) + 1)
    for _ in range(random_cuts):
        yield cut_at(data, rng.sample(offsets, min(len(offsets), rng.randint(1, 6))))

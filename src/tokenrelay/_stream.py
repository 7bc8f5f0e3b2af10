"""TextStream: engine token-id steps in, ``TextDelta`` / ``Finished`` events out.

The one place where a reply's end is decided. Per token id, in order:

1. a stop token id or an end-of-sequence id ends the reply with ``"stop"``; its text is never shown;
2. otherwise the id goes through the ``Detokenizer`` and its new text through the ``StopMatcher``; a stop
   string ends the reply with ``"stop"``;
3. otherwise, once ``max_tokens`` ids were consumed, the reply ends with ``"length"``. The checks run in this
   order, so EOS (or a stop string) on the last allowed token is ``"stop"``, not ``"length"`` (the OpenAI
   meaning of ``length`` is "cut short", and that reply was not).

When the reply ends, the detokenizer and the matcher are flushed, ids after the stopping one in the same step
are dropped, and ``feed`` returns the ``Finished`` event: the caller must then stop its engine. Steps fed after
that are dropped too (``[]``), so every split gives the same reply; a step fed after the caller's own
``finish()`` raises ``UseAfterFinishError`` (the rule in ``_errors.py``).

A stop string is charged to the id that completed it: the first id whose reference decode (with the ids
before it) shows the stop. The detokenizer may reveal that text only with a later id (a ByteFallback run of
byte tokens is shown when the run ends, the window fallback shows text one token late); those later ids, and a
stop id or EOS that revealed it by flushing, are not counted and are not reported (``Detokenizer.ids_after``).

Contract (tested over every split of the ids into steps): ``"".join(delta.text)`` is the final text
exactly, the same for any split; no delta is empty; the ids of all deltas followed by ``Finished.token_ids``
are the ids the engine produced, up to and including the stopping one, and their count is
``usage.completion_tokens``. A delta carries the ids consumed since the previous delta; ids that released no
text yet wait for the next one.

Timing: the core reads no clock. The caller passes ``now`` (any monotonic seconds) to ``feed``/``finish`` and
``started_at`` to the constructor; TTFT is the time to the first visible delta, the gaps are between visible
deltas, total is start to ``Finished``. Standard library only.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

from tokenrelay._detokenizer import Detokenizer
from tokenrelay._errors import UseAfterFinishError
from tokenrelay._protocols import Tokenizer
from tokenrelay._stops import StopMatcher

__all__ = [
    "Event",
    "FinishReason",
    "Finished",
    "StepTime",
    "StepTimeline",
    "TextDelta",
    "TextStream",
    "Timings",
    "Usage",
    "percentile",
]

FinishReason: TypeAlias = Literal["stop", "length"]


@dataclass(frozen=True)
class StepTime:
    """When the engine step that produced one token ran, in the caller's clock's seconds.

    ``measured`` is true when the engine said so itself (the embedded engine times each ``llama_decode``);
    false when it did not, and ``start`` and ``end`` are both the step's arrival at the caller.
    """

    start: float
    end: float
    measured: bool


@dataclass(frozen=True, slots=True)
class TextDelta:
    """New text that is final, and the token ids consumed since the previous delta.

    ``steps`` (only when step times were asked for): one :class:`StepTime` per id in ``token_ids``; for text
    an engine made itself (``feed_text``), one per token of that step."""

    text: str
    token_ids: tuple[int, ...]
    steps: tuple[StepTime, ...] | None = None


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) with linear interpolation between ranks; ``None`` for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Timings:
    """Seconds, from the timestamps the caller passed; ``None`` where none were given."""

    ttft: float | None
    gaps: tuple[float, ...]
    total: float | None

    @property
    def p50(self) -> float | None:
        """Median gap between visible deltas."""
        return percentile(self.gaps, 50)

    @property
    def p95(self) -> float | None:
        return percentile(self.gaps, 95)


@dataclass(frozen=True)
class Usage:
    """Token counts of one request, as OpenAI reports them."""

    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_openai(self, reasoning_tokens: int = 0) -> dict[str, object]:
        """OpenAI's usage object; ``reasoning_tokens`` (of the completion) adds ``completion_tokens_details``."""
        usage: dict[str, object] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }
        if reasoning_tokens:
            usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
        return usage


@dataclass(frozen=True)
class Finished:
    """The reply ended. ``matched`` is the stop string or stop token id that ended it (``None`` otherwise);
    ``token_ids`` are the consumed ids no delta carried (the stop token, ids whose text was cut)."""

    reason: FinishReason
    usage: Usage
    token_ids: tuple[int, ...] = ()
    matched: str | int | None = None
    timings: Timings | None = None
    steps: tuple[StepTime, ...] | None = None
    """One :class:`StepTime` per id in ``token_ids`` (only when step times were asked for)."""


Event: TypeAlias = TextDelta | Finished


class StepTimeline:
    """Pairs tokens with the steps that produced them, first in, first out (sans-I/O: times are passed in).

    ``add`` each engine step as it is fed to a ``TextStream``; ``take(n)`` the times of the next ``n`` tokens
    when an event carries ``n`` ids. The ids of a stream's events (deltas, then ``Finished.token_ids``) are
    the ids fed, in order, with only ids past the reply's end left out, so taking them in order pairs each
    token with its own step.
    """

    __slots__ = ("_times",)

    def __init__(self) -> None:
        self._times: deque[StepTime] = deque()

    def add(self, tokens: int, start: float, end: float, *, measured: bool) -> None:
        """An engine step of ``tokens`` tokens ran from ``start`` to ``end``."""
        time = StepTime(start, end, measured)
        self._times.extend(itertools.repeat(time, tokens))

    def take(self, tokens: int) -> tuple[StepTime, ...]:
        """The times of the next ``tokens`` tokens (fewer if fewer were added)."""
        times = self._times
        return tuple(times.popleft() for _ in range(min(tokens, len(times))))

    def __len__(self) -> int:
        return len(self._times)


class TextStream:
    """Sans-I/O composition of ``Detokenizer`` → ``StopMatcher`` with the stop-id and max-token rules.

    ``stop_token_ids`` are added to the tokenizer's EOS ids (unless ``ignore_eos``). ``prompt_ids`` count as
    ``usage.prompt_tokens`` and give the detokenizer its context.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        stops: Sequence[str] = (),
        include_stop: bool = False,
        stop_token_ids: Iterable[int] = (),
        ignore_eos: bool = False,
        max_tokens: int | None = None,
        prompt_ids: Sequence[int] | None = None,
        skip_special_tokens: bool = True,
        started_at: float | None = None,
        stranded: Literal["replace", "discard"] = "replace",
    ) -> None:
        if max_tokens is not None and max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        self._detok = Detokenizer(
            tokenizer, skip_special_tokens=skip_special_tokens, prompt_ids=prompt_ids, stranded=stranded
        )
        self._matcher = StopMatcher(stops, include_stop=include_stop)
        eos = frozenset() if ignore_eos else tokenizer.eos_token_ids
        self._stop_ids = frozenset(stop_token_ids) | eos
        self._max_tokens = max_tokens
        self._prompt_tokens = len(prompt_ids) if prompt_ids is not None else 0
        self._count = 0
        self._pending: list[int] = []  # consumed ids whose text no delta has carried yet
        self._pieces: list[str] = []
        self._finished: Finished | None = None
        self._closed = False  # the caller called finish(): more input is a bug
        self._started_at = started_at
        self._delta_times: list[float] = []

    # -- state -------------------------------------------------------------------------------------

    @property
    def finished(self) -> Finished | None:
        """The ``Finished`` event once the reply ended (then stop the engine), else ``None``."""
        return self._finished

    @property
    def text(self) -> str:
        """All text released so far (the joined deltas)."""
        if len(self._pieces) > 1:
            self._pieces = ["".join(self._pieces)]
        return self._pieces[0] if self._pieces else ""

    @property
    def completion_tokens(self) -> int:
        return self._count

    @property
    def usage(self) -> Usage:
        """The prompt and the ids consumed so far (what a reply ended here by its caller counts)."""
        return Usage(self._prompt_tokens, self._count)

    def set_prompt_tokens(self, count: int) -> None:
        """Count the prompt as ``count`` tokens in ``usage`` (an upstream server said how long it really was)."""
        self._prompt_tokens = count

    def set_stranded(self, policy: Literal["replace", "discard"]) -> None:
        """End a reply cut inside a character with U+FFFD (``"replace"``) or without it (``"discard"``), as
        the engine's own text does (an upstream server says which as the reply goes)."""
        self._detok.stranded = policy

    def start(self, now: float) -> None:
        """Set the request start time, if it was not known when the stream was built."""
        self._started_at = now

    def timings(self, now: float | None = None) -> Timings:
        """TTFT, gaps between visible deltas, and total (to ``Finished``, or to ``now`` while running)."""
        if self._finished is not None and self._finished.timings is not None:
            return self._finished.timings
        total = now - self._started_at if now is not None and self._started_at is not None else None
        return self._timings(total)

    def _timings(self, total: float | None) -> Timings:
        times = self._delta_times
        gaps = tuple(b - a for a, b in itertools.pairwise(times))
        ttft = None
        if self._started_at is not None and times:
            ttft = times[0] - self._started_at
        return Timings(ttft=ttft, gaps=gaps, total=total)

    # -- input -------------------------------------------------------------------------------------

    def feed(self, ids: int | Sequence[int], now: float | None = None) -> list[Event]:
        """Consume one engine step; return at most one ``TextDelta`` and, if the reply ended, ``Finished``."""
        if self._finished is not None:
            return self._after_end()
        step = (ids,) if isinstance(ids, int) else ids
        parts: list[str] = []
        delta_ids: list[int] = []
        for token_id in step:
            self._count += 1
            if token_id in self._stop_ids:
                return self._end("stop", parts, delta_ids, now, stop_id=token_id)
            self._pending.append(token_id)
            released = self._matcher.feed(self._detok.feed(token_id))
            if self._matcher.stopped:
                self._uncount(self._detok.ids_after(self._matcher.stop_end))
                self._release(released, parts, delta_ids)
                return self._end("stop", parts, delta_ids, now)
            self._release(released, parts, delta_ids)
            if self._max_tokens is not None and self._count >= self._max_tokens:
                return self._end("length", parts, delta_ids, now)
        return self._emit(parts, delta_ids, now)

    def feed_text(self, text: str, tokens: int = 1, now: float | None = None) -> list[Event]:
        """Consume text an engine made itself (llama.cpp's server, whose ids are incomplete): it skips the
        detokenizer, but stop strings, ``max_tokens`` (counting ``tokens`` per call) and usage still apply."""
        if self._finished is not None:
            return self._after_end()
        parts: list[str] = []
        delta_ids: list[int] = []
        self._count += tokens
        self._release(self._matcher.feed(text), parts, delta_ids)
        if self._matcher.stopped:
            return self._end("stop", parts, delta_ids, now)
        if self._max_tokens is not None and self._count >= self._max_tokens:
            return self._end("length", parts, delta_ids, now)
        return self._emit(parts, delta_ids, now)

    def finish(self, now: float | None = None, reason: FinishReason = "stop") -> list[Event]:
        """The engine ended by itself: flush what is held and finish with ``reason`` (``[]`` if finished)."""
        self._closed = True
        if self._finished is not None:
            return []
        return self._end(reason, [], [], now)

    # -- internals ---------------------------------------------------------------------------------

    def _after_end(self) -> list[Event]:
        if self._closed:
            raise UseAfterFinishError("TextStream.feed() called after finish()")
        return []  # the reply ended by itself (stop, length): what the engine still sends is dropped

    def _release(self, text: str, parts: list[str], delta_ids: list[int]) -> None:
        if text:
            parts.append(text)
            delta_ids.extend(self._pending)
            self._pending.clear()

    def _uncount(self, n: int) -> None:
        """The stop was complete ``n`` ids ago: those ids are not part of the reply (they carried no text yet)."""
        n = min(n, len(self._pending))
        if n:
            del self._pending[-n:]
            self._count -= n

    def _emit(self, parts: list[str], delta_ids: list[int], now: float | None) -> list[Event]:
        if not parts:
            return []
        text = "".join(parts)
        self._pieces.append(text)
        if now is not None:
            self._delta_times.append(now)
        return [TextDelta(text, tuple(delta_ids))]

    def _end(
        self,
        reason: FinishReason,
        parts: list[str],
        delta_ids: list[int],
        now: float | None,
        stop_id: int | None = None,
    ) -> list[Event]:
        matcher = self._matcher
        if not matcher.stopped:
            released = matcher.feed(self._detok.finish())
            if matcher.stopped:
                # The flush revealed a stop string: the ids after the one that completed it, the stop id or EOS
                # that ended the step included, are not part of the reply.
                if stop_id is not None:
                    stop_id = None
                    self._count -= 1
                self._uncount(self._detok.ids_after(matcher.stop_end))
            self._release(released, parts, delta_ids)
        if not matcher.stopped:
            self._release(matcher.finish(), parts, delta_ids)
        matched: str | int | None = stop_id
        if matcher.stopped:
            reason, matched = "stop", matcher.matched
        events = self._emit(parts, delta_ids, now)
        leftover = (*self._pending, stop_id) if stop_id is not None else tuple(self._pending)
        self._pending.clear()
        total = now - self._started_at if now is not None and self._started_at is not None else None
        usage = Usage(self._prompt_tokens, self._count)
        self._finished = Finished(reason, usage, leftover, matched, self._timings(total))
        events.append(self._finished)
        return events

"""StopMatcher: cut a streamed text at the first stop string, holding back as little as possible.

Rules (each has a test in ``tests/test_stops.py``):

1. Hold back only the longest tail of the text that is a *proper prefix* of some stop string. Text that cannot
   start a stop goes out at once. A fixed ``max(len(stop)) - 1`` delay is what vLLM does (vllm#11089,
   vllm#13087): with a long stop string every reply lags behind by that many characters for no reason.
2. A stop is found anywhere: inside one delta, straddling the boundary, or spread over many deltas.
3. The stop that *completes* earliest in the text wins. Two stops completing at the same character (one is a
   suffix of the other, e.g. ``"</s>"`` and ``"s>"``) is a tie, and the one listed first wins.
4. Nothing after the stop is ever returned; ``include_stop=True`` keeps the stop text itself.
5. Contract: for any split of a text into deltas, ``"".join(feed(d) for d in deltas) + finish()`` is the same
   string, and ``stopped`` / ``matched`` are the same.

Why an automaton: the held-back tail in rule 1 is exactly the state of an Aho–Corasick automaton over the stop
strings (the longest suffix of the text that is a prefix of some stop), and its output links report every stop
ending at the current character. Each character costs amortised O(1) dictionary steps whatever the number or
length of the stops; while the automaton is in its root state a regex character class skips straight to the
next character that can start a stop, so plain text costs one C-level scan. The vLLM-style alternative,
``text.find(stop, ...)`` for each stop on every delta, costs O(number of stops) per delta
(``benchmarks/stops.py`` prints both side by side).

Standard library only; no clock, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ._errors import UseAfterFinishError

__all__ = ["StopMatcher"]

_NO_MATCH = -1


class _Automaton:
    """Aho–Corasick goto/fail tables over the stop strings, states numbered in creation order (root = 0)."""

    __slots__ = ("alphabet", "depth", "fail", "first_chars", "goto", "out")

    def __init__(self, stops: Sequence[str]) -> None:
        self.goto: list[dict[str, int]] = [{}]
        self.depth: list[int] = [0]
        # out[s]: list index of the stop that wins among those ending in state s (lowest index, rule 3).
        self.out: list[int] = [_NO_MATCH]
        for index, stop in enumerate(stops):
            state = 0
            for char in stop:
                nxt = self.goto[state].get(char)
                if nxt is None:
                    nxt = len(self.goto)
                    self.goto.append({})
                    self.depth.append(self.depth[state] + 1)
                    self.out.append(_NO_MATCH)
                    self.goto[state][char] = nxt
                state = nxt
            if self.out[state] == _NO_MATCH:  # a duplicate keeps its first (lower) index
                self.out[state] = index
        self.fail: list[int] = [0] * len(self.goto)
        self._link_failures()
        self.alphabet = frozenset("".join(stops))
        self.first_chars = re.compile("[" + "".join(re.escape(c) for c in sorted(self.goto[0])) + "]")

    def _link_failures(self) -> None:
        # Breadth-first, so a state's failure target (shallower) is final before the state is visited.
        queue = list(self.goto[0].values())
        for state in queue:
            for char, child in self.goto[state].items():
                queue.append(child)
                target = self.fail[state]
                while char not in self.goto[target] and target != 0:
                    target = self.fail[target]
                self.fail[child] = self.goto[target].get(char, 0)
                # Merge the output link: every stop ending at the failure target also ends here.
                inherited = self.out[self.fail[child]]
                if inherited != _NO_MATCH and (self.out[child] == _NO_MATCH or inherited < self.out[child]):
                    self.out[child] = inherited

    def step(self, state: int, char: str) -> int:
        """The full DFA transition, computed through failure links once and then cached in ``goto``.

        Caching turns the amortised fail-chain walk into one dict lookup per character. The cache only holds
        characters that occur in some stop (any other character leads to the root and is not stored), so its
        size is bounded by the stop strings, never by the text.
        """
        goto, fail = self.goto, self.fail
        if char not in self.alphabet:
            return 0
        target = state
        while True:
            nxt = goto[target].get(char)
            if nxt is not None:
                break
            if target == 0:
                nxt = 0
                break
            target = fail[target]
        goto[state][char] = nxt
        return nxt


class StopMatcher:
    """Incremental stop-string matcher over a stream of text deltas.

    ``feed(delta)`` returns the text that is now safe to send (possibly ``""``); ``finish()`` returns what was
    still held back when the stream ends without a stop. After a stop, ``stopped`` is true, ``matched`` is the
    stop string that won, and every later ``feed`` returns ``""`` (rule 5: the text after a stop is dropped
    whichever call it comes in). ``finish()`` may be called again (it returns ``""``); ``feed`` after it raises
    :class:`UseAfterFinishError`.

    Contract: joined outputs over any split of the input equal the one-shot result,
    ``"".join(m.feed(d) for d in deltas) + m.finish() == StopMatcher(stops).feed("".join(deltas)) + ...``.
    """

    __slots__ = ("_auto", "_finished", "_held", "_include_stop", "_matched", "_state", "_stop_end", "_stops")

    def __init__(self, stops: Sequence[str], *, include_stop: bool = False) -> None:
        if isinstance(stops, str):
            raise TypeError("stops must be a sequence of strings, not a single string")
        for stop in stops:
            if not isinstance(stop, str):
                raise TypeError(f"stop strings must be str, got {type(stop).__name__}")
            if not stop:
                # An empty stop would match before the first character: every reply would be empty.
                raise ValueError("empty stop string: it would end every stream before any text")
        self._stops: tuple[str, ...] = tuple(stops)
        self._include_stop = include_stop
        self._auto = _Automaton(self._stops) if self._stops else None
        self._state = 0
        self._held = ""  # always the last depth[_state] characters of the text fed so far
        self._matched: str | None = None
        self._stop_end = 0
        self._finished = False

    @property
    def stops(self) -> tuple[str, ...]:
        return self._stops

    @property
    def stopped(self) -> bool:
        """Whether a stop string ended the stream."""
        return self._matched is not None

    @property
    def matched(self) -> str | None:
        """The stop string that ended the stream, or ``None``."""
        return self._matched

    @property
    def stop_end(self) -> int:
        """After the ``feed`` that found the stop: how many characters of the text given to that call run up to
        the end of the stop (the stop's last character is ``text[stop_end - 1]``); 0 before a stop."""
        return self._stop_end

    @property
    def held(self) -> str:
        """The tail held back because it may be the start of a stop (for inspection and tests)."""
        return self._held

    def feed(self, text: str) -> str:
        """Consume ``text``; return the part of the stream that can no longer become a stop."""
        auto = self._auto
        if self._finished:
            raise UseAfterFinishError("StopMatcher.feed() called after finish()")
        if self._matched is not None or not text:
            return ""
        if auto is None:
            return text
        state = self._state
        goto = auto.goto
        goto0 = goto[0]
        first_chars = auto.first_chars
        out = auto.out
        i, n = 0, len(text)
        while i < n:
            if state == 0:
                # Root: skip, in C, everything that cannot start a stop.
                found = first_chars.search(text, i)
                if found is None:
                    break
                i = found.start()
                state = goto0[text[i]]
            else:
                char = text[i]
                nxt = goto[state].get(char)
                state = auto.step(state, char) if nxt is None else nxt
            i += 1
            if out[state] != _NO_MATCH:
                return self._cut(text, i, out[state])
        # No stop: everything except the current state's depth is final.
        combined = self._held + text
        depth = auto.depth[state]
        self._state = state
        self._held = combined[len(combined) - depth :] if depth else ""
        return combined[: len(combined) - depth]

    def _cut(self, text: str, end: int, index: int) -> str:
        """A stop completed at ``text[end - 1]``: release what precedes it (and it, with include_stop)."""
        stop = self._stops[index]
        combined = self._held + text[:end]
        start = len(combined) - len(stop)  # >= 0: the stop's prefix was held back (rule 1)
        self._matched = stop
        self._stop_end = end
        self._held = ""
        self._state = 0
        return combined if self._include_stop else combined[:start]

    def finish(self) -> str:
        """End of stream: release the held-back tail (``""`` after a stop, or when called again)."""
        self._finished = True
        held, self._held = self._held, ""
        self._state = 0
        return "" if self._matched is not None else held

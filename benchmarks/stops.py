"""StopMatcher cost per delta with 1 to 1024 stop strings, side by side with a vLLM-style tail ``find``.

The vLLM-style matcher (the shape of vLLM's ``check_stop_strings``, re-written here) searches the tail of
the text for every stop on every delta and always holds back ``max(len(stop)) - 1`` characters. Its cost
grows with the number of stops; the automaton's should not. The stop strings are adversarial on purpose:
substrings of the corpus with one character appended, so they almost match all the time and the automaton
leaves its root state (where a regex skips plain text in C) for its per-character Python step.

Run: ``python benchmarks/stops.py``. It prints ns per delta and per character, the ratio between the two,
and how many characters each holds back on average (the latency a reader sees).
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tokenrelay._stops import StopMatcher

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "multilingual.txt"


class TailFindMatcher:
    """vLLM-style: ``find`` every stop in the new tail; hold back a fixed ``max(len) - 1`` characters."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = list(stops)
        self.hold = max(len(s) for s in stops) - 1
        self.text = ""
        self.sent = 0
        self.stopped = False

    def feed(self, delta: str) -> str:
        if self.stopped:
            return ""
        self.text += delta
        cut = -1
        for stop in self.stops:
            index = self.text.find(stop, max(0, len(self.text) - len(delta) - len(stop) + 1))
            if index != -1 and (cut == -1 or index + len(stop) < cut):
                cut = index + len(stop)
                stop_start = index
        if cut != -1:
            self.stopped = True
            out = self.text[self.sent : stop_start]
            self.sent = stop_start
            return out
        end = max(self.sent, len(self.text) - self.hold)
        out = self.text[self.sent : end]
        self.sent = end
        return out

    def held(self) -> int:
        return len(self.text) - self.sent


def make_stops(text: str, count: int, length: tuple[int, int], rng: random.Random) -> list[str]:
    stops = []
    while len(stops) < count:
        n = rng.randint(*length)
        start = rng.randrange(0, len(text) - n)
        stop = text[start : start + n] + "\x07"  # never in the text: the prefix matches, the stop does not
        stops.append(stop)
    return stops


def bench(
    make: Callable[[], StopMatcher | TailFindMatcher], deltas: Sequence[str], repeat: int
) -> tuple[float, float]:
    """Best-of-``repeat`` seconds for one pass, and the mean characters held back after each delta."""
    best = float("inf")
    held_total = 0
    for _ in range(repeat):
        matcher = make()
        held_total = 0
        t0 = time.perf_counter()
        for delta in deltas:
            matcher.feed(delta)
        best = min(best, time.perf_counter() - t0)
    matcher = make()
    for delta in deltas:
        matcher.feed(delta)
        held_total += len(matcher.held) if isinstance(matcher, StopMatcher) else matcher.held()
    return best, held_total / len(deltas)


def main() -> None:
    rng = random.Random(42)
    text = CORPUS.read_bytes().decode("utf-8") * 4
    # Deltas of 1-6 characters, the size of typical tokens.
    deltas, i = [], 0
    while i < len(text):
        n = rng.randint(1, 6)
        deltas.append(text[i : i + n])
        i += n
    chars = len(text)
    print(f"text: {chars} chars in {len(deltas)} deltas (best of 5 passes)\n")
    header = (
        f"{'stops':>5} {'len':>7} | {'automaton ns/delta':>18} {'ns/char':>8} {'held':>6} | "
        f"{'tail-find ns/delta':>18} {'ns/char':>8} {'held':>6} | {'ratio':>6}"
    )
    print(header)
    print("-" * len(header))
    for length in ((3, 12), (100, 200)):
        for count in (1, 16, 256, 1024):
            stops = make_stops(text, count, length, rng)
            ours, ours_held = bench(lambda s=stops: StopMatcher(s), deltas, 5)
            theirs, theirs_held = bench(lambda s=stops: TailFindMatcher(s), deltas, 5)
            print(
                f"{count:>5} {length[0]:>3}-{length[1]:<3} | {ours / len(deltas) * 1e9:>18.0f} "
                f"{ours / chars * 1e9:>8.0f} {ours_held:>6.1f} | {theirs / len(deltas) * 1e9:>18.0f} "
                f"{theirs / chars * 1e9:>8.0f} {theirs_held:>6.1f} | {theirs / ours:>5.1f}x"
            )
    print("\nratio = tail-find time / automaton time; held = mean characters held back after a delta.")


if __name__ == "__main__":
    main()

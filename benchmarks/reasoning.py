"""ReasoningSplitter cost per character: O(1), shown by 10k, 100k and 1M-character replies side by side, and
against re-splitting the whole text so far on every delta (how llama.cpp's server parses a reply: each step
re-parses the accumulated text, O(n) per delta, O(n²) per reply).

Three replies, each ``<think>`` + reasoning + ``</think>`` + answer, half reasoning and half answer, cut into
deltas of 1-6 characters (the size of typical tokens):

- ``corpus``: the multilingual corpus (scripts, emoji, CRLF), with no ``<`` in it: the plain case;
- ``markup``: reasoning full of ``<``, ``</``, ``</th`` and ``</thin`` (HTML and code), so the splitter holds a
  partial tag and lets it go again every few characters: its slowest path;
- ``thinking``: all reasoning, never closed (a reply cut by ``max_tokens`` while thinking).

Run: ``python benchmarks/reasoning.py`` (``make bench`` runs it). It prints ns per character for the
splitter at each length and the ratios of its cost per character at 100k and 1M to 10k characters (1.0 is
O(1); O(n) would be 10 and 100), the stop matcher over the same deltas as a control, the cost of the deltas'
loop alone (what any consumer pays), and the re-split baseline up to 100k characters.
"""

from __future__ import annotations

import gc
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tokenrelay._reasoning import REASONING_FORMATS, ReasoningSplitter
from tokenrelay._stops import StopMatcher

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "multilingual.txt"
FMT = REASONING_FORMATS["qwen3"]
LENGTHS = (10_000, 100_000, 1_000_000)


def reply(kind: str, length: int, rng: random.Random) -> str:
    if kind == "markup":
        words = ["a", "<", "</", "</th", "</thin", "<b>", "</b>", "x < y", "if (a</t) {", "नमस्ते", "🙂", " "]
        body = "".join(rng.choice(words) for _ in range(length // 2))
    else:
        corpus = CORPUS.read_text("utf-8")
        body = (corpus * (length // len(corpus) + 1)).replace("<", "[")
    half = length // 2
    if kind == "thinking":
        return "<think>" + body[:length]
    return "<think>" + body[:half] + "</think>\n\n" + body[half:length]


def cut(text: str, rng: random.Random) -> list[str]:
    deltas, i = [], 0
    while i < len(text):
        n = rng.randint(1, 6)
        deltas.append(text[i : i + n])
        i += n
    return deltas


def split(deltas: Sequence[str]) -> None:
    splitter = ReasoningSplitter(FMT, start="tag")
    for delta in deltas:
        splitter.feed(delta)
    splitter.finish()


def stop_matcher(deltas: Sequence[str]) -> None:
    """The stop matcher, the hold-back already on every reply's path, over the same deltas: a stop string
    shaped like the closing tag that never completes, so it holds and releases partial tags as the splitter
    does. A control: machine noise and cache effects move both columns alike."""
    matcher = StopMatcher(["</think>\x07"])
    for delta in deltas:
        matcher.feed(delta)
    matcher.finish()


def loop_only(deltas: Sequence[str]) -> None:
    out = []
    for delta in deltas:
        out.append(delta)


def resplit(deltas: Sequence[str]) -> None:
    """Re-split the whole text so far on every delta and send what is new (the re-parse shape)."""
    text, sent_r, sent_a = "", 0, 0
    for delta in deltas:
        text += delta
        body = text[len(FMT.opening) :] if text.startswith(FMT.opening) else ""
        reasoning, closing, answer = body.partition(FMT.closing)
        if not closing:  # hold back a possible partial tag at the end
            for k in range(len(FMT.closing) - 1, 0, -1):
                if reasoning.endswith(FMT.closing[:k]):
                    reasoning = reasoning[:-k]
                    break
        sent_r, sent_a = len(reasoning), len(answer)
    del sent_r, sent_a


def timed(run: Callable[[Sequence[str]], None], deltas: Sequence[str]) -> float:
    gc.collect()
    gc.disable()
    try:
        t0 = time.perf_counter()
        run(deltas)
        return time.perf_counter() - t0
    finally:
        gc.enable()


def main() -> None:
    rng = random.Random(31)
    rounds = 7
    print(f"ns per character, best of {rounds} rounds, the lengths taking turns (deltas of 1-6 characters)\n")
    header = (
        f"{'reply':>9} {'chars':>9} | {'splitter':>9} {'stops':>9} {'loop only':>9} {'re-split':>9} | "
        f"{'re-split / splitter':>19}"
    )
    print(header)
    print("-" * len(header))
    for kind in ("corpus", "markup", "thinking"):
        texts = {length: reply(kind, length, rng) for length in LENGTHS}
        deltas = {length: cut(text, rng) for length, text in texts.items()}
        ours = dict.fromkeys(LENGTHS, float("inf"))
        base = dict.fromkeys(LENGTHS, float("inf"))
        stop = dict.fromkeys(LENGTHS, float("inf"))
        for _ in range(rounds):  # in turns, so a busy moment of the machine hits every length alike
            for length in LENGTHS:
                ours[length] = min(ours[length], timed(split, deltas[length]) / len(texts[length]) * 1e9)
                base[length] = min(base[length], timed(loop_only, deltas[length]) / len(texts[length]) * 1e9)
                stop[length] = min(
                    stop[length], timed(stop_matcher, deltas[length]) / len(texts[length]) * 1e9
                )
        for length in LENGTHS:
            if length <= 100_000:
                theirs = min(timed(resplit, deltas[length]) for _ in range(3 if length <= 10_000 else 1))
                theirs = theirs / len(texts[length]) * 1e9
                cells = f"{theirs:>9.0f} | {theirs / ours[length]:>18.0f}x"
            else:
                cells = f"{'-':>9} | {'-':>19}"
            print(
                f"{kind:>9} {len(texts[length]):>9} | {ours[length]:>9.0f} {stop[length]:>9.0f} "
                f"{base[length]:>9.0f} {cells}"
            )
        print(
            f"{'':>9} {'':>9}   splitter ns/char, 100k / 10k: {ours[100_000] / ours[10_000]:.2f}, "
            f"1M / 10k: {ours[1_000_000] / ours[10_000]:.2f} (1.0 = O(1) per character)"
        )
    print(
        "\nstops = StopMatcher over the same deltas (a control: the O(1) hold-back every reply already has);"
        "\nloop only = the same deltas appended to a list, no splitting: the floor any consumer pays."
    )


if __name__ == "__main__":
    main()

"""SSE parse throughput: tokenrelay's SSEParser side by side with httpx-sse, the openai SDK and sseclient-py.

The stream: 5 MB of ``chat.completion.chunk`` frames (written by ``ChatChunkWriter``) whose deltas are 1-6
characters of the multilingual corpus, cut at random offsets of 1-1024 B and of 1-64 B (fixed seeds), as a
network might deliver it. First every parser must return exactly the events that were written (asserted);
then each one is timed on the same chunks, in interleaved rounds, best of ``--repeat``, consuming events
without keeping them. Printed: MB/s, events/s, and each of our two rows' speed over each peer's. Target: at
least 2x the fastest peer on both cut sizes.

tokenrelay is timed two ways, both printed:
- ``feed()``: one ``SSEParser.feed(chunk)`` call per chunk, as the sans-I/O adapters drive it;
- ``iter_events()``: ``SSEParser().iter_events(iter(chunks))``, an iterator of chunks in, events out, which
  is how the three peers below are driven, so this row is the like-for-like comparison.

Then the other direction, writing: ``ChatChunkWriter.delta`` against ``json.dumps`` of the chunk dict plus
``encode_event``, per frame, on the same deltas.

Each peer runs through its own decoding API, as its users drive it:
- sseclient-py: ``SSEClient(chunks).events()``;
- the openai SDK: ``openai._streaming.SSEDecoder().iter_bytes(chunks)`` (what ``Stream`` uses);
- httpx-sse: httpx's incremental UTF-8 decoding of each chunk, then its ``SSELineDecoder`` and
  ``SSEDecoder`` line by line, as ``EventSource.iter_sse`` does (without httpx's own response overhead).

CPU time (``time.process_time``) is measured, so other processes on a shared machine do not skew the ratios.
Run: ``python benchmarks/sse.py [--mb 5] [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import codecs
import gc
import json
import random
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tokenrelay.wire._chat import ChatChunkWriter
from tokenrelay.wire._sse import SSEParser, encode_event

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "multilingual.txt"
Parser = Callable[[list[bytes]], Iterator[tuple[str, str]]]


WRITER = ChatChunkWriter(
    id="chatcmpl-8f2a61c0b3", model="smollm2-135m-instruct", created=1_732_000_000, system_fingerprint="fp_tr"
)


def deltas(megabytes: float) -> list[str]:
    """The corpus in 1-6 character deltas, enough for ``megabytes`` of chat chunk frames."""
    text = CORPUS.read_bytes().decode("utf-8")
    rng = random.Random(1)
    pieces, size, at = [], 0, 0
    while size < megabytes * 1e6:
        n = rng.randint(1, 6)
        pieces.append((text + text)[at : at + n])
        at = (at + n) % len(text)
        size += len(WRITER.delta(pieces[-1]))
    return pieces


def chat_stream(pieces: list[str]) -> tuple[bytes, list[str]]:
    """The frames of ``pieces`` as one stream, and their JSON payloads."""
    frames = [WRITER.delta(piece) for piece in pieces]
    return b"".join(frames), [frame[6:-2].decode() for frame in frames]


def dumped_frame(piece: str) -> bytes:
    """What a server without a writer does per token: build the chunk dict, dump it, frame it."""
    choice = {"index": 0, "delta": {"content": piece}, "logprobs": None, "finish_reason": None}
    chunk = {
        "id": "chatcmpl-8f2a61c0b3",
        "object": "chat.completion.chunk",
        "created": 1_732_000_000,
        "model": "smollm2-135m-instruct",
        "system_fingerprint": "fp_tr",
        "choices": [choice],
    }
    return encode_event(json.dumps(chunk, ensure_ascii=False, separators=(",", ":")))


def writing(pieces: list[str], repeat: int) -> None:
    assert [WRITER.delta(p) for p in pieces[:2000]] == [dumped_frame(p) for p in pieces[:2000]]
    best = {"ChatChunkWriter.delta": float("inf"), "json.dumps + encode_event": float("inf")}
    for _ in range(repeat):
        for name, write in zip(best, (WRITER.delta, dumped_frame), strict=True):
            start = time.process_time()
            for piece in pieces:
                write(piece)
            best[name] = min(best[name], time.process_time() - start)
    print(f"\nwriting {len(pieces)} frames (identical bytes either way)")
    for name, seconds in best.items():
        print(f"  {name:<28} {seconds / len(pieces) * 1e9:8.0f} ns/frame")
    print(f"  the writer is {best['json.dumps + encode_event'] / best['ChatChunkWriter.delta']:.1f}x cheaper")


def cut(stream: bytes, largest: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    chunks, at = [], 0
    while at < len(stream):
        step = rng.randint(1, largest)
        chunks.append(stream[at : at + step])
        at += step
    return chunks


def tokenrelay_feed_events(chunks: list[bytes]) -> Iterator[tuple[str, str]]:
    parser = SSEParser()
    feed = parser.feed
    for chunk in chunks:
        for event in feed(chunk):
            yield event.event, event.data
    parser.close()


def tokenrelay_iter_events(chunks: list[bytes]) -> Iterator[tuple[str, str]]:
    for event in SSEParser().iter_events(iter(chunks)):
        yield event.event, event.data


def sseclient_events(chunks: list[bytes]) -> Iterator[tuple[str, str]]:
    import sseclient

    for event in sseclient.SSEClient(iter(chunks)).events():
        yield event.event, event.data


def openai_events(chunks: list[bytes]) -> Iterator[tuple[str, str]]:
    from openai._streaming import SSEDecoder

    for event in SSEDecoder().iter_bytes(iter(chunks)):
        yield event.event or "message", event.data


def httpx_sse_events(chunks: list[bytes]) -> Iterator[tuple[str, str]]:
    from httpx_sse._decoders import SSEDecoder, SSELineDecoder

    text_decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # httpx's iter_text()
    lines, decoder = SSELineDecoder(), SSEDecoder()

    def events(new_lines: Iterable[str]) -> Iterator[tuple[str, str]]:
        for line in new_lines:
            event = decoder.decode(line.rstrip("\n"))
            if event is not None:
                yield event.event or "message", event.data

    for chunk in chunks:
        text = text_decoder.decode(chunk)
        if text:
            yield from events(lines.decode(text))
    yield from events(lines.flush())


OURS = ("tokenrelay feed()", "tokenrelay iter_events()")
PARSERS: dict[str, Parser] = {
    OURS[0]: tokenrelay_feed_events,
    OURS[1]: tokenrelay_iter_events,
    "sseclient-py": sseclient_events,
    "httpx-sse": httpx_sse_events,
    "openai": openai_events,
}


def cpu_seconds(parse: Parser, chunks: list[bytes]) -> float:
    start = time.process_time()
    for _ in parse(chunks):
        pass
    return time.process_time() - start


def compare(stream: bytes, payloads: list[str], largest: int, repeat: int) -> dict[str, float]:
    """Time every parser on the stream cut at 1-``largest`` B; return each of ours over the fastest peer."""
    chunks = cut(stream, largest, seed=largest)
    expected = [("message", payload) for payload in payloads]
    for name, parse in PARSERS.items():
        assert list(parse(chunks)) == expected, f"{name} disagrees on 1-{largest} B cuts"
    best = dict.fromkeys(PARSERS, float("inf"))
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeat):
            for name, parse in PARSERS.items():
                best[name] = min(best[name], cpu_seconds(parse, chunks))
    finally:
        gc.enable()
    print(f"\n1-{largest} B cuts: {len(chunks)} chunks, {len(expected)} events, all parsers agree")
    print(f"  {'parser':<25} {'MB/s':>7} {'events/s':>11} {'feed() is':>11} {'iter_events() is':>17}")
    for name, seconds in best.items():
        ratios = ["", ""] if name in OURS else [f"{seconds / best[ours]:.2f}x" for ours in OURS]
        print(
            f"  {name:<25} {len(stream) / seconds / 1e6:7.1f} {len(expected) / seconds:11,.0f}"
            f" {ratios[0]:>11} {ratios[1]:>17}"
        )
    fastest = min(seconds for name, seconds in best.items() if name not in OURS)
    return {ours: fastest / best[ours] for ours in OURS}


def main() -> None:
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("--mb", type=float, default=5.0, help="stream size in MB (default 5)")
    arguments.add_argument("--repeat", type=int, default=5, help="timed rounds, best kept (default 5)")
    options = arguments.parse_args()
    pieces = deltas(options.mb)
    stream, payloads = chat_stream(pieces)
    print(
        f"{len(stream) / 1e6:.1f} MB of chat chunks, {len(payloads)} events, Python {sys.version.split()[0]}"
    )
    ratios = {largest: compare(stream, payloads, largest, options.repeat) for largest in (1024, 64)}
    writing(pieces, options.repeat)
    print("\ntarget: at least 2x the fastest peer on both cut sizes (CPU time, best of the rounds)")
    for largest, ours in ratios.items():
        for name, ratio in ours.items():
            verdict = "OK" if ratio >= 2 else "short of 2x"
            print(f"  {f'1-{largest} B, {name}':<35} {ratio:.2f}x the fastest peer  {verdict}")


if __name__ == "__main__":
    main()

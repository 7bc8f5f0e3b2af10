"""Full relay cost per token, and SmolLM2's speed on this machine.

Part 1 (sans-I/O, no sleeping): the replay engine's ids for the multilingual corpus go one id per step through
``TextStream`` (detokenizer + 4 stop strings), each delta becomes an OpenAI chat-completion chunk written as
an SSE frame (``ChatChunkWriter``). Printed per stage, in µs per token, next to a naive pipeline that re-decodes every id so far
with the tokenizer's own decode and searches each stop in the whole text (what a first attempt does).
Target: the full pipeline at most 20 µs per token.

Part 2 (``--llama``, on by default when llama-cpp-python is installed): SmolLM2-135M-Instruct Q4_1 on the
CPU, through ``stream_events`` (one worker-thread step per token), side by side with llama-cpp-python's own
streaming chat completion on the same model: TTFT (prompt evaluated from scratch each run) and decode tokens/s.

Run: ``python benchmarks/pipeline.py [--no-llama] [--repeat N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tokenrelay._detokenizer import Detokenizer
from tokenrelay._protocols import Tokenizer
from tokenrelay._stream import Finished, TextDelta, TextStream
from tokenrelay.engines import ReplayEngine, SamplingParams
from tokenrelay.tokenizers import load_tokenizer
from tokenrelay.wire._chat import DONE, ChatChunkWriter
from tokenrelay.wire._sse import encode_event

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "multilingual.txt"
STOPS = ["\n\nUser:", "<|im_end|>", "###", "STOP-SEQUENCE-NEVER-SEEN"]


def best_of(repeat: int, run: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best


# -- part 1: the sans-I/O pipeline -------------------------------------------------------------------------


def detok_only(tok: Tokenizer, ids: Sequence[int]) -> None:
    detok = Detokenizer(tok)
    for i in ids:
        detok.feed(i)
    detok.finish()


def text_stream(tok: Tokenizer, ids: Sequence[int]) -> None:
    stream = TextStream(tok, stops=STOPS)
    for i in ids:
        stream.feed(i)
    stream.finish()


def full_pipeline(tok: Tokenizer, ids: Sequence[int]) -> int:
    """TextStream → chat chunk as an SSE frame; returns the bytes written (so nothing is optimised away)."""
    stream = TextStream(tok, stops=STOPS, prompt_ids=ids[:8])
    chunks = ChatChunkWriter(id="chatcmpl-bench", model="smollm2", created=0, include_usage=True)
    written = len(chunks.role())
    for i in ids:
        for event in stream.feed(i):
            written += len(_frame(chunks, event))
    for event in stream.finish():
        written += len(_frame(chunks, event))
    return written + len(DONE)


def _frame(chunks: ChatChunkWriter, event: TextDelta | Finished) -> bytes:
    if isinstance(event, TextDelta):
        return chunks.delta(event.text)
    return chunks.finish(event.reason) + chunks.usage(event.usage)


def naive_pipeline(tok: Tokenizer, ids: Sequence[int]) -> None:
    """Re-decode everything each token, search every stop in all of it, json.dumps a dict chunk."""
    sent = 0
    for k in range(1, len(ids) + 1):
        text = tok.decode(ids[:k])
        if text.endswith("\ufffd"):
            continue
        if any(stop in text for stop in STOPS):
            break
        delta, sent = text[sent:], len(text)
        choice = {"index": 0, "delta": {"content": delta}, "finish_reason": None}
        encode_event(json.dumps({"id": "x", "object": "chat.completion.chunk", "choices": [choice]}))


def part_one(repeat: int) -> None:
    tok = load_tokenizer("smollm2")
    text = CORPUS.read_bytes().decode("utf-8")
    engine = ReplayEngine(tok, text * 8, rate=None, eos=False)
    ids = engine.reply_ids("", SamplingParams(max_tokens=None))
    n = len(ids)
    print(f"part 1: {n} tokens of the multilingual corpus (x8), one id per step, best of {repeat}\n")
    stages = [
        ("detokenizer only", lambda: detok_only(tok, ids)),
        ("TextStream (detok + 4 stops)", lambda: text_stream(tok, ids)),
        ("full: + chunk JSON + SSE frame", lambda: full_pipeline(tok, ids)),
    ]
    results = {name: best_of(repeat, run) / n * 1e6 for name, run in stages}
    short = ids[:1500]  # the naive pipeline is quadratic: time it on a prefix
    naive = best_of(max(1, repeat // 2), lambda: naive_pipeline(tok, short)) / len(short) * 1e6
    for name, us in results.items():
        print(f"  {name:<34} {us:7.2f} µs/token")
    full = results["full: + chunk JSON + SSE frame"]
    print(f"  {'naive re-decode (1500-token prefix)':<34} {naive:7.2f} µs/token")
    print(f"\n  full pipeline vs target 20 µs/token: {'OK' if full <= 20 else 'OVER'} ({full:.2f})")
    print(f"  naive / full: {naive / full:.1f}x (and the naive one grows with the reply length)\n")


# -- part 2: SmolLM2 on llama.cpp ---------------------------------------------------------------------------

PROMPTS = [
    "Write a short poem about tea.",
    "Explain what a token is in two sentences.",
    "List three colours and one fruit for each.",
]


async def ours(engine: object, prompt: str, max_tokens: int) -> tuple[float, float, int]:
    from tokenrelay.engines import LlamaCppEngine, stream_events

    assert isinstance(engine, LlamaCppEngine)
    engine.llama.reset()  # no KV prefix reuse: TTFT includes the whole prompt
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    messages = [{"role": "user", "content": prompt}]
    events = [e async for e in stream_events(engine, messages, params)]
    final = events[-1]
    assert isinstance(final, Finished)
    timings = final.timings
    assert timings is not None and timings.ttft is not None and timings.total is not None
    tokens = final.usage.completion_tokens
    return timings.ttft, (tokens - 1) / (timings.total - timings.ttft), tokens


def theirs(engine: object, prompt: str, max_tokens: int) -> tuple[float, float, int]:
    from tokenrelay.engines import LlamaCppEngine

    assert isinstance(engine, LlamaCppEngine)
    llama = engine.llama
    llama.reset()
    t0 = time.perf_counter()
    first = None
    chunks = 0
    for chunk in llama.create_chat_completion(
        messages=[{"role": "user", "content": prompt}],
        temperature=0.0,
        max_tokens=max_tokens,
        top_k=0,
        min_p=0.0,
        repeat_penalty=1.0,
        stream=True,
    ):
        if chunk["choices"][0]["delta"].get("content"):  # type: ignore[index,union-attr]
            chunks += 1
            if first is None:
                first = time.perf_counter()
    total = time.perf_counter() - t0
    assert first is not None
    # llama-cpp-python streams about one chunk per token; count its tokens the way it reports usage.
    return first - t0, (chunks - 1) / (total - (first - t0)), chunks


def part_two(repeat: int, max_tokens: int) -> None:
    from tokenrelay.engines import LlamaCppEngine

    engine = LlamaCppEngine.load(n_ctx=1024, on_progress=lambda line: print("  " + line))
    print(
        f"\npart 2: SmolLM2-135M-Instruct Q4_1, greedy, max_tokens={max_tokens}, {repeat} runs x 3 prompts\n"
    )
    asyncio.run(ours(engine, "warm up", 8))
    rows: dict[str, list[tuple[float, float, int]]] = {"tokenrelay": [], "llama-cpp-python": []}
    for _ in range(repeat):
        for prompt in PROMPTS:
            rows["tokenrelay"].append(asyncio.run(ours(engine, prompt, max_tokens)))
            rows["llama-cpp-python"].append(theirs(engine, prompt, max_tokens))
    for name, runs in rows.items():
        ttft = statistics.median(r[0] for r in runs) * 1000
        rate = statistics.median(r[1] for r in runs)
        print(f"  {name:<18} TTFT median {ttft:6.1f} ms   decode {rate:6.1f} tokens/s")
    ours_rate = statistics.median(r[1] for r in rows["tokenrelay"])
    their_rate = statistics.median(r[1] for r in rows["llama-cpp-python"])
    print(f"\n  tokenrelay / llama-cpp-python decode rate: {ours_rate / their_rate:.2f}x")
    asyncio.run(engine.aclose())


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-llama", action="store_true", help="skip part 2 (SmolLM2 on llama.cpp)")
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args(argv)
    part_one(args.repeat)
    if args.no_llama:
        return
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        print("part 2 skipped: llama-cpp-python is not installed")
        return
    part_two(max(1, args.repeat // 2), args.max_tokens)


if __name__ == "__main__":
    main()

"""What one engine step costs inside llama.cpp: graph computes per step, graphs reused, ms per step, TTFT.

In-process, the embedded engine alone (no server, no HTTP): ``LlamaCppEngine`` on SmolLM2-135M-Instruct with
8 sequences. Each scenario runs twice: once with a ``GraphCounter`` (llama.cpp's eval callback counts the
graphs computed, one per ubatch; it slows the steps, so no timing is taken from that run) and once plain, for
the times.

- ``8 chats``: 8 chat requests arrive at once (a shared system prompt, different questions), temperature 0,
  ``--tokens`` each: aggregate tokens/s, TTFT p50, graph computes per step, graphs reused;
- ``staggered``: the same 8 arriving 0.25 s apart and ending at different steps (sequence ids freed and handed
  out again while others run);
- ``multi-turn``: one conversation of ``--turns`` turns, each re-sending the whole history with the reply so
  far, as the chat page and every SDK do: TTFT per turn.

    python benchmarks/engine_steps.py [--tokens 96] [--turns 10]

Not a test: numbers vary with the machine; compare within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from engine_concurrency import FOLLOW_UPS  # the servers' follow-up turns (benchmarks/ is on sys.path)
from tokenrelay.engines._llama_native import GraphCounter, NativeModel
from tokenrelay.engines.base import ChatMessage, SamplingParams
from tokenrelay.engines.llamacpp import LlamaCppEngine, resolve_model_path
from tokenrelay.engines.llamacpp_check import default_threads
from tokenrelay.tokenizers import load_tokenizer

SYSTEM = "You are a helpful assistant. Answer clearly and in detail, in plain English."
QUESTIONS = [
    "Tell me about the history of tea.",
    "How do bridges carry loads?",
    "Why is the sky blue?",
    "Describe the life of honey bees.",
    "How does a compiler work?",
    "Explain the water cycle.",
    "What are volcanoes and plate tectonics?",
    "How do vaccines train the immune system?",
]


def chat(question: str) -> list[ChatMessage]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]


@dataclass
class Run:
    wall: float
    tokens: int
    ttfts: list[float]
    steps: int
    computes: int | None
    reused: int

    def line(self, label: str) -> str:
        per_step = "-" if self.computes is None else f"{self.computes / self.steps:.2f}"
        return (
            f"{label:<22} | {self.tokens / self.wall:7.1f} tok/s | TTFT p50 {statistics.median(self.ttfts) * 1e3:6.0f} ms"
            f" | {self.steps:5d} steps | graphs/step {per_step:>5} | reused {self.reused}"
        )


async def one(
    engine: LlamaCppEngine, prompt: list[ChatMessage], tokens: int, delay: float
) -> tuple[float, int]:
    await asyncio.sleep(delay)
    ids = engine.prompt_ids(prompt)
    sent = time.perf_counter()
    first = 0.0
    count = 0
    async for step in engine.generate(
        prompt, SamplingParams(max_tokens=tokens, temperature=0.0), prompt_ids=ids
    ):
        if not count:
            first = time.perf_counter() - sent
        count += len(step)  # type: ignore[arg-type]
    return first, count


async def concurrent(engine: LlamaCppEngine, native: NativeModel, tokens: int, stagger: float) -> Run:
    await engine.wait_idle()
    counter = native.graph_counter
    computes0 = counter.computes if counter else 0
    steps0, reused0 = engine.steps_computed, native.graphs_reused
    started = time.perf_counter()
    results = await asyncio.gather(
        *(one(engine, chat(q), tokens, i * stagger) for i, q in enumerate(QUESTIONS))
    )
    wall = time.perf_counter() - started
    return Run(
        wall,
        sum(r[1] for r in results),
        [r[0] for r in results],
        engine.steps_computed - steps0,
        None if counter is None else counter.computes - computes0,
        native.graphs_reused - reused0,
    )


async def multi_turn(engine: LlamaCppEngine, turns: int, tokens: int) -> list[tuple[float, int]]:
    """TTFT and prompt length of each turn of one conversation that re-sends its history."""
    messages: list[ChatMessage] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": QUESTIONS[0]},
    ]
    out = []
    for turn in range(turns):
        await engine.wait_idle()
        ids = engine.prompt_ids(messages)
        sent = time.perf_counter()
        first = 0.0
        reply: list[int] = []
        async for step in engine.generate(
            messages, SamplingParams(max_tokens=tokens, temperature=0.0), prompt_ids=ids
        ):
            if not reply:
                first = time.perf_counter() - sent
            reply.extend(step)  # type: ignore[arg-type]
        out.append((first, len(ids)))
        text = engine.tokenizer.decode([t for t in reply if t not in engine.stop_token_ids])
        messages = [
            *messages,
            {"role": "assistant", "content": text},
            {"role": "user", "content": FOLLOW_UPS[turn % len(FOLLOW_UPS)]},
        ]
    return out


async def exactness(engine: LlamaCppEngine, n: int, tokens: int) -> list[tuple[int, int | None]]:
    """``n`` long replies alone, then batched: each reply's length and where batched first differs (None)."""
    params = SamplingParams(max_tokens=tokens, temperature=0.0)
    prompts = [chat(f"Write a very long, detailed essay: {q}") for q in QUESTIONS[:n]]

    async def reply(prompt: list[ChatMessage]) -> list[int]:
        ids = engine.prompt_ids(prompt)
        return [i async for step in engine.generate(prompt, params, prompt_ids=ids) for i in step]  # type: ignore[union-attr]

    alone = [await reply(p) for p in prompts]
    together = await asyncio.gather(*(reply(p) for p in prompts))
    out = []
    for a, b in zip(alone, together, strict=True):
        first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
        if first is None and len(a) != len(b):
            first = min(len(a), len(b))
        out.append((len(a), first))
    return out


async def cache_exactness(
    cached: LlamaCppEngine, scratch: LlamaCppEngine, conversations: int, turns: int, tokens: int
) -> tuple[int, int, list[int]]:
    """``conversations`` chats of ``turns`` turns on both engines, the history re-sent each turn (the cached
    engine's replies): how many turns were compared, how many replies differed, and the prompt length of each
    turn that differed."""
    params = SamplingParams(max_tokens=tokens, temperature=0.0)
    compared, differing, lengths = 0, 0, []
    for c in range(conversations):
        messages: list[ChatMessage] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": QUESTIONS[c % len(QUESTIONS)]},
        ]
        for turn in range(turns):
            ids = cached.prompt_ids(messages)
            a = [i async for s in cached.generate(messages, params, prompt_ids=ids) for i in s]  # type: ignore[union-attr]
            b = [i async for s in scratch.generate(messages, params, prompt_ids=ids) for i in s]  # type: ignore[union-attr]
            compared += 1
            if a != b:
                differing += 1
                lengths.append(len(ids))
            text = cached.tokenizer.decode([t for t in a if t not in cached.stop_token_ids])
            messages = [
                *messages,
                {"role": "assistant", "content": text},
                {"role": "user", "content": FOLLOW_UPS[(turn + c) % len(FOLLOW_UPS)]},
            ]
    return compared, differing, lengths


def load(
    count: bool, threads: int, parallel: int, unified: bool = False
) -> tuple[LlamaCppEngine, NativeModel]:
    path = resolve_model_path("smollm2")
    native = NativeModel.load(
        path,
        n_threads=threads,
        n_parallel=parallel,
        n_ctx_seq=2048,
        graph_counter=GraphCounter() if count else None,
        kv_unified=unified,
    )
    engine = LlamaCppEngine(native, load_tokenizer("smollm2"), model="SmolLM2-135M-Instruct", path=path)
    return engine, native


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--threads", type=int, default=default_threads())
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--unified", action="store_true", help="one KV buffer for all sequences")
    ap.add_argument("--no-count", action="store_true", help="skip the counted run")
    ap.add_argument("--exactness", type=int, default=0, help="this many long replies alone vs batched")
    ap.add_argument("--long-tokens", type=int, default=400)
    ap.add_argument(
        "--cache-exactness", type=int, default=0, help="this many conversations, cached vs from scratch"
    )
    args = ap.parse_args(argv)
    print(
        f"SmolLM2-135M-Instruct, {args.parallel} sequences{' (unified KV)' if args.unified else ''}, "
        f"{args.threads} threads, {args.tokens} tokens a reply"
    )
    if args.cache_exactness:
        cached, _ = load(False, args.threads, 1, args.unified)
        scratch, _ = load(False, args.threads, 1, args.unified)
        scratch.prefix_cache = False
        try:
            compared, differing, lengths = asyncio.run(
                cache_exactness(cached, scratch, args.cache_exactness, args.turns, 64)
            )
            print(f"{differing} of {compared} turns differ cached vs from scratch (prompt tokens: {lengths})")
        finally:
            asyncio.run(cached.aclose())
            asyncio.run(scratch.aclose())
        return
    if args.exactness:
        engine, _ = load(False, args.threads, args.parallel, args.unified)
        try:
            for length, first in asyncio.run(exactness(engine, args.exactness, args.long_tokens)):
                print(
                    f"reply of {length} tokens: batched {'== alone' if first is None else f'differs at {first}'}"
                )
        finally:
            asyncio.run(engine.aclose())
        return
    for count in (False,) if args.no_count else (True, False):
        engine, native = load(count, args.threads, args.parallel, args.unified)
        try:
            label = "counted" if count else "timed"
            asyncio.run(one(engine, chat("Hi"), 4, 0.0))  # warm
            print(asyncio.run(concurrent(engine, native, args.tokens, 0.0)).line(f"8 chats ({label})"))
            print(asyncio.run(concurrent(engine, native, args.tokens, 0.25)).line(f"staggered ({label})"))
            if not count:
                turns = asyncio.run(multi_turn(engine, args.turns, 48))
                print(
                    "multi-turn TTFT ms (prompt tokens): "
                    + ", ".join(f"{t * 1e3:.0f} ({n})" for t, n in turns)
                )
                print(f"turn {len(turns)} / turn 1 = {turns[-1][0] / turns[0][0]:.2f}×")
        finally:
            asyncio.run(engine.aclose())


if __name__ == "__main__":
    main()

"""The embedded engine under concurrent chats: tokenrelay serve vs llama.cpp's own llama-server, one run.

Both serve the same SmolLM2-135M-Instruct GGUF with 8 parallel sequences, one at a time (so they never share
the CPU). For 1, 2, 4 and 8 concurrent streaming chat requests (different prompts, temperature 0, up to 128
tokens each) it reports aggregate decode tokens/s (completion tokens of all streams / wall time from the first
request to the last [DONE]) and TTFT p50/p95 (request sent → first content delta), and prints tokenrelay's
ratios to llama-server. It also times llama-cpp-python's own single-stream loop (``Llama.generate``) on the
same prompt as the 1-stream reference.

llama-server is built once from the llama.cpp sources inside the llama-cpp-python sdist, portable flags, by
``make llama-server`` (about 7 minutes on 2 cores); pass ``--llama-server PATH`` to use another binary.

    python benchmarks/engine_concurrency.py [--streams 1,2,4,8] [--tokens 128] [--rounds 2]

Not a test: numbers vary with the machine; compare within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tokenrelay._sse import SSEParser
from tokenrelay.engines.llamacpp import resolve_model_path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_LLAMA_SERVER = Path.home() / ".cache" / "tokenrelay" / "llama-server" / "llama-server"
TOPICS = [
    "the history of tea",
    "how bridges carry loads",
    "why the sky is blue",
    "the life of honey bees",
    "how a compiler works",
    "the water cycle",
    "volcanoes and plate tectonics",
    "how vaccines train the immune system",
]


def prompts(n: int) -> list[str]:
    return [f"Write a long, detailed essay about {TOPICS[i % len(TOPICS)]}." for i in range(n)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running(argv: list[str], port: int, ready_path: str) -> Iterator[str]:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                raise SystemExit(
                    f"{argv[0]} exited: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}"
                )
            try:
                if httpx.get(url + ready_path, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"{argv[0]} did not start")
            time.sleep(0.25)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


async def one_stream(client: httpx.AsyncClient, url: str, prompt: str, tokens: int) -> tuple[float, int]:
    body = {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    sent = time.perf_counter()
    ttft = float("nan")
    completion = 0
    parser = SSEParser()
    async with client.stream("POST", url + "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for chunk in response.aiter_bytes():
            for event in parser.feed(chunk):
                if event.data == "[DONE]":
                    continue
                data = json.loads(event.data)
                if data.get("usage"):
                    completion = int(data["usage"]["completion_tokens"])
                for choice in data.get("choices", []):
                    if choice.get("delta", {}).get("content") and ttft != ttft:
                        ttft = time.perf_counter() - sent
    return ttft, completion


async def load(url: str, n: int, tokens: int) -> dict[str, float]:
    async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_connections=64)) as client:
        await one_stream(client, url, "Hi", 4)  # warm: model pages in, first-request costs paid
        started = time.perf_counter()
        results = await asyncio.gather(*(one_stream(client, url, p, tokens) for p in prompts(n)))
        wall = time.perf_counter() - started
    ttfts = sorted(r[0] for r in results)
    total = sum(r[1] for r in results)
    return {
        "tok_s": total / wall,
        "ttft_p50": statistics.median(ttfts),
        "ttft_p95": ttfts[min(len(ttfts) - 1, round(0.95 * (len(ttfts) - 1)))],
        "tokens": total,
    }


async def stall(url: str, long_words: int) -> dict[str, float]:
    """A stream is running when a long prompt arrives: how long does the running stream's longest gap get?"""
    arrivals: list[float] = []
    started = asyncio.Event()

    async def running(client: httpx.AsyncClient) -> None:
        body = {
            "messages": [{"role": "user", "content": prompts(1)[0]}],
            "max_tokens": 160,
            "temperature": 0,
            "stream": True,
        }
        parser = SSEParser()
        async with client.stream("POST", url + "/v1/chat/completions", json=body) as response:
            async for chunk in response.aiter_bytes():
                for event in parser.feed(chunk):
                    if event.data != "[DONE]" and '"content"' in event.data:
                        arrivals.append(time.perf_counter())
                        if len(arrivals) == 30:
                            started.set()

    async with httpx.AsyncClient(timeout=300) as client:
        task = asyncio.create_task(running(client))
        await started.wait()
        sent = time.perf_counter()
        long_prompt = {"messages": [{"role": "user", "content": "word " * long_words}], "max_tokens": 1}
        response = await client.post(url + "/v1/chat/completions", json=long_prompt)
        response.raise_for_status()
        answered = time.perf_counter() - sent
        prompt_tokens = response.json()["usage"]["prompt_tokens"]
        await task
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    before = gaps[:28]
    return {
        "median_gap": statistics.median(before),
        "max_gap": max(gaps[28:]),
        "long_prompt_s": answered,
        "prompt_tokens": prompt_tokens,
    }


def llama_cpp_python_alone(model: Path, tokens: int, threads: int) -> float:
    from llama_cpp import Llama

    llama = Llama(
        model_path=str(model), n_ctx=2048, n_threads=threads, n_threads_batch=threads, verbose=False
    )
    text = llama.metadata.get("tokenizer.chat_template", "")
    del text
    messages = [{"role": "user", "content": prompts(1)[0]}]
    rates = []
    for _ in range(2):
        started = time.perf_counter()
        out = llama.create_chat_completion(messages=messages, max_tokens=tokens, temperature=0.0)  # type: ignore[arg-type]
        first_to_last = time.perf_counter() - started
        rates.append(out["usage"]["completion_tokens"] / first_to_last)  # type: ignore[index]
    llama.close()
    return max(rates)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", default="1,2,4,8")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2, help="alternate the two servers this many times")
    ap.add_argument("--llama-server", type=Path, default=DEFAULT_LLAMA_SERVER)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--stall-chunks", default="64,128,256,512", help="prefill chunk sizes for the stall test")
    ap.add_argument(
        "--stall-words", type=int, default=1200, help="words in the long prompt of the stall test"
    )
    args = ap.parse_args()
    levels = [int(x) for x in args.streams.split(",")]
    model = resolve_model_path("smollm2")
    parallel = max(levels)

    tr_port, ls_port = free_port(), free_port()
    servers = {
        "tokenrelay": (
            [
                sys.executable,
                "-m",
                "tokenrelay",
                "serve",
                "--port",
                str(tr_port),
                "--parallel",
                str(parallel),
                "--threads",
                str(args.threads),
                "--log-level",
                "warning",
            ],
            tr_port,
            "/health",
        ),
    }
    if args.llama_server.is_file():
        servers["llama-server"] = (
            [
                str(args.llama_server),
                "-m",
                str(model),
                "--host",
                "127.0.0.1",
                "--port",
                str(ls_port),
                "--parallel",
                str(parallel),
                "-c",
                str(2048 * parallel),
                "-t",
                str(args.threads),
                "-tb",
                str(args.threads),
                "--no-webui",
            ],
            ls_port,
            "/health",
        )
    else:
        print(f"(no llama-server at {args.llama_server}: run `make llama-server`; tokenrelay alone below)")

    results: dict[str, dict[int, list[dict[str, float]]]] = {
        name: {n: [] for n in levels} for name in servers
    }
    for _ in range(args.rounds):
        for name, (argv, port, ready) in servers.items():
            with running(argv, port, ready) as url:
                for n in levels:
                    results[name][n].append(asyncio.run(load(url, n, args.tokens)))
    alone = llama_cpp_python_alone(model, args.tokens, args.threads)

    def best(name: str, n: int) -> dict[str, float]:
        runs = results[name][n]
        return {
            "tok_s": max(r["tok_s"] for r in runs),
            "ttft_p50": min(r["ttft_p50"] for r in runs),
            "ttft_p95": min(r["ttft_p95"] for r in runs),
        }

    print(
        f"\nSmolLM2-135M-Instruct Q4_1, {args.threads} threads, {args.tokens} tokens/stream, best of {args.rounds}"
    )
    print(f"llama-cpp-python alone (Llama.create_chat_completion, 1 stream): {alone:.1f} tok/s\n")
    head = f"{'streams':>7} | {'server':<12} | {'tok/s':>7} | {'TTFT p50':>9} | {'TTFT p95':>9} | ratio tok/s | ratio TTFT p50"
    print(head)
    print("-" * len(head))
    for n in levels:
        tr = best("tokenrelay", n)
        for name in servers:
            b = best(name, n)
            ratio = ratio_ttft = ""
            if name == "tokenrelay" and "llama-server" in servers:
                ls = best("llama-server", n)
                ratio = f"{tr['tok_s'] / ls['tok_s']:.2f}×"
                ratio_ttft = f"{tr['ttft_p50'] / ls['ttft_p50']:.2f}×"
            print(
                f"{n:>7} | {name:<12} | {b['tok_s']:>7.1f} | {b['ttft_p50'] * 1e3:>7.0f}ms | "
                f"{b['ttft_p95'] * 1e3:>7.0f}ms | {ratio:>11} | {ratio_ttft:>14}"
            )
    if 1 in levels:
        print(
            f"\n1 stream: tokenrelay / llama-cpp-python alone = {best('tokenrelay', 1)['tok_s'] / alone:.2f}×"
        )

    print("\nPrefill stall: a stream is running when a long prompt arrives (tokenrelay --prefill-chunk N)")
    print(
        f"{'chunk':>6} | {'prompt':>6} | {'gap p50 before':>14} | {'longest gap during':>18} | long prompt answered"
    )
    for chunk in [int(x) for x in args.stall_chunks.split(",") if x]:
        port = free_port()
        argv = [
            sys.executable, "-m", "tokenrelay", "serve", "--port", str(port), "--parallel", str(parallel),
            "--threads", str(args.threads), "--prefill-chunk", str(chunk), "--log-level", "warning",
        ]  # fmt: skip
        with running(argv, port, "/health") as url:
            runs = [asyncio.run(stall(url, args.stall_words)) for _ in range(args.rounds)]
        r = min(runs, key=lambda x: x["max_gap"])
        print(
            f"{chunk:>6} | {r['prompt_tokens']:>6.0f} | {r['median_gap'] * 1e3:>12.1f}ms | "
            f"{r['max_gap'] * 1e3:>16.1f}ms | {r['long_prompt_s'] * 1e3:.0f} ms"
        )


if __name__ == "__main__":
    main()

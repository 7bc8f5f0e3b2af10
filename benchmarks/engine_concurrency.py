"""The embedded engine against llama.cpp's own llama-server, caches on and off, side by side in one run.

Four servers on the same SmolLM2-135M-Instruct GGUF, 8 parallel sequences, the same threads, run one at a time
(never sharing the CPU), in turn within every round:

- ``tokenrelay``: ``tokenrelay serve`` (prefix cache on, its default);
- ``tokenrelay-nocache``: ``tokenrelay serve --no-prefix-cache``;
- ``llama-server``: its defaults (``cache_prompt`` on, the RAM prompt cache on);
- ``llama-server-nocache``: ``--cache-ram 0`` and ``"cache_prompt": false`` in every request.

Workloads, each with prompts made fresh for every round (a number before the question), so no round finds the
previous one's prompts in a cache:

- ``distinct``: 1 and 8 concurrent streaming chats with different questions (the chat template's own system
  prompt is all they share), temperature 0, up to ``--tokens`` each;
- ``shared``: the same with one long system prompt before each question (an app's instructions);
- ``multi-turn``: one conversation of ``--turns`` turns, each re-sending the whole history with the replies
  received so far, as the chat page and every SDK do: TTFT per turn.

At 1 stream a round sends ``--one-stream-chats`` chats (5) one after another, each after the previous one's
[DONE], with different questions: in ``shared`` the first reads the system prompt and the others find it cached
(with the caches on). Reported per server and workload: aggregate decode tokens/s (completion tokens of all
streams / wall time from the first request to the last [DONE]), TTFT p50/p95 (request sent → first content
delta, over the round's chats), and the prompt
tokens each read: llama-server's ``timings.prompt_n``/``cache_n`` (tokens computed / found in its cache) beside
tokenrelay's ``/metrics`` counters (``tokenrelay_engine_prompt_tokens_read``/``_reused``), so a reader sees
both did the same work. Medians over the rounds, with the spread (min–max), and tokenrelay's ratios to
llama-server with caches on for both and off for both. llama-cpp-python's own single-stream loop
(``Llama.create_chat_completion``) is timed on the same prompt as the 1-stream reference.

``--workloads paired`` (``--pairs N``): tokenrelay and llama-server up at once (caches on for both, then off),
the same load sent to one and then the other, the order alternating, and the per-pair ratios; a slow minute
of the machine then falls on both sides of a pair, where the rounds above may give it to one server alone.
``ttft_parts.py`` says where a one-stream TTFT goes in each server.

``--workloads stall`` adds the prefill stall: one stream is running when a long prompt arrives; the running stream's
longest gap and the time until the long prompt's one-token reply.

llama-server is built once from the llama.cpp sources inside the llama-cpp-python sdist, portable flags, by
``make llama-server``; ``--llama-server PATH`` picks another binary. ``--lock PATH`` holds that lock file
(``flock``) for one server at a time, so a long run leaves gaps for other measurements. ``--variant NAME=ARGS``
adds a tokenrelay server with other options or environment (``'t1=--threads 1'``,
``'spin=ENV:GOMP_SPINCOUNT=10000'``), compared with llama-server (caches on) as well. ``--json`` is rewritten
after every round.

    python benchmarks/engine_concurrency.py [--rounds 3] [--streams 1,8] [--tokens 96] [--turns 10]

Not a test: numbers vary with the machine; compare within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import itertools
import json
import os
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tokenrelay.engines.llamacpp import resolve_model_path
from tokenrelay.wire._sse import SSEParser

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
SYSTEM = (
    "You are the writing assistant of a science magazine for curious readers of all ages. Answer every "
    "question with a clear, friendly and accurate essay: start with a short overview, then explain the main "
    "ideas one by one with concrete examples from everyday life, define every technical word the first time "
    "it appears, avoid jargon, never invent facts or sources, and end with a short summary of what matters."
)
FOLLOW_UPS = [
    "Tell me more.",
    "Can you give an example?",
    "Why is that?",
    "What happened next?",
    "Summarise that in one sentence.",
    "What else should I know?",
    "Is that always true?",
    "How would you explain it to a child?",
    "What is a common mistake here?",
    "Thanks. One more detail, please.",
]
Messages = list[dict[str, str]]


def chats(kind: str, n: int, tag: str) -> list[Messages]:
    """``n`` first messages, fresh for ``tag`` (a round and level): a number before each question."""
    out = []
    for i in range(n):
        question = {
            "role": "user",
            "content": f"({tag}.{i}) Write a long essay about {TOPICS[i % len(TOPICS)]}.",
        }
        out.append([{"role": "system", "content": SYSTEM}, question] if kind == "shared" else [question])
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    name: str
    argv: list[str]
    url: str
    body: dict[str, Any] = field(default_factory=dict)  # added to every request
    tokenrelay: bool = True
    env: dict[str, str] = field(default_factory=dict)  # added to the server's environment


@contextmanager
def running(server: Server) -> Iterator[None]:
    proc = subprocess.Popen(
        server.argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, **server.env}
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode()[-2000:] if proc.stderr else ""
                raise SystemExit(f"{server.argv[0]} exited: {err}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(server.url + "/health", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise SystemExit(f"{server.name} did not start")
            time.sleep(0.25)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


@dataclass
class Reply:
    ttft: float
    completion: int
    text: str
    prompt_n: int = 0  # llama-server: prompt tokens computed
    cache_n: int = 0  # llama-server: prompt tokens found in its cache


def client(**kwargs: Any) -> httpx.AsyncClient:
    # A new connection for every request: both servers close idle keep-alive connections on their own
    # schedule, and a request sent on one being closed fails ("Server disconnected").
    return httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_keepalive_connections=0), **kwargs)


async def one_stream(client: httpx.AsyncClient, server: Server, messages: Messages, tokens: int) -> Reply:
    body = {
        "messages": messages,
        "max_tokens": tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        **server.body,
    }
    sent = time.perf_counter()
    reply = Reply(float("nan"), 0, "")
    parts: list[str] = []
    parser = SSEParser()
    async with client.stream("POST", server.url + "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for chunk in response.aiter_bytes():
            for event in parser.feed(chunk):
                if event.data == "[DONE]":
                    continue
                data = json.loads(event.data)
                if data.get("usage"):
                    reply.completion = int(data["usage"]["completion_tokens"])
                timings = data.get("timings")
                if timings:
                    reply.prompt_n, reply.cache_n = int(timings["prompt_n"]), int(timings.get("cache_n", 0))
                for choice in data.get("choices", []):
                    content = choice.get("delta", {}).get("content")
                    if content:
                        if not parts:
                            reply.ttft = time.perf_counter() - sent
                        parts.append(content)
    reply.text = "".join(parts)
    return reply


async def prompt_counters(client: httpx.AsyncClient, server: Server) -> tuple[int, int]:
    """tokenrelay's prompt tokens read and reused so far (``/metrics``)."""
    if not server.tokenrelay:
        return 0, 0
    values = {}
    for line in (await client.get(server.url + "/metrics")).text.splitlines():
        for name in ("read", "reused"):
            if line.startswith(f"tokenrelay_engine_prompt_tokens_{name}_total"):
                values[name] = int(float(line.rsplit(" ", 1)[1]))
    # A tokenrelay before issue 23 has no such counters: -1, unknown.
    return values.get("read", -1), values.get("reused", -1)


@dataclass
class Load:
    tok_s: float
    ttft_p50: float
    ttft_p95: float
    read: int
    cached: int


async def load(
    server: Server, first_messages: list[Messages], tokens: int, *, one_by_one: bool = False
) -> Load:
    """The chats all at once, or ``one_by_one`` (a single stream, each chat after the previous one's [DONE]):
    tokens/s over the wall time of them all, TTFT percentiles over the chats."""
    async with client() as http:
        read0, reused0 = await prompt_counters(http, server)
        started = time.perf_counter()
        if one_by_one:
            replies = [await one_stream(http, server, m, tokens) for m in first_messages]
        else:
            replies = await asyncio.gather(*(one_stream(http, server, m, tokens) for m in first_messages))
        wall = time.perf_counter() - started
        read1, reused1 = await prompt_counters(http, server)
    ttfts = sorted(r.ttft for r in replies)
    if server.tokenrelay:
        read, cached = read1 - read0, reused1 - reused0
    else:
        read, cached = sum(r.prompt_n for r in replies), sum(r.cache_n for r in replies)
    return Load(
        sum(r.completion for r in replies) / wall,
        statistics.median(ttfts),
        ttfts[min(len(ttfts) - 1, round(0.95 * (len(ttfts) - 1)))],
        read,
        cached,
    )


async def multi_turn(server: Server, turns: int, tokens: int, tag: str) -> list[tuple[float, int, int]]:
    """TTFT, prompt tokens read and found cached, per turn of one conversation that re-sends its history."""
    messages: Messages = [{"role": "user", "content": f"({tag}) Tell me about {TOPICS[0]}."}]
    out = []
    async with client() as http:
        for turn in range(turns):
            read0, reused0 = await prompt_counters(http, server)
            reply = await one_stream(http, server, messages, tokens)
            read1, reused1 = await prompt_counters(http, server)
            if server.tokenrelay:
                out.append((reply.ttft, read1 - read0, reused1 - reused0))
            else:
                out.append((reply.ttft, reply.prompt_n, reply.cache_n))
            messages = [
                *messages,
                {"role": "assistant", "content": reply.text},
                {"role": "user", "content": FOLLOW_UPS[turn % len(FOLLOW_UPS)]},
            ]
    return out


async def warm(server: Server) -> None:
    async with client() as http:
        await one_stream(http, server, [{"role": "user", "content": "Hi"}], 4)


async def stall(server: Server, long_words: int) -> dict[str, float]:
    """A stream is running when a long prompt arrives: how long does the running stream's longest gap get?"""
    arrivals: list[float] = []
    started = asyncio.Event()

    async def runner(http: httpx.AsyncClient) -> None:
        body = {
            "messages": chats("distinct", 1, "stall")[0],
            "max_tokens": 160,
            "temperature": 0,
            "stream": True,
        }
        parser = SSEParser()
        async with http.stream(
            "POST", server.url + "/v1/chat/completions", json={**body, **server.body}
        ) as r:
            async for chunk in r.aiter_bytes():
                for event in parser.feed(chunk):
                    if event.data != "[DONE]" and '"content"' in event.data:
                        arrivals.append(time.perf_counter())
                        if len(arrivals) == 30:
                            started.set()

    async with client() as http:
        task = asyncio.create_task(runner(http))
        await started.wait()
        sent = time.perf_counter()
        long_prompt = {"messages": [{"role": "user", "content": "word " * long_words}], "max_tokens": 1}
        response = await http.post(server.url + "/v1/chat/completions", json={**long_prompt, **server.body})
        response.raise_for_status()
        answered = time.perf_counter() - sent
        await task
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    return {
        "median_gap": statistics.median(gaps[:28]),
        "max_gap": max(gaps[28:]),
        "long_prompt_s": answered,
        "prompt_tokens": response.json()["usage"]["prompt_tokens"],
    }


def paired(
    a: Server, b: Server, kinds: Sequence[str], levels: Sequence[int], pairs: int, tokens: int
) -> dict[tuple[str, int], list[tuple[Load, Load]]]:
    """Both servers up at once (the one not measured sits idle: neither uses CPU between requests), the same
    load sent to one then the other, ``pairs`` times per workload and level, the order alternating: a slow
    minute of the machine then falls on both sides of a pair. Returns (a's, b's) per pair."""
    out: dict[tuple[str, int], list[tuple[Load, Load]]] = {}
    with running(a), running(b):
        asyncio.run(warm(a))
        asyncio.run(warm(b))
        for kind, n in itertools.product(kinds, levels):
            for i in range(pairs):
                messages = chats(kind, n, f"pair {i}.{n}")  # the same prompts for both
                first, second = (a, b) if i % 2 == 0 else (b, a)
                done = {s.name: asyncio.run(load(s, messages, tokens)) for s in (first, second)}
                out.setdefault((kind, n), []).append((done[a.name], done[b.name]))
            runs = out[kind, n]
            print(
                f"  {a.name} / {b.name} {kind} {n}: tok/s "
                f"{statistics.median(x.tok_s / y.tok_s for x, y in runs):.2f}×, TTFT p50 "
                f"{statistics.median(x.ttft_p50 / y.ttft_p50 for x, y in runs):.2f}× (medians of {pairs} pairs)",
                flush=True,
            )
    return out


def llama_cpp_python_alone(model: Path, tokens: int, threads: int) -> float:
    from llama_cpp import Llama

    llama = Llama(
        model_path=str(model), n_ctx=2048, n_threads=threads, n_threads_batch=threads, verbose=False
    )
    rates = []
    for attempt in range(2):
        messages = chats("distinct", 1, f"alone{attempt}")[0]
        started = time.perf_counter()
        out = llama.create_chat_completion(messages=messages, max_tokens=tokens, temperature=0.0)  # type: ignore[arg-type]
        rates.append(out["usage"]["completion_tokens"] / (time.perf_counter() - started))  # type: ignore[index]
    llama.close()
    return max(rates)


@contextmanager
def holding(lock: Path | None) -> Iterator[None]:
    if lock is None:
        yield
        return
    with lock.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def servers(args: argparse.Namespace, model: Path) -> list[Server]:
    tr = [
        sys.executable,
        "-m",
        "tokenrelay",
        "serve",
        "--parallel",
        str(args.parallel),
        "--threads",
        str(args.threads),
    ]
    tr += ["--log-level", "warning"]
    out = []
    variants: list[tuple[str, list[str], dict[str, str]]] = [
        ("tokenrelay", [], {}),
        ("tokenrelay-nocache", ["--no-prefix-cache"], {}),
    ]
    for spec in args.variant:  # NAME=ARGS: ENV:KEY=VALUE words set the server's environment
        name, _, rest = spec.partition("=")
        words = shlex.split(rest)
        env = dict(w[4:].split("=", 1) for w in words if w.startswith("ENV:"))
        variants.append((name, [w for w in words if not w.startswith("ENV:")], env))
    for name, extra, env in variants:
        port = free_port()
        argv = [*tr, "--port", str(port), *extra]
        if "--threads" in extra:  # the variant's own thread count replaces the shared one
            at = argv.index("--threads")
            del argv[at : at + 2]
        out.append(Server(name, argv, f"http://127.0.0.1:{port}", env=env))
    if args.llama_server.is_file():
        for name, extra, body in (
            ("llama-server", [], {}),
            ("llama-server-nocache", ["--cache-ram", "0"], {"cache_prompt": False}),
        ):
            port = free_port()
            argv = [str(args.llama_server), "-m", str(model), "--host", "127.0.0.1", "--port", str(port)]
            argv += [
                "--parallel",
                str(args.parallel),
                "-c",
                str(2048 * args.parallel),
                "-t",
                str(args.threads),
            ]
            argv += ["-tb", str(args.threads), "--no-webui", *extra]
            out.append(Server(name, argv, f"http://127.0.0.1:{port}", body, tokenrelay=False))
    else:
        print(f"(no llama-server at {args.llama_server}: run `make llama-server`; tokenrelay alone below)")
    return out


def dump(
    path: Path,
    loads: dict[tuple[str, str, int], list[Load]],
    turns: dict[str, list[list[tuple[float, int, int]]]],
    stalls: dict[str, list[dict[str, float]]],
    alone: list[float],
) -> None:
    path.write_text(
        json.dumps(
            {
                "loads": {f"{k[0]}|{k[1]}|{k[2]}": [vars(r) for r in v] for k, v in loads.items()},
                "turns": turns,
                "stalls": stalls,
                "alone": alone,
            },
            indent=1,
        )
    )


def spread(values: list[float], scale: float = 1.0, fmt: str = ".0f") -> str:
    """The median, and min–max when there are several."""
    med = statistics.median(values) * scale
    if len(values) < 2:
        return f"{med:{fmt}}"
    return f"{med:{fmt}} ({min(values) * scale:{fmt}}–{max(values) * scale:{fmt}})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", default="1,8")
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--turn-tokens", type=int, default=64, help="max_tokens of each multi-turn reply")
    ap.add_argument("--rounds", type=int, default=3, help="every server runs every workload once a round")
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument(
        "--one-stream-chats",
        type=int,
        default=5,
        help="chats a round at 1 stream, one after another (TTFT p50 over them)",
    )
    ap.add_argument("--llama-server", type=Path, default=DEFAULT_LLAMA_SERVER)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--only", default="", help="comma-separated server names (default: all four)")
    ap.add_argument(
        "--workloads",
        default="load,turns",
        help="any of load (1 and 8 streams), turns (multi-turn), stall, paired (tokenrelay and llama-server "
        "up together, loads alternating between them)",
    )
    ap.add_argument(
        "--pairs", type=int, default=10, help="paired: loads sent to each side, per workload and level"
    )
    ap.add_argument("--stall-words", type=int, default=1200)
    ap.add_argument("--lock", type=Path, default=None, help="flock this file during each round")
    ap.add_argument("--json", type=Path, default=None, help="write every measurement here (after each round)")
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        help="another tokenrelay server, NAME=ARGS (ENV:KEY=VALUE words set its environment), e.g. "
        "'t1=--threads 1' or 'passive=ENV:OMP_WAIT_POLICY=PASSIVE'; compared with llama-server too",
    )
    args = ap.parse_args()
    # A SIGTERM ends the run as Ctrl-C does: the running server is stopped (the finally blocks run).
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(1))
    workloads = set(args.workloads.split(","))
    levels = [int(x) for x in args.streams.split(",")]
    model = resolve_model_path("smollm2")
    fleet = [s for s in servers(args, model) if not args.only or s.name in args.only.split(",")]
    kinds = ("distinct", "shared")
    loads: dict[tuple[str, str, int], list[Load]] = {}
    turns: dict[str, list[list[tuple[float, int, int]]]] = {s.name: [] for s in fleet}
    stalls: dict[str, list[dict[str, float]]] = {s.name: [] for s in fleet}
    alone: list[float] = []
    for rnd in range(args.rounds if workloads & {"load", "turns", "stall"} else 0):
        # The servers' order turns every round, so none always runs first or last. The lock is held for one
        # server at a time, so a long run leaves gaps for other measurements.
        for server in fleet[rnd % len(fleet) :] + fleet[: rnd % len(fleet)]:
            with holding(args.lock), running(server):
                began = time.perf_counter()
                asyncio.run(warm(server))
                for kind, n in itertools.product(kinds, levels) if "load" in workloads else ():
                    # One stream: --one-stream-chats chats one after another (one TTFT a round is too noisy).
                    messages = chats(kind, args.one_stream_chats if n == 1 else n, f"{rnd}.{n}")
                    result = asyncio.run(load(server, messages, args.tokens, one_by_one=n == 1))
                    loads.setdefault((server.name, kind, n), []).append(result)
                    print(
                        f"  {server.name} {kind} {n}: {result.tok_s:.1f} tok/s, "
                        f"TTFT p50 {result.ttft_p50 * 1e3:.0f} ms",
                        flush=True,
                    )
                if "turns" in workloads:
                    turns[server.name].append(
                        asyncio.run(multi_turn(server, args.turns, args.turn_tokens, f"turns {rnd}"))
                    )
                    print(
                        f"  {server.name} turns: "
                        + ", ".join(f"{t[0] * 1e3:.0f}" for t in turns[server.name][-1]),
                        flush=True,
                    )
                if "stall" in workloads:
                    stalls[server.name].append(asyncio.run(stall(server, args.stall_words)))
                print(f"  ({server.name}: {time.perf_counter() - began:.0f} s)", flush=True)
        if 1 in levels and "load" in workloads:
            with holding(args.lock):
                alone.append(llama_cpp_python_alone(model, args.tokens, args.threads))
        print(f"round {rnd + 1}/{args.rounds} done", flush=True)
        if args.json is not None:
            dump(args.json, loads, turns, stalls, alone)

    pairs_out: dict[str, dict[tuple[str, int], list[tuple[Load, Load]]]] = {}
    if "paired" in workloads:
        by_name = {s.name: s for s in fleet}
        for tr, ls in (("tokenrelay", "llama-server"), ("tokenrelay-nocache", "llama-server-nocache")):
            if tr in by_name and ls in by_name:
                with holding(args.lock):
                    pairs_out[tr] = paired(by_name[tr], by_name[ls], kinds, levels, args.pairs, args.tokens)
        if args.json is not None:
            args.json.with_suffix(".paired.json").write_text(
                json.dumps(
                    {
                        f"{tr} {kind} {n}": [[x.__dict__, y.__dict__] for x, y in both]
                        for tr, per in pairs_out.items()
                        for (kind, n), both in per.items()
                    },
                    indent=1,
                )
            )
    if pairs_out:
        print(f"\nPaired (both up, alternating; {args.pairs} pairs each): tokenrelay / llama-server")
        for tr, per in pairs_out.items():
            for (kind, n), both in per.items():
                pair_rate = [x.tok_s / y.tok_s for x, y in both]
                pair_ttft = [x.ttft_p50 / y.ttft_p50 for x, y in both]
                print(
                    f"  {tr:<19} {kind:<9} {n} streams: tok/s {spread(pair_rate, fmt='.2f')}×, faster in "
                    f"{sum(r > 1 for r in pair_rate)}/{len(both)}; TTFT p50 {spread(pair_ttft, fmt='.2f')}×, lower in "
                    f"{sum(t < 1 for t in pair_ttft)}/{len(both)}"
                )
    if not workloads & {"load", "turns", "stall"}:
        return
    print(
        f"\nSmolLM2-135M-Instruct Q4_1, {args.threads} threads, --parallel {args.parallel}, {args.tokens} tokens a "
        f"stream, medians of {args.rounds} rounds (min–max)"
    )
    head = f"{'workload':<9} | {'streams':>7} | {'server':<20} | {'tok/s':>17} | {'TTFT p50 ms':>19} | {'TTFT p95 ms':>11} | prompt read / cached"
    print(head)
    print("-" * len(head))
    for kind, n in itertools.product(kinds, levels) if "load" in workloads else ():
        for server in fleet:
            runs = loads[server.name, kind, n]
            print(
                f"{kind:<9} | {n:>7} | {server.name:<20} | {spread([r.tok_s for r in runs], fmt='.1f'):>17} | "
                f"{spread([r.ttft_p50 for r in runs], 1e3):>19} | {spread([r.ttft_p95 for r in runs], 1e3):>11} | "
                f"{statistics.median(r.read for r in runs):.0f} / {statistics.median(r.cached for r in runs):.0f}"
            )
    names = {s.name for s in fleet}
    print("\nRatios tokenrelay / llama-server (medians; ≥ 1.0× tok/s and ≤ 1.0× TTFT are the targets):")
    variants = [s.name for s in fleet if s.tokenrelay and s.name not in ("tokenrelay", "tokenrelay-nocache")]
    pairs = [
        ("tokenrelay", "llama-server", "caches on"),
        ("tokenrelay-nocache", "llama-server-nocache", "caches off"),
        *((v, "llama-server", v) for v in variants),
    ]
    for tr, ls, label in pairs:
        if tr not in names or ls not in names or "load" not in workloads:
            continue
        for kind, n in itertools.product(kinds, levels):
            a, b = loads[tr, kind, n], loads[ls, kind, n]
            rate = statistics.median(r.tok_s for r in a) / statistics.median(r.tok_s for r in b)
            ttft = statistics.median(r.ttft_p50 for r in a) / statistics.median(r.ttft_p50 for r in b)
            print(f"  {label:<10} {kind:<9} {n} streams: tok/s {rate:.2f}×, TTFT p50 {ttft:.2f}×")
    if alone:
        print(
            f"\nllama-cpp-python alone (Llama.create_chat_completion, 1 stream): {spread(alone, fmt='.1f')} tok/s"
        )
        for name in ("tokenrelay", "tokenrelay-nocache", *variants):
            if (name, "distinct", 1) in loads:
                rate = statistics.median(r.tok_s for r in loads[name, "distinct", 1])
                print(f"  {name} 1 stream / llama-cpp-python alone = {rate / statistics.median(alone):.2f}×")
    if "turns" in workloads:
        print(
            f"\nMulti-turn: one conversation of {args.turns} turns re-sending its history, TTFT per turn (ms, medians)"
        )
        for server in fleet:
            per_turn = [statistics.median(r[t][0] for r in turns[server.name]) for t in range(args.turns)]
            read = [statistics.median(r[t][1] for r in turns[server.name]) for t in range(args.turns)]
            cached = [statistics.median(r[t][2] for r in turns[server.name]) for t in range(args.turns)]
            print(f"  {server.name:<20} " + ", ".join(f"{t * 1e3:.0f}" for t in per_turn))
            print(
                f"  {'':<20} read/cached "
                + ", ".join(f"{a:.0f}/{b:.0f}" for a, b in zip(read, cached, strict=True))
            )
            print(f"  {'':<20} turn {args.turns} / turn 1 = {per_turn[-1] / per_turn[0]:.2f}×")
        for tr, ls, _label in pairs:
            if tr in names and ls in names:
                last_tr = statistics.median(r[-1][0] for r in turns[tr])
                last_ls = statistics.median(r[-1][0] for r in turns[ls])
                print(f"  turn {args.turns}: {tr} / {ls} = {last_tr / last_ls:.2f}×")
    if "stall" in workloads:
        print(f"\nPrefill stall: a stream is running when a {args.stall_words}-word prompt arrives (medians)")
        for server in fleet:
            gaps = stalls[server.name]
            print(
                f"  {server.name:<20} gap before {spread([g['median_gap'] for g in gaps], 1e3, '.1f')} ms, longest "
                f"gap while it is read {spread([g['max_gap'] for g in gaps], 1e3)} ms, long prompt "
                f"({gaps[0]['prompt_tokens']:.0f} tokens) answered in {spread([g['long_prompt_s'] for g in gaps], 1e3)} ms"
            )


if __name__ == "__main__":
    main()

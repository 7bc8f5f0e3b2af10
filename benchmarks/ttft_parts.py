"""Where a one-stream TTFT goes: tokenrelay serve (timed inside) beside llama-server (its own timings).

Both servers run the embedded SmolLM2 GGUF with the same threads, one request at a time, alternating between them,
each a fresh question after the chat template (cached by both). For tokenrelay the server runs in a child process
with its pieces wrapped to record ``time.perf_counter`` marks (the client's clock too, on Linux): the request's
arrival at the app, the intake (parse, chat template, tokenize), the detokenizer primed, the request handed to
the engine's worker, the prompt's ``llama_decode`` (start, end) and the first content frame handed to the server.
For llama-server its stream's ``timings`` say how long the prompt took (``prompt_ms``: from the slot starting
on it to the first token sampled); the rest of its TTFT is everything else (HTTP, tokenizing, queues, SSE).

    python benchmarks/ttft_parts.py [--requests 10] [--llama-server PATH]

A measurement aid, not a test: the wrapping costs microseconds; compare the parts, not the last digit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))

import engine_concurrency as ec  # the servers and chats of the engine benchmark
from tokenrelay.engines.llamacpp import resolve_model_path

MARKS = ("intake", "intake_done", "detokenizer", "detokenizer_done", "handed", "decode", "decoded", "sent")


def serve_instrumented(port: int, threads: int, marks_file: Path) -> None:
    """tokenrelay serve with its pieces wrapped; one JSON line of marks per chat request to ``marks_file``."""
    import tokenrelay.engines.base as base
    import tokenrelay.server.run as run
    from tokenrelay.engines.llamacpp import LlamaCppEngine
    from tokenrelay.server.intake import Intake

    engine = LlamaCppEngine.load("smollm2", n_threads=threads, n_parallel=8)
    marks: dict[str, float] = {}

    def mark(name: str) -> None:
        marks.setdefault(name, time.perf_counter())

    def wrap(fn: Any, before: str, after: str) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            mark(before)
            out = fn(*args, **kwargs)
            mark(after)
            return out

        return wrapped

    native = engine._native
    native.decode = wrap(native.decode, "decode", "decoded")  # type: ignore[method-assign]
    base.TextStream = wrap(base.TextStream, "detokenizer", "detokenizer_done")  # type: ignore[attr-defined]
    Intake._prepare = wrap(Intake._prepare, "intake", "intake_done")  # type: ignore[method-assign]
    inbox = engine._inbox

    class Inbox:  # the worker's queue, marking when a request is put in it
        def put(self, item: object) -> None:
            mark("handed")
            inbox.put(item)

        def get(self, block: bool = True) -> object:
            return inbox.get(block=block)

    engine._inbox = Inbox()  # type: ignore[assignment]
    create_app = run.create_app  # type: ignore[attr-defined]

    def instrumented_app(*args: Any, **kwargs: Any) -> Any:
        app = create_app(*args, **kwargs)

        async def asgi(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http" or scope["path"] != "/v1/chat/completions":
                return await app(scope, receive, send)
            marks.clear()
            marks["arrived"] = time.perf_counter()

            async def sending(message: Any) -> None:
                body = message.get("body", b"")
                if b'"content":"' in body and b'"content":""' not in body:
                    mark("sent")
                if message["type"] == "http.response.body" and not message.get("more_body", False):
                    with marks_file.open("a") as out:
                        out.write(json.dumps(marks) + "\n")
                await send(message)

            return await app(scope, receive, sending)

        return asgi

    run.create_app = instrumented_app  # type: ignore[attr-defined]
    run.serve(engine, port=port, log_level="warning")


async def ask(
    http: httpx.AsyncClient, url: str, messages: ec.Messages
) -> tuple[float, float, dict[str, Any]]:
    """One streamed chat (4 tokens): when it was sent, its TTFT, and llama-server's timings if any."""
    body = {"messages": messages, "max_tokens": 4, "temperature": 0, "stream": True}
    timings: dict[str, Any] = {}
    sent = time.perf_counter()
    ttft = float("nan")
    async with http.stream("POST", url + "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            data = json.loads(line[6:])
            timings = data.get("timings") or timings
            for choice in data.get("choices", []):
                if choice.get("delta", {}).get("content") and ttft != ttft:
                    ttft = time.perf_counter() - sent
    return sent, ttft, timings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--llama-server", type=Path, default=ec.DEFAULT_LLAMA_SERVER)
    ap.add_argument("--serve", type=int, default=0, help=argparse.SUPPRESS)  # the instrumented child's port
    ap.add_argument("--marks", type=Path, default=None, help=argparse.SUPPRESS)  # where the child writes
    args = ap.parse_args()
    if args.serve:
        serve_instrumented(args.serve, args.threads, args.marks)
        return
    model = resolve_model_path("smollm2")
    # llama-server as engine_concurrency starts it (its defaults: caches on), and this script as tokenrelay.
    fleet = ec.servers(argparse.Namespace(**vars(args), parallel=8, variant=[]), model)
    ls = next(s for s in fleet if s.name == "llama-server")
    rows: dict[str, list[dict[str, float]]] = {"tokenrelay": [], "llama-server": []}
    with tempfile.TemporaryDirectory() as tmp:
        marks_file = Path(tmp) / "marks.jsonl"
        port = ec.free_port()
        argv = [sys.executable, __file__, "--serve", str(port), "--marks", str(marks_file)]
        tr = ec.Server("tokenrelay", [*argv, "--threads", str(args.threads)], f"http://127.0.0.1:{port}")

        async def drive() -> None:
            async with ec.client() as http:
                for server in (tr, ls):
                    await ask(http, server.url, [{"role": "user", "content": "Hi"}])
                for i, messages in enumerate(
                    ec.chats("distinct", 2 * args.requests, f"parts {time.time():.0f}")
                ):
                    server = (tr, ls)[i % 2]
                    sent, ttft, timings = await ask(http, server.url, messages)
                    row = {"sent": sent, "ttft": ttft * 1e3}
                    if timings:
                        row["prompt"] = float(timings["prompt_ms"])
                    rows[server.name].append(row)

        with ec.running(tr), ec.running(ls):
            asyncio.run(drive())
        lines = [json.loads(line) for line in marks_file.read_text().splitlines()]
    measured = lines[1:]  # the first is the warm-up
    parts: dict[str, list[float]] = {}
    for m, row in zip(measured, rows["tokenrelay"], strict=False):
        if not all(k in m for k in ("arrived", *MARKS)):
            continue
        ms = {k: (v - m["arrived"]) * 1e3 for k, v in m.items()}
        for name, value in (
            ("client sent → server app", (m["arrived"] - row["sent"]) * 1e3),
            ("intake (parse, chat template, tokenize)", ms["intake_done"] - ms["intake"]),
            ("detokenizer primed", ms["detokenizer_done"] - ms["detokenizer"]),
            ("arrived → handed to the worker", ms["handed"]),
            ("handed → llama_decode starts", ms["decode"] - ms["handed"]),
            ("prompt's llama_decode", ms["decoded"] - ms["decode"]),
            ("decode end → first content frame sent", ms["sent"] - ms["decoded"]),
            ("TTFT (client)", row["ttft"]),
        ):
            parts.setdefault(name, []).append(value)
    print(f"\ntokenrelay, {len(parts.get('TTFT (client)', []))} requests (ms: median, min–max)")
    for name, values in parts.items():
        print(f"  {name:<42} {ec.spread(values, fmt='.1f')}")
    own = [row["ttft"] - row["prompt"] for row in rows["llama-server"] if "prompt" in row]
    print(f"\nllama-server, {len(own)} requests (ms: median, min–max)")
    print(
        f"  {'prompt_ms (its prompt, to the first token)':<42} {ec.spread([r['prompt'] for r in rows['llama-server']], fmt='.1f')}"
    )
    print(f"  {'TTFT − prompt_ms (everything else)':<42} {ec.spread(own, fmt='.1f')}")
    print(f"  {'TTFT (client)':<42} {ec.spread([r['ttft'] for r in rows['llama-server']], fmt='.1f')}")


if __name__ == "__main__":
    main()

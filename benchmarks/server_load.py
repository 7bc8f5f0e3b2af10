"""Load: N concurrent streaming clients against tokenrelay and a naive baseline, in one run.

Each server runs in its own process (uvicorn, one worker, the replay engine pacing the multilingual corpus at
20 tokens/s per stream). The load generator is a third process speaking raw HTTP/1.1 over asyncio sockets
(so the client is not the bottleneck), one connection per stream. For each N it reports:

* sustained: streams that received their whole reply ([DONE]) — a stream that errors or is cut does not count;
* TTFT p50/p99: request sent → first content frame;
* jitter p99 (all frames, and "steady": frames after the first 2 s, once every client has connected):
  |actual − expected gap| between consecutive content frames. The expected gap is 50 ms times the
  number of tokens between the frames: tokenrelay sends no frame for a token that ends inside a character,
  so the benchmark replays the same ids through a ``Detokenizer`` to know which tokens produce frames; the
  baseline sends a frame for every token;
* server CPU per token (µs) and RSS (MB), read from /proc for the server process.

The baseline is what a naive FastAPI app does: ``StreamingResponse`` over a generator that decodes each token
on its own (``tokenizer.decode([id])``) and yields ``f"data: {json}\\n\\n"``.

    python benchmarks/server_load.py [--streams 100,250,500,1000] [--tokens 120]

Not a test: numbers vary with the machine; compare the two servers within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RATE = 20.0
GAP = 1.0 / RATE
RAMP = 2.0  # seconds: clients connect over the first second; frames after this are steady streaming

SERVER_CODE = r"""
import sys, json, asyncio
sys.path.insert(0, {tests!r})
import uvicorn
from tiny_tokenizers import corpus_text
from tokenrelay import load_tokenizer
from tokenrelay.engines import ReplayEngine
from tokenrelay.server import ServerConfig, create_app

kind, port, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tok = load_tokenizer("smollm2")
text = tok.decode((tok.encode(corpus_text()) * 3)[:tokens])
if kind == "tokenrelay":
    engine = ReplayEngine(tok, text, rate={rate})
    app = create_app(engine, ServerConfig(max_active=10000, max_queued=10000, keepalive_interval=15))
else:
    from fastapi import FastAPI
    from fastapi.responses import StreamingResponse
    app = FastAPI()
    ids = tok.encode(text)

    @app.post("/v1/chat/completions")
    async def chat():
        async def gen():
            for i in ids:
                await asyncio.sleep(1 / {rate})
                chunk = {{"choices": [{{"index": 0, "delta": {{"content": tok.decode([i])}}, "finish_reason": None}}]}}
                yield f"data: {{json.dumps(chunk)}}\n\n"
            yield "data: [DONE]\n\n"
        return StreamingResponse(gen(), media_type="text/event-stream")

uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", access_log=False, backlog=4096)
"""


@dataclass
class Stream:
    sent: float = 0.0
    frames: list[float] = field(default_factory=list)
    done: bool = False
    error: bool = False


class Client(asyncio.Protocol):
    def __init__(self, stream: Stream, request: bytes, closed: asyncio.Future[None]) -> None:
        self.s = stream
        self.request = request
        self.closed = closed
        self.buf = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.s.sent = time.monotonic()
        transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        self.buf += data
        # Count complete content frames (a frame whose data holds "content"); [DONE] ends the stream.
        while True:
            end = self.buf.find(b"\n\n")
            if end < 0:
                break
            frame, self.buf = self.buf[:end], self.buf[end + 2 :]
            if b'"content"' in frame and b'"role"' not in frame:
                self.s.frames.append(now)
            elif b"[DONE]" in frame:
                self.s.done = True

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


async def run_load(port: int, n: int, tokens: int) -> list[Stream]:
    loop = asyncio.get_running_loop()
    body = json.dumps(
        {
            "model": "replay",
            "stream": True,
            "max_tokens": tokens + 10,
            "messages": [{"role": "user", "content": "go"}],
        }
    ).encode()
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body
    streams = [Stream() for _ in range(n)]

    async def one(s: Stream, delay: float) -> None:
        await asyncio.sleep(delay)
        closed: asyncio.Future[None] = loop.create_future()
        try:
            await loop.create_connection(lambda: Client(s, request, closed), "127.0.0.1", port)
            await asyncio.wait_for(closed, timeout=tokens / RATE * 3 + 30)
        except (OSError, asyncio.TimeoutError):
            s.error = True

    # Ramp up over one second so connects do not all land in the same millisecond.
    await asyncio.gather(*(one(s, i / n) for i, s in enumerate(streams)))
    return streams


def run_client(port: int, n: int, tokens: int) -> list[Stream]:
    """The load generator on uvloop when it is installed (uvicorn[standard] brings it): the client shares the
    machine's two cores with the server, so the less it costs, the more of the measurement is the server."""
    try:
        import uvloop

        return uvloop.run(run_load(port, n, tokens))
    except ImportError:
        return asyncio.run(run_load(port, n, tokens))


def proc_stats(pid: int) -> tuple[float, float]:
    """(CPU seconds, RSS MB) of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    rss = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
    return cpu, rss


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(kind: str, tokens: int) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    code = SERVER_CODE.format(tests=str(ROOT / "tests"), rate=RATE)
    proc = subprocess.Popen([sys.executable, "-c", code, kind, str(port), str(tokens)])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"{kind} server did not start")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q / 100 * len(values)))]


def tokenrelay_frame_steps(tokens: int) -> list[int]:
    """For each content frame tokenrelay will send, the index of the token that completed it."""
    sys.path.insert(0, str(ROOT / "tests"))
    from tiny_tokenizers import corpus_text
    from tokenrelay import Detokenizer, load_tokenizer

    tok = load_tokenizer("smollm2")
    ids = tok.encode(tok.decode((tok.encode(corpus_text()) * 3)[:tokens]))  # what the server's replay sends
    detok = Detokenizer(tok)
    return [k for k, i in enumerate(ids) if detok.feed(i)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", default="100,250,500,1000", help="comma-separated stream counts")
    parser.add_argument("--tokens", type=int, default=120, help="tokens per reply (at 20/s: 6 s)")
    args = parser.parse_args()
    counts = [int(x) for x in args.streams.split(",")]
    frame_steps = {"tokenrelay": tokenrelay_frame_steps(args.tokens), "baseline": list(range(args.tokens))}
    print(
        f"{'server':<11} {'streams':>7} {'sustained':>9} {'ttft p50':>9} {'ttft p99':>9} "
        f"{'jitter p99':>10} {'steady p99':>10} {'cpu µs/tok':>10} {'rss MB':>7}"
    )
    for n in counts:
        for kind in ("tokenrelay", "baseline"):
            proc, port = start_server(kind, args.tokens)
            try:
                cpu0, _ = proc_stats(proc.pid)
                streams = run_client(port, n, args.tokens)
                cpu1, rss = proc_stats(proc.pid)
            finally:
                proc.terminate()
                proc.wait(timeout=10)
            ok = [s for s in streams if s.done and not s.error]
            ttfts = [s.frames[0] - s.sent for s in ok if s.frames]
            steps = frame_steps[kind]
            # Split by when the frame arrived: during the ramp-up (the first RAMP seconds, while n connections
            # are being opened) or after it (steady streaming).
            start = min((s.sent for s in ok), default=0.0)
            jitter: list[float] = []
            steady: list[float] = []
            for s in ok:
                for j in range(1, min(len(s.frames), len(steps))):
                    value = abs((s.frames[j] - s.frames[j - 1]) - (steps[j] - steps[j - 1]) * GAP)
                    jitter.append(value)
                    if s.frames[j] - start >= RAMP:
                        steady.append(value)
            frames = sum(len(s.frames) for s in streams)
            cpu_tok = (cpu1 - cpu0) / frames * 1e6 if frames else float("nan")
            print(
                f"{kind:<11} {n:>7} {len(ok):>9} {pct(ttfts, 50) * 1000:>7.1f}ms {pct(ttfts, 99) * 1000:>7.1f}ms "
                f"{pct(jitter, 99) * 1000:>8.1f}ms {pct(steady, 99) * 1000:>8.1f}ms {cpu_tok:>10.1f} {rss:>7.0f}"
            )
            sys.stdout.flush()
    print(
        "\njitter = |gap − tokens between frames × 50 ms| at the client; steady = frames after the first "
        f"{RAMP:.0f} s (the connection ramp-up); sustained = streams that got [DONE]."
    )


if __name__ == "__main__":
    main()

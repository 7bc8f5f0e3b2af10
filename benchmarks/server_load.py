"""Load: N concurrent streaming clients against tokenrelay and two baselines, in one run; and CPU per request.

Each server runs in its own process (uvicorn, one worker, the same real tokenizer's ids for the multilingual
corpus paced at 20 tokens/s per stream). The load generator is another process speaking raw HTTP/1.1 over
asyncio sockets (so the client is not the bottleneck), one connection per stream, the N connections opened
over the first second. For each N it reports:

* sustained: streams that received their whole reply ([DONE]) — a stream that errors or is cut does not count;
* TTFT p50/p99: request sent → first content frame;
* jitter p99 (all frames, and "steady": frames after the first 2 s, once every client has connected):
  |actual − expected gap| between the arrivals of the same tokens at every server, the tokens that complete
  text (a character, not a byte of one). tokenrelay sends no frame for a token that ends inside a character,
  so the benchmark replays the same ids through a ``Detokenizer`` to know which tokens those are; the
  baselines send a frame for every token (a broken character in between), and their frames at those tokens
  are compared. The expected gap is 50 ms times the tokens between two such arrivals. (Comparing every
  frame instead would set a gap over two or three tokens, where each token step adds the loop's lateness,
  against a baseline's gap over one: under saturation the p99 would then be tokenrelay's frames that end an
  emoji, not its loop);
* server CPU per token relayed (µs) and RSS (MB), read from /proc for the server process;
* the cyclic collector's full passes in the server process while the clients run, and the longest one: while
  a pass walks the heap no stream sends, and with 1,000 streams open a pass takes tens of milliseconds;
* after each N: tokenrelay's all-frames jitter p99 (the ramp-up, while N clients connect within a second) as
  a ratio to each baseline's (below 1 means tokenrelay is better). Each server is measured ``--repeat`` times
  (3 by default), the servers interleaved and each repeat starting with a different one; the ratio compares
  the medians, and each repeat's own ratio is printed beside it. On two cores, 1,000 streams saturate the
  server, and one server's p99 moves by a third from one load run to the next, so a single pair of runs
  says little.

The baselines are what FastAPI apps do: ``fastapi`` is a naive ``StreamingResponse`` over a generator that
decodes each token on its own (``tokenizer.decode([id])``) and yields ``f"data: {json}\\n\\n"``;
``sse-starlette`` yields the same chunks as events to sse-starlette's ``EventSourceResponse`` (the library
most FastAPI apps stream with; its default CRLF line ends).

``--cpu`` measures instead the CPU one request costs in each app, in-process (the ASGI app called directly,
no sockets, tokens unpaced): ``time.process_time`` over many requests, the three apps interleaved in rounds,
the median round reported. Process CPU time is robust to other load on the machine, where latency is not.
``--profile KIND`` prints where one app's CPU goes (cProfile over the same requests).

    python benchmarks/server_load.py [--streams 100,250,500,1000] [--tokens 120] [--servers ...] [--repeat 3]
    python benchmarks/server_load.py --cpu [--tokens 120]
    python benchmarks/server_load.py --profile tokenrelay [--tokens 1]

Not a test: numbers vary with the machine; compare the servers within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import pstats
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from tokenrelay._stream import percentile  # noqa: E402  (the project's one percentile definition)

RATE = 20.0
GAP = 1.0 / RATE
RAMP = 2.0  # seconds: clients connect over the first second; frames after this are steady streaming
SERVERS = ("tokenrelay", "fastapi", "sse-starlette")
BASELINES = SERVERS[1:]

ASGIApp = Callable[
    [dict[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]
]


def reply_ids(tokens: int) -> tuple[Any, str, list[int]]:
    """The tokenizer, the reply text and its ids: the corpus's first ``tokens`` ids, as the replay sends them."""
    from tiny_tokenizers import corpus_text
    from tokenrelay import load_tokenizer

    tok = load_tokenizer("smollm2")
    text = tok.decode((tok.encode(corpus_text()) * 3)[:tokens])
    return tok, text, tok.encode(text)


def make_app(kind: str, tokens: int, rate: float | None) -> ASGIApp:
    """One of the servers compared; ``rate`` None releases tokens unpaced (the CPU measurement)."""
    tok, text, ids = reply_ids(tokens)
    if kind == "tokenrelay":
        from tokenrelay.engines import ReplayEngine
        from tokenrelay.server import ServerConfig, create_app

        engine = ReplayEngine(tok, text, rate=rate)
        return create_app(engine, ServerConfig(max_active=10000, max_queued=10000, keepalive_interval=15))

    from fastapi import FastAPI

    app = FastAPI()
    delay = 1 / rate if rate is not None else 0.0

    async def chunks() -> Any:
        # The chunk a naive OpenAI-compatible server writes: the same fields as tokenrelay's (the ones the SDK's
        # ChatCompletionChunk requires, and the nulls it sends), so both put the same bytes on the wire.
        chunk_id, created = "chatcmpl-" + os.urandom(16).hex(), int(time.time())
        for i in ids:
            await asyncio.sleep(delay)
            choice = {
                "index": 0,
                "delta": {"content": tok.decode([i])},
                "logprobs": None,
                "finish_reason": None,
            }
            chunk = {
                "id": chunk_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": "replay",
                "system_fingerprint": None,
                "choices": [choice],
            }
            yield json.dumps(chunk)

    if kind == "fastapi":
        from fastapi.responses import StreamingResponse

        @app.post("/v1/chat/completions")
        async def chat() -> StreamingResponse:
            async def frames() -> Any:
                async for data in chunks():
                    yield f"data: {data}\n\n"
                yield "data: [DONE]\n\n"

            return StreamingResponse(frames(), media_type="text/event-stream")

    elif kind == "sse-starlette":
        from sse_starlette import EventSourceResponse

        @app.post("/v1/chat/completions")
        async def chat_sse() -> EventSourceResponse:
            async def events() -> Any:
                async for data in chunks():
                    yield {"data": data}
                yield {"data": "[DONE]"}

            return EventSourceResponse(events())

    else:
        raise SystemExit(f"unknown server {kind!r}: one of {', '.join(SERVERS)}")
    return app


def serve(kind: str, port: int, tokens: int, report: str) -> None:
    """Serve one app until SIGTERM, then write the cyclic collector's passes to ``report`` (JSON: per
    generation, [when it began on the monotonic clock, how long it took])."""
    import uvicorn

    app = make_app(kind, tokens, RATE)
    passes: dict[int, list[tuple[float, float]]] = {0: [], 1: [], 2: []}
    began = [0.0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began[0] = time.monotonic()
        else:
            passes[info["generation"]].append((began[0], time.monotonic() - began[0]))

    gc.callbacks.append(timed)
    # uvicorn raises the SIGTERM it caught again once it has shut down: handled, so the report gets written.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", access_log=False, backlog=4096)
    Path(report).write_text(json.dumps(passes))


def request_body(tokens: int) -> bytes:
    return json.dumps(
        {
            "model": "replay",
            "stream": True,
            "max_tokens": tokens + 10,
            "messages": [{"role": "user", "content": "go"}],
        }
    ).encode()


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
        # sse-starlette ends lines with CRLF: read both line ends (a CR waits in the buffer for its LF).
        self.buf = (self.buf + data).replace(b"\r\n", b"\n")
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
    body = request_body(tokens)
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


def start_server(kind: str, tokens: int, report: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--serve", kind, str(port), str(tokens), str(report)])
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
    p = percentile(values, q)
    return float("nan") if p is None else p


def tokenrelay_frame_steps(tokens: int) -> list[int]:
    """For each content frame tokenrelay will send, the index of the token that completed it."""
    from tokenrelay import Detokenizer

    tok, _, ids = reply_ids(tokens)
    detok = Detokenizer(tok)
    return [k for k, i in enumerate(ids) if detok.feed(i)]


# -- CPU per request, in-process ---------------------------------------------------------------------------


async def call(app: ASGIApp, body: bytes) -> int:
    """One POST through the ASGI app, as a server would make it; returns the body bytes sent."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]
    sent = 0
    never = asyncio.get_running_loop().create_future()

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop()
        await never  # the client stays until the response ends (the app cancels this wait)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal sent
        sent += len(message.get("body", b""))

    scope = {
        "type": "http",
        "asgi": {
            "version": "3.0",
            "spec_version": "2.3",
        },  # what uvicorn says (2.4 would spare Starlette its disconnect task)
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    await app(scope, receive, send)
    return sent


async def cpu_round(app: ASGIApp, body: bytes, requests: int, concurrency: int) -> float:
    """CPU seconds per request over ``requests`` requests, ``concurrency`` at a time."""
    gc.collect()
    start = time.process_time()
    for _ in range(requests // concurrency):
        sizes = await asyncio.gather(*(call(app, body) for _ in range(concurrency)))
        assert min(sizes) > 0
    return (time.process_time() - start) / (requests // concurrency * concurrency)


def close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what an app left waiting (sse-starlette's shutdown watcher), then close the loop."""
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:

        async def settle() -> None:
            await asyncio.gather(*tasks, return_exceptions=True)

        loop.run_until_complete(settle())
    loop.close()


def new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop  # what uvicorn runs on where it is installed

        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


def measure_cpu(tokens: int, servers: list[str], requests: int, rounds: int, concurrency: int) -> None:
    loop = new_loop()
    apps = {kind: make_app(kind, tokens, None) for kind in servers}
    body = request_body(tokens)
    for kind in servers:  # warm: imports, caches, the first allocation of everything
        loop.run_until_complete(cpu_round(apps[kind], body, concurrency * 2, concurrency))
    per: dict[str, list[float]] = {kind: [] for kind in servers}
    for _ in range(rounds):  # interleaved, so a burst of load elsewhere touches every app alike
        for kind in servers:
            per[kind].append(loop.run_until_complete(cpu_round(apps[kind], body, requests, concurrency)))
    close_loop(loop)
    print(
        f"CPU per request, in-process, {tokens}-token replies, {concurrency} at a time, median of {rounds}:"
    )
    ours = statistics.median(per["tokenrelay"]) if "tokenrelay" in per else None
    for kind in servers:
        med = statistics.median(per[kind])
        spread = f"{min(per[kind]) * 1e6:.0f}–{max(per[kind]) * 1e6:.0f}"
        ratio = f"  tokenrelay/{kind} = {ours / med:.2f}" if ours is not None and kind != "tokenrelay" else ""
        print(f"  {kind:<14} {med * 1e6:>8.0f} µs  (rounds {spread}){ratio}")


def profile(kind: str, tokens: int, requests: int, concurrency: int) -> None:
    loop = new_loop()
    app = make_app(kind, tokens, None)
    body = request_body(tokens)
    loop.run_until_complete(cpu_round(app, body, concurrency * 2, concurrency))
    prof = cProfile.Profile()
    prof.enable()
    loop.run_until_complete(cpu_round(app, body, requests, concurrency))
    prof.disable()
    close_loop(loop)
    stats = pstats.Stats(prof).sort_stats("tottime")
    print(f"{kind}: {requests} requests, {tokens}-token replies; per-request CPU is total / {requests}")
    stats.print_stats(30)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", default="100,250,500,1000", help="comma-separated stream counts")
    parser.add_argument("--tokens", type=int, default=120, help="tokens per reply (at 20/s: 6 s)")
    parser.add_argument("--servers", default=",".join(SERVERS), help="comma-separated: " + ", ".join(SERVERS))
    parser.add_argument("--cpu", action="store_true", help="CPU per request, in-process, instead of the load")
    parser.add_argument("--profile", metavar="KIND", help="where one server's CPU goes (cProfile)")
    parser.add_argument("--requests", type=int, default=400, help="requests per --cpu round / --profile")
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="load runs per server and stream count, interleaved; the ratio compares their medians",
    )
    parser.add_argument("--rounds", type=int, default=5, help="--cpu rounds per server")
    parser.add_argument("--concurrency", type=int, default=50, help="--cpu / --profile requests at a time")
    parser.add_argument(
        "--serve", nargs=4, metavar=("KIND", "PORT", "TOKENS", "REPORT"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    servers = args.servers.split(",")
    if args.serve:
        kind, port, tokens, report = args.serve
        serve(kind, int(port), int(tokens), report)
    elif args.profile:
        profile(args.profile, args.tokens, args.requests, args.concurrency)
    elif args.cpu:
        measure_cpu(args.tokens, servers, args.requests, args.rounds, args.concurrency)
    else:
        load(args.tokens, [int(x) for x in args.streams.split(",")], servers, args.repeat)


def measure(kind: str, n: int, tokens: int, steps: list[int], marks: list[int]) -> tuple[str, float]:
    """One server under ``n`` streams: its table row and its all-frames jitter p99 (seconds).

    ``steps``: for each of this server's content frames, the index of the token that completed it;
    ``marks``: the tokens whose arrival times are compared (those that complete text, a subset of ``steps``).
    """
    report = Path(tempfile.mkdtemp()) / "gc.json"
    proc, port = start_server(kind, tokens, report)
    try:
        cpu0, _ = proc_stats(proc.pid)
        streams = run_client(port, n, tokens)
        cpu1, rss = proc_stats(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    # The collector's full passes (generation 2) in the server process while the clients ran (not the ones at
    # startup): while one runs, no stream sends. The monotonic clock is the machine's.
    began = min((s.sent for s in streams if s.sent), default=0.0)
    passes = json.loads(report.read_text())["2"] if report.exists() else []
    full = [took for at, took in passes if at >= began]
    ok = [s for s in streams if s.done and not s.error]
    ttfts = [s.frames[0] - s.sent for s in ok if s.frames]
    # Split by when the frame arrived: during the ramp-up (the first RAMP seconds, while n connections are
    # being opened) or after it (steady streaming).
    start = min((s.sent for s in ok), default=0.0)
    jitter: list[float] = []
    steady: list[float] = []
    frame_of = {token: j for j, token in enumerate(steps)}
    for s in ok:
        # When each marked token arrived (its frame's arrival), for the marks this stream reached.
        arrived = [s.frames[frame_of[m]] for m in marks if frame_of[m] < len(s.frames)]
        for j in range(1, len(arrived)):
            value = abs((arrived[j] - arrived[j - 1]) - (marks[j] - marks[j - 1]) * GAP)
            jitter.append(value)
            if arrived[j] - start >= RAMP:
                steady.append(value)
    # Tokens relayed: up to the token that completed each stream's last frame.
    relayed = sum(steps[min(len(s.frames), len(steps)) - 1] + 1 for s in streams if s.frames)
    cpu_tok = (cpu1 - cpu0) / relayed * 1e6 if relayed else float("nan")
    p99 = pct(jitter, 99)
    row = (
        f"{kind:<14} {n:>7} {len(ok):>9} {pct(ttfts, 50) * 1000:>7.1f}ms {pct(ttfts, 99) * 1000:>7.1f}ms "
        f"{p99 * 1000:>8.1f}ms {pct(steady, 99) * 1000:>8.1f}ms {cpu_tok:>10.1f} {rss:>7.0f} "
        f"{len(full):>7} {max(full, default=float('nan')) * 1000:>6.1f}ms"
    )
    return row, p99


def load(tokens: int, counts: list[int], servers: list[str], repeat: int) -> None:
    every_token = list(range(tokens))
    frame_steps = {"tokenrelay": tokenrelay_frame_steps(tokens)}
    print(
        f"{'server':<14} {'streams':>7} {'sustained':>9} {'ttft p50':>9} {'ttft p99':>9} "
        f"{'jitter p99':>10} {'steady p99':>10} {'cpu µs/tok':>10} {'rss MB':>7} {'gc full':>7} {'longest':>8}"
    )
    for n in counts:
        all_p99: dict[str, list[float]] = {kind: [] for kind in servers}
        for r in range(repeat):
            # Each repeat starts with a different server, so that none always runs first (or last) on a machine
            # whose speed drifts.
            for kind in servers[r % len(servers) :] + servers[: r % len(servers)]:
                steps = frame_steps.get(kind, every_token)
                row, p99 = measure(kind, n, tokens, steps, frame_steps["tokenrelay"])
                all_p99[kind].append(p99)
                print(row + (f"  (repeat {r + 1})" if repeat > 1 else ""))
                sys.stdout.flush()
        if "tokenrelay" in all_p99:
            ours = statistics.median(all_p99["tokenrelay"])
            ratios = []
            for kind in BASELINES:
                if kind in all_p99:
                    each = ", ".join(
                        f"{a / b:.2f}" for a, b in zip(all_p99["tokenrelay"], all_p99[kind], strict=True)
                    )
                    ratio = f"÷ {kind} {ours / statistics.median(all_p99[kind]):.2f}"
                    ratios.append(ratio + (f" (repeats: {each})" if repeat > 1 else ""))
            if ratios:
                what = f"median of {repeat} repeats" if repeat > 1 else "ramp-up"
                print(f"{'':<14} {n:>7} tokenrelay's all-frames jitter p99 ({what}) " + ", ".join(ratios))
    print(
        "\njitter = |gap − tokens between × 50 ms| between arrivals of the tokens that complete text, at the "
        f"client; steady = arrivals after the first {RAMP:.0f} s (the connection ramp-up); sustained = streams that got [DONE]; a ratio below 1 means "
        "tokenrelay's p99 is lower."
    )


if __name__ == "__main__":
    main()

"""``serve --workers N``: the tokens/s one port relays with 1 and with 2 worker processes, at saturation.

Two set-ups, each served in turn by ``tokenrelay serve --workers 1`` and ``--workers 2`` (the two interleaved,
``--rounds`` times, each round starting with the other one):

- ``replay``: the workers run the replay engine unpaced (``--rate 0``): each reply's ids through the
  detokenizer, stop matcher, chunk writer and socket as fast as the server goes. The server path alone.
- ``upstream``: the workers front an upstream (``--engine upstream``). So that the upstream does not take the
  cores the fronts are measured on, it is a canned one, started by this script in a process of its own: it
  answers every chat request with the bytes a tokenrelay replay server once streamed for it
  (``return_token_ids``, one token per frame, recorded at start-up), written at once. The front still parses
  every frame, detokenizes every id and writes a frame of its own per token.

The load is this process: ``--streams`` kept-alive connections (uvloop when installed, httptools parsing the
responses), each sending streamed chats of ``--tokens`` tokens one after another for ``--seconds``; a reply
counts by the ``completion_tokens`` of its usage chunk, and the first reply of every connection is checked
against the text the server should send. Reported per set-up and worker count (medians over the rounds):
tokens/s, the server's CPU (its whole process tree, from /proc) per token, how the connections spread over the
workers (from ``/health``), and the ratio of 2 workers' tokens/s to 1 worker's: the target is ≥ 1.8 on two
cores. On two cores the load generator and the canned upstream take some of the CPU too: their share is
printed, since at saturation it is CPU the workers do not get.

    python benchmarks/workers.py [--setups replay,upstream] [--streams 16] [--tokens 256] [--rounds 3]

Not a test: numbers vary with the machine; compare within one run and read the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httptools
import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from tiny_tokenizers import corpus_text  # noqa: E402  (the multilingual corpus of the tests)
from tokenrelay.wire._sse import SSEParser  # noqa: E402

TOKENRELAY = [sys.executable, "-m", "tokenrelay", "serve"]
USAGE = re.compile(rb'"completion_tokens":\s*(\d+)')


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tree_cpu(pid: int) -> float:
    """User + system CPU seconds of a process and its live descendants (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    total, todo, ticks = 0.0, [pid], os.sysconf("SC_CLK_TCK")
    while todo:
        p = todo.pop()
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
        todo.extend(children.get(p, ()))
    return total


def chat_body(tokens: int) -> bytes:
    body = {
        "model": "replay",
        "messages": [{"role": "user", "content": "go"}],
        "stream": True,
        "max_tokens": tokens,
        "stream_options": {"include_usage": True},
    }
    return json.dumps(body).encode()


# -- processes ---------------------------------------------------------------------------------------------


@dataclass
class Proc:
    url: str
    proc: subprocess.Popen[bytes]


def launch(command: list[str], port: int, log: Path, ready_path: str = "/health") -> Proc:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    with log.open("ab") as out:
        proc = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    server = Proc(f"http://127.0.0.1:{port}", proc)
    deadline = time.monotonic() + 240
    while True:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            reply = httpx.get(server.url + ready_path, timeout=5)
            body = reply.json() if reply.status_code == 200 else None
            workers = body.get("workers") if isinstance(body, dict) else None
            if body is not None and (workers is None or workers["running"] == workers["configured"]):
                return server
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(server)
            raise SystemExit(f"{command} did not start; its log:\n{log.read_text()[-3000:]}")
        time.sleep(0.3)


def stop(server: Proc) -> None:
    if server.proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.proc.pid, signal.SIGTERM)
        try:
            server.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.proc.pid, signal.SIGKILL)
            server.proc.wait(5)


# -- the canned upstream (its own process: ``--canned-upstream PORT TEXTFILE TOKENS``) -----------------------


def record_reply(text_file: Path, tokens: int) -> bytes:
    """The body a tokenrelay replay server streams for ``chat_body(tokens)`` with ``return_token_ids``."""
    from server_helpers import replay_app

    app, _ = replay_app(text_file.read_text("utf-8"), rate=None, max_active=8, gzip=False)
    body = {**json.loads(chat_body(tokens)), "return_token_ids": True}

    async def fetch() -> bytes:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://up") as client:
            reply = await client.post("/v1/chat/completions", json=body)
            return reply.content

    data = asyncio.run(fetch())
    assert data.rstrip().endswith(b"data: [DONE]"), data[-200:]
    return data


def canned_upstream(port: int, text_file: Path, tokens: int) -> None:
    sse = record_reply(text_file, tokens)
    stream_head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
        b"content-length: %d\r\n\r\n" % len(sse)
    )
    small = b'{"status":"ok"}'
    small_head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(
        small
    )

    class Upstream(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport subclass
            self.parser = httptools.HttpRequestParser(self)

        def data_received(self, data: bytes) -> None:
            self.parser.feed_data(data)

        def on_message_complete(self) -> None:
            if self.parser.get_method() == b"POST":
                self.transport.write(stream_head + sse)  # the whole reply at once: the fastest upstream
            else:
                self.transport.write(small_head + small)

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Upstream, "127.0.0.1", port, backlog=4096)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


# -- the load ----------------------------------------------------------------------------------------------


class Connection(asyncio.Protocol):
    """One kept-alive HTTP/1.1 connection sending streamed chats one after another."""

    def __init__(self, keep: bool) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.keep = keep  # keep the first reply's bytes, to check its text
        self.kept: list[bytes] = []
        self.tail = b""
        self.done: asyncio.Future[int] | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport subclass

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_body(self, body: bytes) -> None:
        if self.keep:
            self.kept.append(body)
        self.tail = (self.tail + body)[-512:]  # the usage chunk is at the end

    def on_message_complete(self) -> None:
        match = USAGE.search(self.tail)
        if self.done is not None and not self.done.done():
            self.done.set_result(int(match.group(1)) if match else 0)
        self.keep, self.tail = False, b""

    def connection_lost(self, exc: Exception | None) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError("closed"))


async def load(url: str, streams: int, tokens: int, seconds: float) -> tuple[int, float, list[bytes]]:
    """``streams`` connections sending chats until ``seconds`` pass; the tokens received, the time, and
    each connection's first reply."""
    host, port = url.removeprefix("http://").split(":")
    body = chat_body(tokens)
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: %s\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (host.encode(), len(body), body)
    )
    loop = asyncio.get_running_loop()
    connections = [
        (await loop.create_connection(lambda: Connection(True), host, int(port)))[1] for _ in range(streams)
    ]
    received = 0
    start = time.perf_counter()
    end = start + seconds

    async def client(conn: Connection) -> None:
        nonlocal received
        assert conn.transport is not None
        while time.perf_counter() < end:
            conn.done = loop.create_future()
            conn.transport.write(request)
            got = await conn.done  # not `received += await ...`: that reads `received` before the await
            received += got

    await asyncio.gather(*(client(c) for c in connections))
    elapsed = time.perf_counter() - start
    for conn in connections:
        assert conn.transport is not None
        conn.transport.close()
    return received, elapsed, [b"".join(c.kept) for c in connections]


def reply_text(raw: bytes) -> str:
    parts = []
    for event in SSEParser().feed(raw):
        if event.data.startswith("{"):
            choices = json.loads(event.data).get("choices") or []
            if choices:
                parts.append(choices[0].get("delta", {}).get("content") or "")
    return "".join(parts)


# -- the run -----------------------------------------------------------------------------------------------


@dataclass
class Result:
    tokens_per_s: float
    server_us_per_token: float
    others_share: float  # of the machine's CPU over the batch: the load generator and the canned upstream
    spread: list[int]
    server_cores: float  # the server's CPU seconds per second: how much of the cores it got
    others_cores: float  # what every other process on the machine took meanwhile (other jobs: the noise)


def machine_busy() -> float:
    """CPU seconds every process on the machine has used (Linux /proc/stat: all but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _cpu(server: Proc, upstream: Proc | None) -> tuple[float, float, float, float]:
    """CPU seconds so far: the server's process tree, the canned upstream's, this process's, the machine's."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return (
        tree_cpu(server.proc.pid),
        tree_cpu(upstream.proc.pid) if upstream else 0.0,
        own.ru_utime + own.ru_stime,
        machine_busy(),
    )


def measure(server: Proc, upstream: Proc | None, args: argparse.Namespace, expected: str) -> Result:
    spread: list[int] = []
    cpu: list[tuple[float, float, float, float]] = []

    async def run() -> tuple[int, float, list[bytes]]:
        await load(server.url, args.streams, args.tokens, 1.0)  # warm up every worker's paths
        cpu.append(_cpu(server, upstream))
        task = asyncio.ensure_future(load(server.url, args.streams, args.tokens, args.seconds))
        samples: list[list[int]] = []
        async with httpx.AsyncClient() as client:  # how the kept-alive connections spread over the workers
            while not task.done():
                await asyncio.sleep(0.5)
                workers = (await client.get(server.url + "/health")).json().get("workers")
                if workers:
                    samples.append([w["active"] + w["queued"] for w in workers["each"]])
        result = await task
        cpu.append(_cpu(server, upstream))
        if samples:  # each worker's generations, averaged over the batch
            spread.extend(
                sorted((round(sum(c) / len(samples)) for c in zip(*samples, strict=False)), reverse=True)
            )
        return result

    received, elapsed, firsts = asyncio.run(run())
    server_cpu, upstream_cpu, client_cpu, busy = (after - before for before, after in zip(*cpu, strict=True))
    bad = sum(reply_text(raw) != expected for raw in firsts if raw)
    if bad:
        raise SystemExit(f"{bad} replies differ from the expected text")
    return Result(
        received / elapsed,
        server_cpu / received * 1e6 if received else float("nan"),
        (client_cpu + upstream_cpu) / (elapsed * (os.cpu_count() or 1)),
        spread,
        server_cpu / elapsed,
        max(0.0, busy - server_cpu - upstream_cpu - client_cpu) / elapsed,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--setups", default="replay,upstream")
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--canned-upstream", nargs=3, metavar=("PORT", "TEXTFILE", "TOKENS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.canned_upstream:
        port, text_file, tokens = args.canned_upstream
        canned_upstream(int(port), Path(text_file), int(tokens))
        return

    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    work = Path(tempfile.mkdtemp(prefix="bench-workers-"))
    text_file = work / "reply.txt"
    text_file.write_text(corpus_text() * 8, "utf-8")  # every reply runs to max_tokens
    from tokenrelay import load_tokenizer

    tokenizer = load_tokenizer("smollm2")
    reply_ids = tokenizer.encode(text_file.read_text("utf-8"))[: args.tokens]
    expected = tokenizer.decode(reply_ids)
    print(
        f"{os.cpu_count()} CPUs; {args.streams} streams of {args.tokens} tokens for {args.seconds:g}s a batch"
    )
    results: dict[tuple[str, int], list[Result]] = {}
    for setup in args.setups.split(","):
        upstream = None
        if setup == "upstream":
            port = free_port()
            command = [
                sys.executable,
                __file__,
                "--canned-upstream",
                str(port),
                str(text_file),
                str(args.tokens),
            ]
            upstream = launch(command, port, work / "upstream.log")
        for round_ in range(args.rounds):
            for workers in (1, 2) if round_ % 2 == 0 else (2, 1):
                port = free_port()
                command = [
                    *TOKENRELAY,
                    "--port",
                    str(port),
                    "--workers",
                    str(workers),
                    "--log-level",
                    "warning",
                ]
                command += ["--max-active", "4096", "--max-queued", "4096", "--tokenizer", "smollm2"]
                if setup == "replay":
                    command += ["--engine", "replay", "--text-file", str(text_file), "--rate", "0"]
                else:
                    assert upstream is not None
                    command += ["--engine", "upstream", "--upstream", upstream.url, "--model", "replay"]
                    command += ["--health-interval", "0"]
                server = launch(command, port, work / f"{setup}-{workers}.log")
                try:
                    result = measure(server, upstream, args, expected)
                finally:
                    stop(server)
                results.setdefault((setup, workers), []).append(result)
                print(
                    f"  {setup:8} {workers} worker{'s' if workers > 1 else ' '}: {result.tokens_per_s:8.0f} tok/s"
                    f"  {result.server_us_per_token:5.1f} µs CPU/token  on {result.server_cores:.2f} cores"
                    f"  connections {result.spread}"
                    f"  load+upstream {result.others_share:.0%} of the CPUs"
                    f"  other jobs {result.others_cores:.2f} cores",
                    flush=True,
                )
        if upstream is not None:
            stop(upstream)
    print()
    print(f"{'setup':10} {'1 worker tok/s':>15} {'2 workers tok/s':>16} {'ratio':>6}  per round")
    for setup in args.setups.split(","):
        one, two = results[setup, 1], results[setup, 2]
        rounds = " ".join(f"{b.tokens_per_s / a.tokens_per_s:.2f}" for a, b in zip(one, two, strict=True))
        m1 = statistics.median(r.tokens_per_s for r in one)
        m2 = statistics.median(r.tokens_per_s for r in two)
        print(f"{setup:10} {m1:15.0f} {m2:16.0f} {m2 / m1:6.2f}  {rounds}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

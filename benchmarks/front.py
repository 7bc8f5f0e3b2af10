"""The relay front: tokenrelay's upstream engine vs LiteLLM's proxy vs vllm-router, side by side in one run.

One upstream: tokenrelay's own server over the replay engine (it honours ``return_token_ids``), replaying the
multilingual corpus at ``--rate`` tokens/s per stream (400 by default: one token per frame), or, with
``--upstream URL``, any running OpenAI-compatible server (a vLLM CUDA server: the same table where a GPU is at
hand). In turn, each front is put between the load and that upstream:

- ``none``: the load hits the upstream itself (its own server path: the CPU row is the upstream's);
- ``tokenrelay``: ``tokenrelay serve --engine upstream`` (ids relayed and detokenized, stop strings, framing);
  ``tokenrelay-2w`` the same with ``--workers 2`` when the installed CLI has that option;
- ``litellm``: LiteLLM's proxy (``litellm[proxy]``, pinned below, one worker, an ``openai/`` model on the
  upstream);
- ``vllm-router``: the Rust router (pip ``vllm-router``, pinned below), its one worker the upstream; it passes
  the bytes through;
- ``python-pipe`` (not in the default set): a few lines of uvloop that copy bytes between each client
  connection and an upstream connection of its own, the floor under any Python front on this machine.

LiteLLM and vllm-router are not tokenrelay's dependencies: they are installed into a venv of this benchmark's
own (``.venv-bench-front``, made on first use), and so is py-spy, for ``--profile``.

For each concurrency in ``--streams`` (32 and 256 by default), each front gets two batches: concurrent streamed
replies of ``--tokens`` tokens (256), then of ``--short-tokens`` (8), each client sending its requests one
after another on one kept-alive connection. ``--api`` picks the dialect the load speaks to every front (Chat
Completions by default; ``responses`` or ``messages``: tokenrelay's front and LiteLLM translate, the upstream
is the same). Reported per front (medians over ``--rounds``, the fronts
interleaved, each round starting with a different one):

- CPU µs per token: the CPU of the front's process tree (from /proc) over the long batch ÷ the tokens it
  relayed; µs/req: what a request costs beyond its tokens, from the short batch (its CPU less its tokens at
  the long batch's per-token rate, ÷ its requests);
- tokens/s: the batch's completion tokens ÷ its wall time; tok/frame: completion tokens per content frame
  the client received (above 1: the front merged tokens that arrived together into one frame);
- TTFT p50/p99 added by the front: its TTFT percentiles less the direct ones of the same round;
- exact: how many streams' text equals the upstream's own non-streamed reply to the same request.

The load generator is this process (uvloop, httptools, raw HTTP/1.1; the replies are parsed after each batch,
so the client costs little while the fronts run); only the fronts' own processes are measured. The machine is
shared: compare the fronts within one run, and read the ratios.

    python benchmarks/front.py [--streams 32,256] [--fronts none,tokenrelay,litellm,vllm-router] [--rounds 3]
    python benchmarks/front.py --upstream http://gpu:8000 --tokenizer /models/M
    python benchmarks/front.py --api messages --fronts none,tokenrelay,litellm --streams 32
    python benchmarks/front.py --profile tokenrelay --streams 32   # py-spy over the front's long batches

Not a test: numbers vary with the machine; compare within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httptools
import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from tokenrelay._stream import percentile  # noqa: E402  (the project's one percentile definition)
from tokenrelay.wire._sse import SSEParser  # noqa: E402

FRONTS = (
    "none",
    "tokenrelay",
    "tokenrelay-2w",
    "litellm",
    "vllm-router",
    "python-pipe",
)  # and tokenrelay@REF (--baseline)
SIDE_VENV = ROOT / ".venv-bench-front"
# Pinned: the versions the figures in benchmarks/README.md were measured with.
SIDE_PACKAGES = ["litellm[proxy]==1.106.12", "vllm-router==0.1.17", "py-spy==0.4.3"]
PROMPTS = [
    "Write a haiku about tea.",
    "Name three rivers in Europe.",
    "How do plants make food?",
    "Give me a tip for learning Python.",
    "What is the capital of Japan?",
    "Describe a cat in one sentence.",
    "Why is the sky blue?",
    "Suggest a name for a llama.",
]
# Sent by the load to every front; LiteLLM's proxy refuses to start without a master key, so it gets this one.
KEY = "sk-bench-" + os.urandom(16).hex()
AUTH = {"Authorization": f"Bearer {KEY}"}
Runner = Callable[[Coroutine[Any, Any, Any]], Any]


# -- processes ---------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def side_venv() -> Path:
    """The bin folder of the benchmark's own venv with LiteLLM's proxy, vllm-router and py-spy (made once)."""
    stamp = SIDE_VENV / (".stamp-" + "-".join(SIDE_PACKAGES).replace("/", "_"))
    if not stamp.exists():
        print(f"installing {', '.join(SIDE_PACKAGES)} into {SIDE_VENV} (once)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(SIDE_VENV)], check=True)
        pip = [str(SIDE_VENV / "bin" / "python"), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, *SIDE_PACKAGES], check=True)
        stamp.touch()
    return SIDE_VENV / "bin"


def tree_cpu(pid: int) -> float:
    """User + system CPU seconds of a process and all its live descendants (Linux /proc)."""
    user, system = tree_times(pid)
    return user + system


def tree_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process and all its live descendants (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    user = system = 0.0
    todo, ticks = [pid], os.sysconf("SC_CLK_TCK")
    while todo:
        p = todo.pop()
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            user += int(fields[11]) / ticks
            system += int(fields[12]) / ticks
        todo.extend(children.get(p, ()))
    return user, system


@dataclass
class Server:
    name: str
    url: str
    proc: subprocess.Popen[bytes] | None  # None: not ours (--upstream URL)
    model: str


def _env(src: Path = ROOT / "src") -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(src)}


#: ``--baseline REF``: the source tree of that commit, for a ``tokenrelay@REF`` front beside this one.
BASELINES: dict[str, Path] = {}


def baseline_src(ref: str, into: Path) -> Path:
    """``src/`` of commit ``ref`` (``git archive``, the repository untouched)."""
    out = into / f"baseline-{ref.replace('/', '_')}"
    out.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "src"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    return out / "src"


def wait_ready(server: Server, log: Path, timeout: float = 180.0) -> None:
    """Until one small non-streamed chat succeeds through it (every front's own health paths differ)."""
    body = {"model": server.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(httpx.HTTPError):
            reply = httpx.post(server.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=10)
            if reply.status_code == 200:
                return
        if (server.proc is not None and server.proc.poll() is not None) or time.monotonic() > deadline:
            stop(server)
            raise SystemExit(f"{server.name} did not start; its log:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)


def launch(
    name: str, command: list[str], port: int, model: str, logs: Path, src: Path = ROOT / "src"
) -> Server:
    log = logs / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=_env(src), start_new_session=True
        )
    server = Server(name, f"http://127.0.0.1:{port}", proc, model)
    wait_ready(server, log)
    return server


def stop(server: Server) -> None:
    if server.proc is not None and server.proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.proc.pid, signal.SIGTERM)
        try:
            server.proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(server.proc.pid, signal.SIGKILL)
            server.proc.wait(5)


TOKENRELAY = [sys.executable, "-m", "tokenrelay", "serve"]


def has_workers_option() -> bool:
    return (
        "--workers"
        in subprocess.run([*TOKENRELAY, "--help"], capture_output=True, text=True, env=_env()).stdout
    )


def start_replay_upstream(rate: float, logs: Path) -> Server:
    from tiny_tokenizers import corpus_text  # the multilingual corpus of the tests

    text = logs / "reply.txt"
    text.write_bytes((corpus_text() * 8).encode())  # ~5,000 tokens: every reply runs to max_tokens
    port = free_port()
    command = [*TOKENRELAY, "--engine", "replay", "--text-file", str(text), "--rate", str(rate)]
    command += ["--port", str(port), "--max-active", "8192", "--max-queued", "8192", "--log-level", "warning"]
    return launch("upstream", command, port, "replay", logs)


def pipe_main(port: int, upstream_url: str) -> None:
    """``python-pipe``: the floor of a Python front on uvloop: each client connection gets its own upstream
    connection, and bytes are copied both ways as they arrive (no HTTP or SSE parsing, no detokenizing). What
    a Python process pays to move a token through, read and write, which no Python front can go below."""
    import uvloop

    host, _, up_port = upstream_url.removeprefix("http://").partition(":")

    class Pipe(asyncio.Protocol):
        def __init__(self) -> None:
            self.peer: asyncio.Transport | None = None
            self.transport: asyncio.Transport | None = None
            self.early: list[bytes] = []

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport  # type: ignore[assignment]

        def data_received(self, data: bytes) -> None:
            if self.peer is None:
                self.early.append(data)
            else:
                self.peer.write(data)

        def connection_lost(self, exc: Exception | None) -> None:
            if self.peer is not None:
                self.peer.close()

    async def accepted(downstream: Pipe) -> None:
        loop = asyncio.get_running_loop()
        _, upstream = await loop.create_connection(Pipe, host, int(up_port))
        assert downstream.transport is not None and upstream.transport is not None
        upstream.peer, downstream.peer = downstream.transport, upstream.transport
        for data in downstream.early:
            upstream.transport.write(data)

    async def serve() -> None:
        loop = asyncio.get_running_loop()

        tasks: set[asyncio.Task[None]] = set()

        def factory() -> Pipe:
            pipe = Pipe()
            task = loop.create_task(accepted(pipe))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            return pipe

        server = await loop.create_server(factory, "127.0.0.1", port, backlog=4096)
        await server.serve_forever()

    uvloop.run(serve())


def start_front(name: str, upstream: Server, tokenizer: str, logs: Path) -> Server:
    if name == "none":
        return upstream
    port = free_port()
    if name.startswith("tokenrelay"):
        command = [*TOKENRELAY, "--engine", "upstream", "--upstream", upstream.url, "--port", str(port)]
        command += ["--tokenizer", tokenizer, "--model", upstream.model]
        command += ["--max-active", "8192", "--max-queued", "8192"]
        if name == "tokenrelay-2w":
            command += ["--workers", "2"]
        ref = name.partition("@")[2]
        return launch(name, command, port, upstream.model, logs, BASELINES[ref] if ref else ROOT / "src")
    bin_dir = side_venv()
    if name == "litellm":
        config = logs / "litellm.yaml"
        params = {"model": f"openai/{upstream.model}", "api_base": upstream.url + "/v1", "api_key": "unused"}
        settings = {
            "model_list": [{"model_name": upstream.model, "litellm_params": params}],
            "general_settings": {"master_key": KEY},
        }
        config.write_text(json.dumps(settings))  # JSON is YAML
        command = [
            str(bin_dir / "litellm"),
            "--config",
            str(config),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ]
        command += ["--num_workers", "1"]
        return launch(name, command, port, upstream.model, logs)
    if name == "python-pipe":
        command = [sys.executable, str(Path(__file__).resolve()), "--pipe", str(port), upstream.url]
        return launch(name, command, port, upstream.model, logs)
    if name == "vllm-router":
        command = [str(bin_dir / "vllm-router"), "--worker-urls", upstream.url, "--host", "127.0.0.1"]
        command += ["--port", str(port)]
        return launch(name, command, port, upstream.model, logs)
    raise SystemExit(f"unknown front {name!r}: one of {', '.join(FRONTS)}")


# -- the load ----------------------------------------------------------------------------------------------


@dataclass
class Reply:
    prompt: str
    sent: float = 0.0
    reads: list[tuple[float, bytes]] = field(default_factory=list)  # (arrival, body bytes) per read
    status: int = 0
    complete: bool = False


class Connection(asyncio.Protocol):
    """One kept-alive HTTP/1.1 connection; httptools parses the responses (chunked bodies included)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.reply = Reply("")
        self.done: asyncio.Future[None] | None = None
        self.now = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # (uvloop's is no asyncio.Transport subclass)

    def data_received(self, data: bytes) -> None:
        self.now = time.perf_counter()
        self.parser.feed_data(data)

    def on_body(self, body: bytes) -> None:
        self.reply.reads.append((self.now, body))

    def on_message_complete(self) -> None:
        self.reply.status = self.parser.get_status_code()
        self.reply.complete = True
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    async def request(self, prompt: str, head: bytes, body: bytes) -> Reply:
        assert self.transport is not None
        self.reply, self.done = Reply(prompt), asyncio.get_running_loop().create_future()
        self.parser = httptools.HttpResponseParser(self)
        self.reply.sent = time.perf_counter()
        self.transport.write(head + body)
        await self.done
        return self.reply


#: ``--api``: the path the load posts to, and how a streamed reply of that dialect is read.
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}


def request_body(api: str, model: str, prompt: str, tokens: int) -> bytes:
    """A streamed request for ``tokens`` tokens at temperature 0, in the ``api``'s own shape."""
    body: dict[str, Any] = {"model": model, "temperature": 0, "stream": True}
    if api == "chat":
        body |= {"messages": [{"role": "user", "content": prompt}], "max_tokens": tokens}
        body["stream_options"] = {"include_usage": True}
    elif api == "responses":
        body |= {"input": prompt, "max_output_tokens": tokens}
    else:
        body |= {"messages": [{"role": "user", "content": prompt}], "max_tokens": tokens}
    return json.dumps(body).encode()


async def load(
    url: str, model: str, clients: int, requests: int, tokens: int, api: str = "chat"
) -> tuple[float, list[Reply]]:
    """``clients`` connections, each sending ``requests`` streamed replies one after another."""
    loop = asyncio.get_running_loop()
    host, port = url.removeprefix("http://").split(":")
    replies: list[Reply] = []

    async def client(index: int) -> None:
        await asyncio.sleep(index * 0.5 / clients)  # connect over half a second, not in one millisecond
        _, conn = await loop.create_connection(Connection, host, int(port))
        try:
            for k in range(requests):
                prompt = PROMPTS[(index + k) % len(PROMPTS)]
                body = request_body(api, model, prompt, tokens)
                head = (
                    f"POST {PATHS[api]} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                    f"Authorization: Bearer {KEY}\r\nx-api-key: {KEY}\r\nanthropic-version: 2023-06-01\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n"
                ).encode()
                replies.append(await conn.request(prompt, head, body))
                if conn.transport is None or conn.transport.is_closing():
                    break
        finally:
            assert conn.transport is not None
            conn.transport.close()

    started = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    return time.perf_counter() - started, replies


@dataclass
class Parsed:
    text: str
    ttft: float | None
    tokens: int
    frames: int  # frames with content
    ok: bool


def _read_chat(chunk: dict[str, Any]) -> tuple[str | None, int | None, bool]:
    """A Chat Completions chunk's text, completion tokens (in its usage) and whether it ends the reply."""
    usage = chunk.get("usage")
    pieces = [(c.get("delta") or {}).get("content") for c in chunk.get("choices") or ()]
    return "".join(p for p in pieces if p) or None, usage.get("completion_tokens") if usage else None, False


def _read_responses(event: dict[str, Any]) -> tuple[str | None, int | None, bool]:
    kind = event.get("type")
    if kind == "response.output_text.delta":
        return event["delta"] or None, None, False
    if kind in ("response.completed", "response.incomplete"):
        return None, event["response"]["usage"]["output_tokens"], True
    return None, None, False


def _read_messages(event: dict[str, Any]) -> tuple[str | None, int | None, bool]:
    kind = event.get("type")
    if kind == "content_block_delta" and event["delta"].get("type") == "text_delta":
        return event["delta"]["text"] or None, None, False
    if kind == "message_delta":
        return None, event["usage"]["output_tokens"], False
    return None, None, kind == "message_stop"


READERS = {"chat": _read_chat, "responses": _read_responses, "messages": _read_messages}


def parse(reply: Reply, api: str = "chat") -> Parsed:
    parser = SSEParser()
    read = READERS[api]
    text: list[str] = []
    ttft = None
    tokens = frames = 0
    done = False
    for arrival, data in reply.reads:
        for event in parser.feed(data):
            if event.data == "[DONE]":
                done = done or api == "chat"  # a chat stream's end; tolerated after the others' own end
                continue
            piece, count, last = read(json.loads(event.data))
            tokens = count if count is not None else tokens
            done = done or last
            if piece:
                frames += 1
                text.append(piece)
                if ttft is None:
                    ttft = arrival - reply.sent
    return Parsed("".join(text), ttft, tokens, frames, reply.status == 200 and done)


def references(upstream: Server, tokens: int) -> dict[str, str]:
    """The upstream's own non-streamed reply to each prompt."""
    out = {}
    for prompt in PROMPTS:
        body = {"model": upstream.model, "messages": [{"role": "user", "content": prompt}], "temperature": 0}
        body["max_tokens"] = tokens
        reply = httpx.post(upstream.url + "/v1/chat/completions", json=body, timeout=300)
        reply.raise_for_status()
        out[prompt] = reply.json()["choices"][0]["message"]["content"]
    return out


@dataclass
class Batch:
    cpu: float  # seconds of the front's process tree
    system: float  # of which in the kernel (socket reads and writes, mostly)
    wall: float
    tokens: int
    requests: int
    frames: int
    ttfts: list[float]
    exact: int
    failed: int


def run_batch(
    front: Server,
    clients: int,
    requests: int,
    tokens: int,
    refs: dict[str, str],
    run: Runner,
    api: str = "chat",
) -> Batch:
    pid = front.proc.pid if front.proc is not None else None
    user0, sys0 = tree_times(pid) if pid is not None else (0.0, 0.0)
    wall, replies = run(load(front.url, front.model, clients, requests, tokens, api))
    user1, sys1 = tree_times(pid) if pid is not None else (math.nan, math.nan)
    cpu, system = user1 + sys1 - user0 - sys0, sys1 - sys0
    parsed = [(r.prompt, parse(r, api)) for r in replies]
    good = [p for _, p in parsed if p.ok]
    return Batch(
        cpu=cpu,
        system=system,
        wall=wall,
        tokens=sum(p.tokens for p in good),
        requests=len(good),
        frames=sum(p.frames for p in good),
        ttfts=[p.ttft for p in good if p.ttft is not None],
        exact=sum(p.ok and p.text == refs[prompt] for prompt, p in parsed),
        failed=len(parsed) - len(good) + clients * requests - len(parsed),
    )


# -- the report --------------------------------------------------------------------------------------------


def med(values: list[float]) -> float:
    values = [v for v in values if v == v]  # NaN left out
    return statistics.median(values) if values else float("nan")


def pct(values: list[float], q: float) -> float:
    p = percentile(values, q)
    return float("nan") if p is None else p


def per_token(batch: Batch) -> float:
    return batch.cpu / batch.tokens * 1e6 if batch.tokens else float("nan")


@dataclass
class Row:
    long: list[Batch] = field(default_factory=list)
    short: list[Batch] = field(default_factory=list)

    def figures(self) -> dict[str, float]:
        req_us = []
        for long, short in zip(self.long, self.short, strict=True):
            rate = long.cpu / long.tokens if long.tokens else float("nan")
            if short.requests:
                req_us.append((short.cpu - rate * short.tokens) / short.requests * 1e6)
        batches = self.long + self.short
        return {
            "tok_us": med([per_token(b) for b in self.long]),
            "sys": med([b.system / b.cpu for b in self.long if b.cpu]),
            "req_us": med(req_us),
            "tok_s": med([b.tokens / b.wall for b in self.long]),
            "tok_frame": med([b.tokens / b.frames for b in self.long if b.frames]),
            "p50": med([pct(b.ttfts, 50) for b in self.long]),
            "p99": med([pct(b.ttfts, 99) for b in self.long]),
            "exact": sum(b.exact for b in batches),
            "streams": sum(b.requests + b.failed for b in batches),
        }


def report(results: dict[int, dict[str, Row]], fronts: list[str]) -> None:
    nan = float("nan")
    for streams, rows in results.items():
        base = rows["none"].figures() if "none" in rows and rows["none"].long else None
        print(f"\n{streams} concurrent streams (medians of {len(next(iter(rows.values())).long)} rounds)")
        print(
            f"{'front':<18} {'µs/token':>9} {'sys':>4} {'µs/req':>8} {'tok/s':>8} {'tok/frame':>9} "
            f"{'+TTFT p50':>10} {'+TTFT p99':>10} {'exact':>11}"
        )
        for name in fronts:
            if not rows[name].long:
                continue
            f = rows[name].figures()
            direct = base is None or name == "none"
            add50 = nan if direct else (f["p50"] - base["p50"]) * 1e3  # type: ignore[index]
            add99 = nan if direct else (f["p99"] - base["p99"]) * 1e3  # type: ignore[index]
            print(
                f"{name:<18} {f['tok_us']:>9.1f} {f['sys']:>4.0%} {f['req_us']:>8.0f} {f['tok_s']:>8.0f} {f['tok_frame']:>9.2f} "
                f"{add50:>+8.1f}ms {add99:>+8.1f}ms {int(f['exact']):>5}/{int(f['streams']):<5}"
            )
        if "tokenrelay" in rows and rows["tokenrelay"].long:
            mine = rows["tokenrelay"].figures()
            for other in [n for n in rows if n != "tokenrelay"]:
                if other in rows and rows[other].long:
                    theirs = rows[other].figures()
                    print(
                        f"  tokenrelay / {other}: {mine['tok_us'] / theirs['tok_us']:.2f}× the CPU per token, "
                        f"{mine['req_us'] / theirs['req_us']:.2f}× per request"
                    )


# -- profiling ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def profiling(front: Server, seconds: int, out: Path) -> Iterator[None]:
    """py-spy over the front's process while the block runs (collapsed stacks in ``out``)."""
    assert front.proc is not None
    command = [
        str(side_venv() / "py-spy"),
        "record",
        "--pid",
        str(front.proc.pid),
        "--duration",
        str(seconds),
    ]
    command += ["--rate", "200", "--format", "raw", "--output", str(out), "--nonblocking"]
    spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    time.sleep(1.0)
    try:
        yield
    finally:
        spy.wait(seconds + 60)


@contextlib.contextmanager
def perf_recording(front: Server, out: Path) -> Iterator[None]:
    """``perf record`` over the front's process while the block runs: where its CPU goes natively (the
    interpreter, uvloop, httptools, msgspec, the kernel's socket paths), which py-spy cannot see."""
    assert front.proc is not None
    command = ["perf", "record", "-F", "999", "-g", "-p", str(front.proc.pid), "-o", str(out), "--quiet"]
    perf = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    try:
        yield
    finally:
        perf.send_signal(signal.SIGINT)
        perf.wait(60)


def summarize_perf(data: Path, top: int = 45) -> None:
    for sort in ("dso", "dso,sym"):
        report = subprocess.run(
            [
                "perf",
                "report",
                "-i",
                str(data),
                "--stdio",
                "--no-children",
                "--sort",
                sort,
                "--percent-limit",
                "0.7",
            ],
            capture_output=True,
            text=True,
        ).stdout
        lines = [line for line in report.splitlines() if line.strip() and not line.startswith("#")]
        lines = [line for line in lines if "%" in line.split()[0]] if lines else []
        print(f"\nperf, self time by {sort}:")
        for line in lines[:top]:
            print("  " + line.strip())


def summarize_profile(raw: Path, top: int = 40) -> None:
    """Self and inclusive time per function from py-spy's collapsed stacks."""
    own: dict[str, int] = {}
    total: dict[str, int] = {}
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        samples += n
        frames = stack.split(";")
        own[frames[-1]] = own.get(frames[-1], 0) + n
        for frame in set(frames):
            total[frame] = total.get(frame, 0) + n
    print(f"\npy-spy: {samples} samples; self time:")
    for frame, n in sorted(own.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {n / samples:6.1%}  {frame}")
    print("inclusive time:")
    for frame, n in sorted(total.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {n / samples:6.1%}  {frame}")


# -- main --------------------------------------------------------------------------------------------------


def main() -> None:
    if sys.argv[1:2] == ["--pipe"]:
        pipe_main(int(sys.argv[2]), sys.argv[3])
        return
    parser = argparse.ArgumentParser(description="tokenrelay's front vs LiteLLM vs vllm-router")
    parser.add_argument(
        "--upstream", help="an OpenAI-compatible server to relay from (default: a replay server)"
    )
    parser.add_argument(
        "--tokenizer", default="smollm2", help="tokenrelay's front: the model's (default: smollm2)"
    )
    parser.add_argument("--rate", type=float, default=400.0, help="replay tokens/s per stream (default: 400)")
    parser.add_argument(
        "--streams", default="32,256", help="concurrencies, comma-separated (default: 32,256)"
    )
    parser.add_argument("--fronts", default="none,tokenrelay,tokenrelay-2w,litellm,vllm-router")
    parser.add_argument("--tokens", type=int, default=256, help="tokens per long reply (default: 256)")
    parser.add_argument("--short-tokens", type=int, default=8, help="tokens per short reply (default: 8)")
    parser.add_argument(
        "--long-tokens", type=int, default=32768, help="tokens per long batch, about (default: 32768)"
    )
    parser.add_argument(
        "--short-requests", type=int, default=512, help="requests per short batch (default: 512)"
    )
    parser.add_argument(
        "--api",
        choices=sorted(PATHS),
        default="chat",
        help="the dialect the load speaks to every front: chat (Chat Completions), responses (OpenAI "
        "Responses) or messages (Anthropic Messages); the upstream is the same OpenAI-compatible server",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", metavar="FRONT", help="py-spy over FRONT's long batches (20 s each)")
    parser.add_argument("--perf", metavar="FRONT", help="perf record over FRONT's long batches (Linux perf)")
    parser.add_argument(
        "--baseline",
        metavar="REF",
        help="also run tokenrelay's front as of commit REF (front tokenrelay@REF)",
    )
    args = parser.parse_args()

    fronts = [f for f in args.fronts.split(",") if f]
    if "tokenrelay-2w" in fronts and not has_workers_option():
        print("(this tokenrelay has no serve --workers: tokenrelay-2w left out)")
        fronts.remove("tokenrelay-2w")
    try:
        import uvloop

        run: Runner = uvloop.run
    except ImportError:
        run = asyncio.run
    streams_list = [int(s) for s in args.streams.split(",")]
    results = {n: {f: Row() for f in fronts} for n in streams_list}
    with tempfile.TemporaryDirectory(prefix="bench-front-") as tmp:
        logs = Path(tmp)
        if args.baseline:
            BASELINES[args.baseline] = baseline_src(args.baseline, logs)
            fronts.insert(
                fronts.index("tokenrelay") if "tokenrelay" in fronts else 0, f"tokenrelay@{args.baseline}"
            )
            results = {n: {f: Row() for f in fronts} for n in streams_list}
        if args.upstream:
            url = args.upstream.rstrip("/").removesuffix("/v1")
            model = httpx.get(url + "/v1/models", timeout=30).json()["data"][0]["id"]
            upstream = Server("upstream", url, None, model)
        else:
            upstream = start_replay_upstream(args.rate, logs)
        servers: dict[str, Server] = {}
        try:
            for name in fronts:
                servers[name] = start_front(name, upstream, args.tokenizer, logs)
            refs = {n: references(upstream, n) for n in (args.tokens, args.short_tokens)}
            print(
                f"upstream {upstream.url} ({upstream.model}); fronts: {', '.join(fronts)}; "
                f"the load speaks {args.api} ({PATHS[args.api]})",
                flush=True,
            )
            for r in range(args.rounds):
                order = fronts[r % len(fronts) :] + fronts[: r % len(fronts)]
                for streams in streams_list:
                    per_client = max(1, round(args.long_tokens / args.tokens / streams))
                    short_per_client = max(1, round(args.short_requests / streams))
                    for name in order:
                        front = servers[name]
                        spy = args.profile == name and front.proc is not None
                        raw = logs / f"profile-{name}-{streams}-{r}.txt"
                        native = args.perf == name and front.proc is not None
                        data = logs / f"perf-{name}-{streams}-{r}.data"
                        with contextlib.ExitStack() as watch:
                            if spy:
                                watch.enter_context(profiling(front, 20, raw))
                            if native:
                                watch.enter_context(perf_recording(front, data))
                            long = run_batch(
                                front, streams, per_client, args.tokens, refs[args.tokens], run, args.api
                            )
                        if spy:
                            summarize_profile(raw)
                        if native:
                            summarize_perf(data)
                        short = run_batch(
                            front,
                            streams,
                            short_per_client,
                            args.short_tokens,
                            refs[args.short_tokens],
                            run,
                            args.api,
                        )
                        results[streams][name].long.append(long)
                        results[streams][name].short.append(short)
                        print(
                            f"round {r + 1}: {streams:>4} streams, {name:<18} {per_token(long):7.1f} µs/token "
                            f"({long.system / max(long.cpu, 1e-9):4.0%} sys) "
                            f"{long.tokens / long.wall:7.0f} tok/s {long.tokens / max(long.frames, 1):5.2f} "
                            f"tok/frame; exact {long.exact + short.exact}/"
                            f"{long.requests + long.failed + short.requests + short.failed}",
                            flush=True,
                        )
        finally:
            for server in servers.values():
                if server is not upstream:
                    stop(server)
            stop(upstream)
    report(results, fronts)


if __name__ == "__main__":
    main()

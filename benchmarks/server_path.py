"""The server's token path in-process: CPU per token of a streamed chat through uvicorn's HTTP protocol.

``tokenrelay serve --engine replay`` without its sockets: the app (``create_app``) under the HTTP/1.1 protocol
``server.run`` gives uvicorn (httptools, the header guard), on uvloop, each connection's transport an object
that counts the bytes written and discards them. Every part of the path a frame takes inside the process is
there (request parsing, intake, the engine's steps, detokenizer, stop matcher, chunk writer, the response's
write and uvicorn's framing); the kernel's socket work and the load generator are not, so the figure is
steady on a shared machine where a socket benchmark's is not. The replay engine releases one token per step
with no delay (``rate=None``: each step still waits one turn of the event loop), so every token is its own
frame, as at 400 tokens/s in ``benchmarks/front.py``.

Reported: CPU µs per token (``time.process_time`` over ``--streams`` concurrent streams of ``--tokens``
tokens, ``--requests`` one after another on each kept-alive connection, ÷ the tokens), µs per request beyond
its tokens (from a batch of ``--short-tokens`` replies), medians of ``--rounds``. ``--profile`` prints
cProfile's view of one long batch. ``--vs-send`` alternates rounds with the frames written straight to the
transport (``server.run``'s ``tokenrelay.body`` extension, as served) and through uvicorn's ASGI ``send``, in
one process, and prints the ratio. ``--front``: the relay front instead (``--engine upstream`` over a recorded
replica).

    python benchmarks/server_path.py [--streams 32] [--tokens 256] [--rounds 5] [--profile] [--vs-send] [--front]

Not a test: compare runs on one machine, one after the other.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import pstats
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

import uvicorn  # noqa: E402
import uvloop  # noqa: E402
from uvicorn.server import ServerState  # noqa: E402

from tokenrelay.engines.replay import ReplayEngine  # noqa: E402
from tokenrelay.engines.upstream import UpstreamEngine  # noqa: E402
from tokenrelay.engines.upstream_client import ReplicaConnections, _Connection  # noqa: E402
from tokenrelay.server.app import ServerConfig, create_app  # noqa: E402
from tokenrelay.server.run import guarded_protocol  # noqa: E402
from tokenrelay.tokenizers import load_tokenizer  # noqa: E402

END = b"0\r\n\r\n"  # the last chunk of a chunked body: the response is complete


class Sink:
    """A transport that keeps nothing: counts what is written and notices each response's end."""

    def __init__(self) -> None:
        self.written = 0
        self.ended: asyncio.Future[None] | None = None
        self.closing = False

    def write(self, data: bytes) -> None:
        self.written += len(data)
        if data.endswith(END) and self.ended is not None and not self.ended.done():
            self.ended.set_result(None)

    def writelines(self, data: list[bytes]) -> None:
        for d in data:
            self.write(d)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 8000)}.get(name, default)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    abort = close

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


def request(tokens: int, prompt: str, *, token_ids: bool = False, api: str = "chat") -> bytes:
    """A streamed request of ``tokens`` tokens: a chat completion, or (``api="responses"``) the same as the
    Responses API asks it (``store: false``, as a benchmark keeps nothing), or (``api="messages"``) as the
    Anthropic Messages API does."""
    path = "/v1/chat/completions"
    fields: dict[str, Any] = {
        "model": "replay",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if api == "messages":  # the Anthropic Messages API: the same reply as named events
        path = "/v1/messages"
        fields = {"model": "replay", "messages": fields["messages"], "max_tokens": tokens, "stream": True}
    if api == "responses":
        path = "/v1/responses"
        fields = {
            "model": "replay",
            "input": prompt,
            "max_output_tokens": tokens,
            "stream": True,
            "store": False,
        }
    if token_ids:
        fields["return_token_ids"] = True
    body = json.dumps(fields).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head + body


class Recorder(Sink):
    """A sink that keeps each write: one upstream answer, replayed to the front by ``Replica``."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)
        super().write(data)


async def record(app: Any, tokens: int) -> list[bytes]:
    """The writes of the replay server's answer to a front's request (``return_token_ids``) of ``tokens``."""
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    config.load()
    protocol: Any = guarded_protocol("httptools", 10.0)(
        config=config, server_state=ServerState(), app_state={}
    )  # type: ignore[call-arg]
    sink = Recorder()
    protocol.connection_made(sink)
    sink.ended = asyncio.get_running_loop().create_future()
    protocol.data_received(request(tokens, "hi", token_ids=True))
    await sink.ended
    protocol.connection_lost(None)
    return sink.writes


class Replica:
    """The upstream for ``--front``: each request on a connection is answered with a recorded answer of as
    many tokens as it asks for, one write per ``gap`` seconds (a loop timer each, as the upstream's own
    replay engine sleeps per token), handed to the front's connection as a socket read would be."""

    def __init__(self, answers: dict[int, list[bytes]], gap: float) -> None:
        self.answers, self.gap = answers, gap

    def connection(self, protocol: asyncio.Protocol) -> Sink:
        replica = self
        loop = asyncio.get_running_loop()

        class Upstream(Sink):
            def write(self, data: bytes) -> None:  # a request from the front
                tokens = json.loads(data.partition(b"\r\n\r\n")[2])["max_tokens"]
                writes = iter(replica.answers[tokens])

                def next_write() -> None:
                    if self.closing:
                        return
                    chunk = next(writes, None)
                    if chunk is not None:
                        protocol.data_received(chunk)
                        loop.call_later(replica.gap, next_write)

                loop.call_later(replica.gap, next_write)

            def close(self) -> None:
                if not self.closing:
                    self.closing = True
                    loop.call_soon(protocol.connection_lost, None)

        return Upstream()


#: The API the benchmark's requests ask (--vs-responses alternates rounds between the two).
API = ["chat"]


async def batch(protocol_class: type[asyncio.Protocol], config: Any, state: ServerState, streams: int,
                requests: int, tokens: int) -> int:  # fmt: skip
    """``streams`` connections, each sending ``requests`` streamed chats one after another; bytes written."""
    loop = asyncio.get_running_loop()
    total = 0

    async def client(index: int) -> None:
        nonlocal total
        protocol: Any = protocol_class(config=config, server_state=state, app_state={})  # type: ignore[call-arg]
        sink = Sink()
        protocol.connection_made(sink)
        for k in range(requests):
            sink.ended = loop.create_future()
            protocol.data_received(request(tokens, f"prompt {index} {k}", api=API[0]))
            await sink.ended
        protocol.connection_lost(None)
        total += sink.written

    await asyncio.gather(*(client(i) for i in range(streams)))
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--requests", type=int, default=4, help="long requests per connection (default 4)")
    parser.add_argument("--short-tokens", type=int, default=8)
    parser.add_argument("--short-requests", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--rate", type=float, default=None, help="replay tokens/s per stream (default: no delay)"
    )
    parser.add_argument("--profile", action="store_true", help="cProfile over one long batch")
    parser.add_argument(
        "--vs-send",
        action="store_true",
        help="alternate rounds with the frames written straight to the transport (server.run's tokenrelay.body) "
        "and through uvicorn's ASGI send, and print the ratio",
    )
    parser.add_argument(
        "--vs-responses",
        action="store_true",
        help="alternate rounds of chat completions and the Responses API (issue 29), and print the ratios of "
        "CPU and bytes per token",
    )
    parser.add_argument(
        "--vs-messages",
        action="store_true",
        help="the same with the Anthropic Messages API (issue 30)",
    )
    parser.add_argument(
        "--front",
        action="store_true",
        help="the relay front instead (--engine upstream, its replica a recorded replay answer, one write "
        "per token at --rate)",
    )
    args = parser.parse_args()

    from tiny_tokenizers import corpus_text

    tokenizer = load_tokenizer("smollm2")
    limits = ServerConfig(max_active=8192, max_queued=8192, tune_gc=False)
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    if args.front:
        upstream_app = create_app(ReplayEngine(tokenizer, corpus_text() * 8, rate=None), limits)
        answers = {
            n: loop.run_until_complete(record(upstream_app, n)) for n in (args.tokens, args.short_tokens)
        }
        replica = Replica(answers, 1 / (args.rate or 1e6))
        engine: Any = UpstreamEngine(
            ["http://127.0.0.1:1"], tokenizer, model="replay", health_interval=0, stranded="replace"
        )

        async def connect(self: ReplicaConnections) -> Any:
            conn = _Connection(self)
            conn.connection_made(replica.connection(conn))
            self._open.add(conn)
            return conn

        ReplicaConnections._connect = connect  # type: ignore[method-assign]
    else:
        engine = ReplayEngine(tokenizer, corpus_text() * 8, rate=args.rate)
    app = create_app(engine, limits)
    direct = [True]  # --vs-send: off in every other round, so the frames go through uvicorn's ASGI send

    async def served(scope: Any, receive: Any, send: Any) -> None:
        if not direct[0]:
            scope.get("extensions", {}).pop("tokenrelay.body", None)
        await app(scope, receive, send)

    config = uvicorn.Config(served, log_level="warning", access_log=False, lifespan="off")
    config.load()
    protocol_class = guarded_protocol("httptools", 10.0)
    state = ServerState()

    system = [0.0]
    written = [0]

    def timed(streams: int, requests: int, tokens: int) -> float:
        start, sys0 = time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_stime
        written[0] = loop.run_until_complete(batch(protocol_class, config, state, streams, requests, tokens))
        system[0] = resource.getrusage(resource.RUSAGE_SELF).ru_stime - sys0
        return time.process_time() - start

    if args.vs_responses or args.vs_messages:
        return _vs_api(args, timed, written, "responses" if args.vs_responses else "messages")
    timed(args.streams, 2, args.tokens)  # warm: imports, caches, the tokenizer's first calls
    gc.collect()
    gc.freeze()  # as the app's lifespan does (tune_gc)
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        timed(args.streams, args.requests, args.tokens)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
        return
    long_n = args.streams * args.requests * args.tokens
    short_req = args.streams * args.short_requests
    variants = (True, False) if args.vs_send else (True,)
    per_token: dict[bool, list[float]] = {v: [] for v in variants}
    per_request: dict[bool, list[float]] = {v: [] for v in variants}
    shares: list[float] = []
    for _ in range(args.rounds):
        for variant in variants:
            direct[0] = variant
            long = timed(args.streams, args.requests, args.tokens)
            shares.append(system[0] / long)
            short = timed(args.streams, args.short_requests, args.short_tokens)
            rate = long / long_n
            per_token[variant].append(rate * 1e6)
            per_request[variant].append((short - rate * short_req * args.short_tokens) / short_req * 1e6)
    for variant in variants:
        tok, req = per_token[variant], per_request[variant]
        label = (
            "" if not args.vs_send else " (frames straight to the transport)" if variant else " (ASGI send)"
        )
        print(
            f"{'front' if args.front else 'server'} path in-process{label}, {args.streams} streams: "
            f"{statistics.median(tok):.1f} µs/token (rounds {min(tok):.1f}–{max(tok):.1f}; "
            f"{statistics.median(shares):.0%} in the kernel), {statistics.median(req):.0f} µs/request "
            f"beyond its tokens (rounds {min(req):.0f}–{max(req):.0f})"
        )
    if args.vs_send:
        ratios = [a / b for a, b in zip(per_token[True], per_token[False], strict=True)]
        print(
            f"straight / send, per token: median of rounds {statistics.median(ratios):.3f} "
            f"(rounds {min(ratios):.3f}–{max(ratios):.3f})"
        )


def _vs_api(args: argparse.Namespace, timed: Any, written: list[int], other: str) -> None:
    """Chat completions and ``other`` (the Responses or the Messages API) side by side, rounds alternating: CPU
    µs and bytes per token."""
    apis = ("chat", other)
    for api in apis:  # warm both paths
        API[0] = api
        timed(args.streams, 2, args.tokens)
    gc.collect()
    gc.freeze()
    tokens = args.streams * args.requests * args.tokens
    cpu: dict[str, list[float]] = {api: [] for api in apis}
    size: dict[str, float] = {}
    for _ in range(args.rounds):
        for api in apis:
            API[0] = api
            cpu[api].append(timed(args.streams, args.requests, args.tokens) / tokens * 1e6)
            size[api] = written[0] / tokens
    where = "front" if args.front else "server"
    for api in apis:
        us = cpu[api]
        print(
            f"{where} path, {api:9s} {args.streams} streams × {args.tokens} tokens: {statistics.median(us):.1f} "
            f"µs/token (rounds {min(us):.1f}–{max(us):.1f}), {size[api]:.0f} bytes/token on the wire"
        )
    ratios = [r / c for r, c in zip(cpu[other], cpu["chat"], strict=True)]
    print(
        f"{other} / chat, CPU per token: median of rounds {statistics.median(ratios):.3f} "
        f"(rounds {min(ratios):.3f}–{max(ratios):.3f}); bytes per token {size[other] / size['chat']:.2f}×"
    )


if __name__ == "__main__":
    main()

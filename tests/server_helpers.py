"""Helpers for server tests: a step-counting engine, raw-socket reads, and app factories."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from fastapi import FastAPI

from tokenrelay import load_tokenizer
from tokenrelay.engines import ReplayEngine
from tokenrelay.engines.base import Prompt, SamplingParams, Step
from tokenrelay.server import ServerConfig, create_app


@dataclass
class Generation:
    steps: list[float] = field(default_factory=list)  # monotonic time each step was handed out
    closed_at: float | None = None


class CountingEngine:
    """A replay engine that records, per prompt, when each step was produced and when it was closed."""

    def __init__(self, inner: ReplayEngine) -> None:
        self.inner = inner
        self.generations: dict[str, Generation] = {}

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def tokenizer(self):  # type: ignore[no-untyped-def]
        return self.inner.tokenizer

    @property
    def stop_token_ids(self) -> frozenset[int]:
        return self.inner.stop_token_ids

    def prompt_ids(self, prompt: Prompt) -> list[int]:
        return self.inner.prompt_ids(prompt)

    async def generate(
        self, prompt: Prompt, params: SamplingParams, *, prompt_ids: Sequence[int]
    ) -> AsyncIterator[Step]:
        key = prompt if isinstance(prompt, str) else prompt[-1]["content"]
        record = self.generations.setdefault(key, Generation())
        try:
            async for step in self.inner.generate(prompt, params, prompt_ids=prompt_ids):
                record.steps.append(time.monotonic())
                yield step
        finally:
            record.closed_at = time.monotonic()

    async def aclose(self) -> None:
        await self.inner.aclose()


def replay_app(
    text: str | None = None,
    *,
    rate: float | None = 50.0,
    counting: bool = False,
    engine_options: dict[str, object] | None = None,
    **config: object,
) -> tuple[FastAPI, Any]:  # the engine: a ReplayEngine, or a CountingEngine around it
    """An app over the replay engine with SmolLM2's tokenizer (text=None replays the prompt)."""
    engine: object = ReplayEngine(load_tokenizer("smollm2"), text, rate=rate, **(engine_options or {}))  # type: ignore[arg-type]
    if counting:
        engine = CountingEngine(engine)  # type: ignore[arg-type]
    return create_app(engine, ServerConfig(**config)), engine  # type: ignore[arg-type]


def read_chat_stream(stream: Iterable[Any]) -> tuple[str, str | None, Any]:
    """The official SDK's chat stream read to its end: the joined text, the finish reason and the usage."""
    text, finish, usage = "", None, None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
        usage = chunk.usage or usage
    return text, finish, usage


def asgi_client(app: Any) -> httpx.AsyncClient:
    """A client for ``app`` in-process, through httpx's ASGI transport: for tests of what the server answers,
    where the socket is not the subject (no port, no uvicorn thread; a streamed body arrives whole)."""
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test", timeout=30)


def raw_post(
    base_url: str, path: str, body: bytes, *, headers: dict[str, str] | None = None
) -> socket.socket:
    """Open a socket, send one HTTP/1.1 POST, return the socket (the caller reads)."""
    host, port = base_url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    head = [
        f"POST {path} HTTP/1.1",
        f"Host: {host}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
    ]
    head += [f"{k}: {v}" for k, v in (headers or {}).items()]
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
    return sock


def read_timed(
    sock: socket.socket, until: bytes = b"0\r\n\r\n", timeout: float = 20.0
) -> list[tuple[float, bytes]]:
    """Read until ``until`` ends the data (or EOF); return (arrival time, bytes) per recv."""
    sock.settimeout(timeout)
    out: list[tuple[float, bytes]] = []
    data = b""
    while not data.endswith(until):
        chunk = sock.recv(65536)
        if not chunk:
            break
        out.append((time.monotonic(), chunk))
        data += chunk
    return out


def split_response(raw: bytes) -> tuple[str, list[bytes]]:
    """Split a raw chunked HTTP/1.1 response into its head and its chunks (one per server write)."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    chunks: list[bytes] = []
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        chunks.append(rest[:size])
        rest = rest[size + 2 :]
    return head.decode("latin-1"), chunks


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """A running ``tokenrelay serve``: its URL, its process, and everything it printed so far."""

    def __init__(self, url: str, proc: subprocess.Popen[str]) -> None:
        self.url = url
        self.proc = proc
        self._lines: list[str] = []
        # Drained by a thread: a server that logs a lot must never block on a full pipe.
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.append(line)

    def output(self) -> str:
        """What the server printed (after it exited: all of it)."""
        if self.proc.poll() is not None:
            self._reader.join(timeout=10)
        return "".join(self._lines)

    def rss_kb(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


@contextmanager
def serve_process(*args: str, timeout: float = 90) -> Iterator[ServerProcess]:
    """``python -m tokenrelay serve --port FREE ARGS...`` until the block ends (killed if still running)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokenrelay", "serve", "--port", str(port), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    server = ServerProcess(f"http://127.0.0.1:{port}", proc)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                if httpx.get(server.url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"server did not start:\n{server.output()}")
            time.sleep(0.2)
        yield server
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        server._reader.join(timeout=10)  # the pipe is at EOF: the reader ends, and the pipe can be closed
        if proc.stdout is not None:
            proc.stdout.close()

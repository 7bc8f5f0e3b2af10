"""`tokenrelay serve` as a user runs it: a real process, the real SmolLM2 model, the official SDK, SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import openai
import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve_process(*args: str, timeout: float = 90) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokenrelay", "serve", "--port", str(port), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.stdout.read() if proc.stdout else ""
                raise AssertionError(f"server did not start:\n{out}")
            time.sleep(0.2)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def test_serve_the_embedded_model_to_the_official_sdk() -> None:
    pytest.importorskip("llama_cpp")
    with serve_process("--threads", "2") as (url, proc):
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        model = client.models.list().data[0].id
        assert model == "SmolLM2-135M-Instruct"
        messages = [{"role": "user", "content": "Say hello in one short sentence."}]
        stream = client.chat.completions.create(
            model=model,
            messages=messages,
            stream=True,
            temperature=0,
            max_tokens=24,  # type: ignore[arg-type]
            stream_options={"include_usage": True},
        )
        text, finish, usage = "", None, None
        for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
            usage = chunk.usage or usage
        assert text.strip() and "\ufffd" not in text
        assert finish in ("stop", "length") and usage is not None and usage.completion_tokens <= 24
        again = client.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=24)  # type: ignore[arg-type]
        assert again.choices[0].message.content == text  # greedy: the streamed and whole replies agree
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
        log = proc.stdout.read() if proc.stdout else ""
        assert "ttft=" in log and "itl_p95=" in log


def test_sigterm_ends_open_streams_and_exits(tmp_path: Path) -> None:
    text = tmp_path / "reply.txt"
    text.write_text("word " * 400)
    with serve_process("--engine", "replay", "--text-file", str(text), "--rate", "20") as (url, proc):
        with httpx.stream(
            "POST",
            url + "/v1/chat/completions",
            timeout=30,
            json={
                "model": "replay",
                "messages": [{"role": "user", "content": "go"}],
                "stream": True,
                "max_tokens": 400,
            },
        ) as r:
            chunks = r.iter_raw()
            next(chunks)
            next(chunks)
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            with pytest.raises(httpx.HTTPError):  # the stream is cut, not left hanging
                for _ in chunks:
                    pass
            elapsed = time.monotonic() - t0
        assert elapsed < 10  # the 5 s graceful timeout, then the stream is cancelled
        # uvicorn shuts down gracefully, then re-raises SIGTERM so the exit status says how it ended.
        assert proc.wait(timeout=15) in (0, -signal.SIGTERM)
        log = proc.stdout.read() if proc.stdout else ""
        assert "finish=cancelled" in log  # the open stream's generation was cancelled and counted

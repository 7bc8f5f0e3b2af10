"""`tokenrelay serve` as a user runs it: a real process, the real SmolLM2 model, the official SDK, SIGTERM."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from server_helpers import raw_post, read_chat_stream, read_timed, serve_process, split_response
from tokenrelay.wire._sse import SSEParser


def test_serve_the_embedded_model_to_the_official_sdk() -> None:
    pytest.importorskip("llama_cpp")
    with serve_process("--threads", "2") as server:
        url, proc = server.url, server.proc
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        model = client.models.list().data[0].id
        assert model == "SmolLM2-135M-Instruct"
        messages: list[ChatCompletionMessageParam] = [
            {"role": "user", "content": "Say hello in one short sentence."}
        ]
        stream = client.chat.completions.create(
            model=model,
            messages=messages,
            stream=True,
            temperature=0,
            max_tokens=24,
            stream_options={"include_usage": True},
        )
        text, finish, usage = read_chat_stream(stream)
        assert text.strip() and "\ufffd" not in text
        assert finish in ("stop", "length") and usage is not None and usage.completion_tokens <= 24
        again = client.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=24)
        assert again.choices[0].message.content == text  # greedy: the streamed and whole replies agree
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
        log = server.output()
        assert "ttft=" in log and "itl_p95=" in log


def test_serve_help_shows_the_shutdown_and_slow_client_options() -> None:
    help_text = subprocess.run(
        [sys.executable, "-m", "tokenrelay", "serve", "--help"], capture_output=True, text=True, timeout=60
    ).stdout
    for option in (
        "--graceful-timeout",
        "--header-timeout",
        "--body-timeout",
        "--max-prompt-chars",
        "--api-key",
    ):
        assert option in help_text, option


def _events(raw: bytes) -> list[str]:
    return [e.data for e in SSEParser().feed(b"".join(split_response(raw)[1]))]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_shutdown_lets_streams_finish_then_ends_the_rest_with_an_error_and_done(
    tmp_path: Path, sig: signal.Signals
) -> None:
    text = tmp_path / "reply.txt"
    text.write_text("word " * 400)
    args = ("--engine", "replay", "--text-file", str(text), "--rate", "20", "--graceful-timeout", "1.5")
    with serve_process(*args) as server:
        url, proc = server.url, server.proc

        def stream(max_tokens: int) -> socket.socket:
            body = {"model": "replay", "messages": [{"role": "user", "content": "go"}], "stream": True}
            sock = raw_post(
                url, "/v1/chat/completions", json.dumps({**body, "max_tokens": max_tokens}).encode()
            )
            sock.settimeout(10)
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
            return sock

        running = [stream(400) for _ in range(5)]  # 20 s of reply each: longer than the grace period
        short = stream(12)  # 0.6 s: finishes within it
        time.sleep(0.3)
        signalled = time.monotonic()
        proc.send_signal(sig)
        time.sleep(0.3)
        host, port = url.removeprefix("http://").split(":")
        with pytest.raises(OSError):  # no longer accepting
            socket.create_connection((host, int(port)), timeout=2).close()
        finished = _events(b"HTTP/1.1 200 OK\r\n\r\n" + b"".join(c for _, c in read_timed(short)))
        assert json.loads(finished[-2])["choices"][0]["finish_reason"] == "length"
        assert finished[-1] == "[DONE]"
        short.close()
        for sock in running:
            raw = b"".join(c for _, c in read_timed(sock))
            assert raw.endswith(b"0\r\n\r\n")  # a clean end of the chunked body
            events = _events(b"HTTP/1.1 200 OK\r\n\r\n" + raw)
            assert events[-1] == "[DONE]"
            error = json.loads(events[-2])["error"]
            assert error["type"] == "server_error" and error["code"] == "server_shutting_down"
            assert set(error) == {"message", "type", "param", "code"}
            assert any('"content":"word"' in e or '"content":" word"' in e for e in events)
            sock.close()
        ended = time.monotonic() - signalled
        assert 1.4 < ended < 5, ended  # the grace period, then the end
        assert proc.wait(timeout=15) == 0  # a graceful shutdown is a normal exit
        log = server.output()
    assert "Traceback" not in log and "CancelledError" not in log and "ERROR" not in log, log
    lines = [line for line in log.splitlines() if "tokenrelay.server: /v1/chat/completions" in line]
    assert sum("finish=shutdown" in line for line in lines) == 5, lines
    assert sum("finish=length" in line and line.endswith("+12") for line in lines) == 1, lines
    for line in lines:
        prompt, completion = (int(n) for n in line.rsplit("tokens=", 1)[1].split("+"))
        assert prompt > 0 and completion > 0, line

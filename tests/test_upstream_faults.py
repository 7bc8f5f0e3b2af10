"""Faults of a replica mid-stream, against real replica processes, through a real front (issue 22).

Each test runs a front over two replicas: a healthy tokenrelay replay server (a process), busy with a long
stream, and a replica that fails (``tests/faulty_replica.py``, or a replay server killed with SIGKILL). The
stream on the failing replica must end with an OpenAI-shaped error event and ``data: [DONE]`` within the stall
timeout (``--upstream-read-timeout``, here ``STALL`` seconds); the replica is marked down; the stream on the
other replica goes on to its exact end.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from _uvicorn import serve
from faulty_replica import GOOD, TEXT
from tokenrelay import load_tokenizer
from tokenrelay.engines.upstream import UpstreamEngine
from tokenrelay.server import ServerConfig, create_app

ROOT = Path(__file__).resolve().parents[1]
STALL = 1.5  # the front's --upstream-read-timeout in these tests
LONG = "Streams on the other replica go on untouched. " * 8
TOK = load_tokenizer("smollm2")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def process(command: list[str], port: int) -> Iterator[subprocess.Popen[bytes]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "replica did not start"
            time.sleep(0.1)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


@contextmanager
def replay_replica(text: str, rate: float) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    path = ROOT / "test-artifacts" / f"replay-{port}.txt"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text, encoding="utf-8")
    command = [sys.executable, "-m", "tokenrelay", "serve", "--engine", "replay", "--text-file", str(path)]
    command += ["--rate", str(rate), "--port", str(port), "--log-level", "warning"]
    try:
        with process(command, port) as proc:
            yield f"http://127.0.0.1:{port}", proc
    finally:
        path.unlink(missing_ok=True)


@contextmanager
def faulty_replica(mode: str, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    ids = tmp_path / "ids.json"
    ids.write_text(json.dumps([[i, TOK.decode([i])] for i in TOK.encode(TEXT)]))
    command = [sys.executable, str(ROOT / "tests" / "faulty_replica.py"), mode, str(port), str(ids)]
    with process(command, port):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def healthy() -> Iterator[str]:
    """One healthy replica for every test here (a process start costs seconds)."""
    with replay_replica(LONG, rate=60.0) as (url, _):
        yield url


def stream(url: str, out: list[tuple[float, str]]) -> None:
    """A streamed chat through ``url``: each data payload with its arrival time."""
    body = {"messages": [{"role": "user", "content": "hi"}], "stream": True, "max_tokens": 2000}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                out.append((time.monotonic(), line[6:]))


def text_of(payloads: list[tuple[float, str]]) -> str:
    chunks = [json.loads(p) for _, p in payloads if p != "[DONE]"]
    return "".join(
        (c["choices"][0].get("delta") or {}).get("content") or "" for c in chunks if c.get("choices")
    )


@contextmanager
def front_with_a_busy_healthy_replica(
    good_url: str, bad_url: str
) -> Iterator[tuple[str, UpstreamEngine, threading.Thread, list[tuple[float, str]]]]:
    """A front over [healthy, bad]; a long stream already running on the healthy one."""
    engine = UpstreamEngine([good_url, bad_url], TOK, model="replay", health_interval=0, read_timeout=STALL)
    with serve(create_app(engine, ServerConfig())) as url:
        other: list[tuple[float, str]] = []
        thread = threading.Thread(target=stream, args=(url, other))
        thread.start()
        deadline = time.monotonic() + 10
        while engine.replicas[0].active == 0:  # the healthy replica has it: the next request goes to bad
            assert time.monotonic() < deadline
            time.sleep(0.01)
        yield url, engine, thread, other


def check_untouched(thread: threading.Thread, other: list[tuple[float, str]]) -> None:
    thread.join(60)
    assert other[-1][1] == "[DONE]" and text_of(other) == LONG  # the other stream, whole and exact


def check_failed_fast(payloads: list[tuple[float, str]], within: float) -> dict[str, object]:
    """The stream had the good frames, then an error event and [DONE], the error within ``within`` s of the
    last good frame. Returns the error."""
    assert payloads[-1][1] == "[DONE]"
    error = json.loads(payloads[-2][1])["error"]
    assert set(error) >= {"message", "type", "param", "code"} and error["type"] == "server_error"
    good = payloads[:-2]
    assert TEXT.startswith(text_of(good)) and text_of(good)  # the good frames came first
    assert payloads[-2][0] - good[-1][0] < within, payloads[-2][0] - good[-1][0]
    return error  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("mode", "within", "says"),
    [
        ("stall", STALL + 1.0, "no data from the upstream"),
        ("reset", 1.0, "mid-stream"),
        ("oversized", 5.0, "max_event_bytes"),
        ("nonjson", 1.0, "not JSON"),
    ],
)
def test_a_replica_that_fails_mid_stream_ends_its_streams_cleanly_and_no_other(
    mode: str, within: float, says: str, healthy: str, tmp_path: Path
) -> None:
    with (
        faulty_replica(mode, tmp_path) as bad,
        front_with_a_busy_healthy_replica(healthy, bad) as (url, engine, thread, other),
    ):
        payloads: list[tuple[float, str]] = []
        stream(url, payloads)
        error = check_failed_fast(payloads, within)
        assert says in str(error["message"])
        assert not engine.replicas[1].healthy and engine.replicas[1].active == 0  # marked down, nothing held
        assert engine.replicas[0].healthy
        check_untouched(thread, other)


def test_a_replica_killed_mid_stream_ends_its_streams_cleanly_and_no_other(healthy: str) -> None:
    with (
        replay_replica(TEXT * 50, rate=30.0) as (bad, proc),
        front_with_a_busy_healthy_replica(healthy, bad) as (
            url,
            engine,
            thread,
            other,
        ),
    ):
        payloads: list[tuple[float, str]] = []
        reader = threading.Thread(target=stream, args=(url, payloads))
        reader.start()
        deadline = time.monotonic() + 10
        while len(payloads) < GOOD + 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        reader.join(STALL + 5)
        error = json.loads(payloads[-2][1])["error"]
        assert payloads[-1][1] == "[DONE]" and "mid-stream" in error["message"]
        assert payloads[-2][0] - payloads[-3][0] < 1.0  # at once, not after the stall timeout
        assert not engine.replicas[1].healthy
        check_untouched(thread, other)


def test_a_replica_that_answers_html_is_marked_down_and_the_request_goes_elsewhere(
    healthy: str, tmp_path: Path
) -> None:
    with (
        faulty_replica("html", tmp_path) as bad,
        front_with_a_busy_healthy_replica(healthy, bad) as (url, engine, thread, other),
    ):
        payloads: list[tuple[float, str]] = []
        stream(url, payloads)  # before any token: retried on the healthy replica, whole
        assert payloads[-1][1] == "[DONE]" and text_of(payloads) == LONG
        assert not engine.replicas[1].healthy and "text/html" in engine.replicas[1].last_error
        check_untouched(thread, other)
    with faulty_replica("html", tmp_path) as bad:  # alone, it fails the stream: an error event and [DONE]
        engine = UpstreamEngine([bad], TOK, model="replay", health_interval=0, read_timeout=STALL)
        with serve(create_app(engine, ServerConfig())) as url:
            payloads = []
            stream(url, payloads)
            assert payloads[-1][1] == "[DONE]"
            assert "text/html" in json.loads(payloads[-2][1])["error"]["message"]


def test_a_kept_connection_the_replica_closed_as_it_was_reused_is_asked_again_on_a_new_one(
    tmp_path: Path,
) -> None:
    with faulty_replica("drop-second", tmp_path) as replica:
        engine = UpstreamEngine([replica], TOK, model="replay", health_interval=0, read_timeout=STALL)
        with serve(create_app(engine, ServerConfig())) as url:
            for _ in range(3):  # the second request meets the closed connection; the third a new kept one
                payloads: list[tuple[float, str]] = []
                stream(url, payloads)
                assert payloads[-1][1] == "[DONE]" and text_of(payloads) == TEXT
            assert engine.replicas[0].healthy and engine.replicas[0].failures == 0

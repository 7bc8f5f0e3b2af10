"""``tokenrelay generate`` through a running server (``--url``, ``--port``, ``TOKENRELAY_URL``), and Ctrl-C.

The server is real (uvicorn on a socket, the replay engine with SmolLM2's tokenizer); the command is a real
subprocess.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from _terminal import EXTRA_BLOCKER, cli_env, tokenrelay
from _uvicorn import serve
from server_helpers import replay_app
from tokenrelay._errors import ConfigError
from tokenrelay._urls import api_base, normalize_url

CORPUS_PATH = Path(__file__).parent / "data" / "multilingual.txt"
CORPUS = CORPUS_PATH.read_bytes().decode("utf-8")


def test_generate_streams_through_a_running_server() -> None:
    app, _ = replay_app(CORPUS, rate=None, max_tokens_limit=100_000)
    with serve(app) as url:
        port = url.rsplit(":", 1)[1]
        by_url = tokenrelay("generate", "--url", url, "--max-tokens", "100000", "hello")
        by_port = tokenrelay("generate", "--port", port, "--max-tokens", "100000", "hello")
        by_env = tokenrelay(
            "generate", "--max-tokens", "100000", "hello", env=cli_env(TOKENRELAY_URL=f"127.0.0.1:{port}/v1")
        )
    for proc in (by_url, by_port, by_env):
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.decode("utf-8") == CORPUS + "\n"  # CRLF, emoji, CJK: exact through the server
        err = proc.stderr.decode()
        assert "TTFT " in err and "finish: stop" in err and "Traceback" not in err
        assert "loading model" not in err  # no model loaded here: the server has it


def test_generate_json_and_raw_through_a_server() -> None:
    app, _ = replay_app(None, rate=None)  # replays the prompt: what the server received comes back
    with serve(app) as url:
        chat = tokenrelay("generate", "--url", url, "--json", "--system", "be brief", "hi ☕")
        raw = tokenrelay("generate", "--url", url + "/v1/chat/completions", "--raw", "plain ☕ text")
    *deltas, summary = [json.loads(line) for line in chat.stdout.decode().splitlines()]
    # The replay engine renders the messages it got without a template: the system message went along.
    assert "".join(d["delta"] for d in deltas) == "system: be brief\nuser: hi ☕\n"
    assert summary["finish_reason"] == "stop" and summary["interrupted"] is False
    assert summary["usage"]["completion_tokens"] > 0 and summary["timings"]["ttft_s"] > 0
    assert raw.returncode == 0 and raw.stdout.decode() == "plain ☕ text\n"  # /v1/completions, no template


def test_api_key_from_option_or_environment_and_a_wrong_key() -> None:
    app, _ = replay_app("ok", rate=None, api_key="k-123")
    with serve(app) as url:
        with_option = tokenrelay("generate", "--url", url, "--api-key", "k-123", "x")
        with_env = tokenrelay("generate", "--url", url, "x", env=cli_env(TOKENRELAY_API_KEY="k-123"))
        wrong = tokenrelay("generate", "--url", url, "--api-key", "nope", "x")
    assert with_option.stdout == with_env.stdout == b"ok\n"
    assert wrong.returncode == 2 and wrong.stdout == b""
    assert wrong.stderr.decode().strip() == (
        "tokenrelay generate: error: invalid or missing API key (send 'Authorization: Bearer KEY' or 'x-api-key: KEY')"
    )


def test_an_unreachable_server_is_one_line() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        proc = tokenrelay("generate", "--port", str(port), "hi")
    assert proc.returncode == 2
    err = proc.stderr.decode().strip()
    assert err.startswith(f"tokenrelay generate: error: cannot reach http://127.0.0.1:{port}/v1: ")
    assert "\n" not in err and "Traceback" not in err


def test_url_normalisation() -> None:
    assert normalize_url("8000") == "http://127.0.0.1:8000"
    assert normalize_url(":8000") == "http://127.0.0.1:8000"
    assert normalize_url("localhost:8000") == "http://localhost:8000"
    assert normalize_url("example.com") == "http://example.com"
    assert normalize_url(" https://example.com/v1 ") == "https://example.com/v1"
    assert normalize_url("[::1]:9") == "http://[::1]:9"
    for bad in ("ftp://x", "http://", "host:port"):
        with pytest.raises(ConfigError, match=r"URL|port"):
            normalize_url(bad)
    assert api_base("h:1") == "http://h:1/v1"
    assert api_base("http://h:1/v1/") == "http://h:1/v1"
    assert api_base("http://h:1/v1/chat/completions") == "http://h:1/v1"
    assert api_base("https://h/openai/v1/completions") == "https://h/openai/v1"


def test_doctor_takes_host_and_port() -> None:
    app, _ = replay_app("m")
    with serve(app) as url:
        hostport = url.removeprefix("http://")
        proc = tokenrelay(
            "doctor", hostport, "--json", "--events", "5", "--cadence-ms", "5", "--no-cancel", timeout=60
        )
    assert b"Traceback" not in proc.stderr
    report = json.loads(proc.stdout)
    assert report["url"] == url
    assert proc.returncode == 0, proc.stdout


def slow_generate(*args: str) -> tuple[subprocess.Popen[bytes], bytes]:
    """A reply that takes seconds; returns once its first bytes arrived."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokenrelay", "generate", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(),
    )
    assert proc.stdout is not None
    first = proc.stdout.read1(65536)  # type: ignore[attr-defined]
    return proc, first


@pytest.mark.parametrize("json_lines", [False, True])
def test_ctrl_c_ends_the_line_and_summarises(json_lines: bool, tmp_path: Path) -> None:
    text = tmp_path / "long.txt"
    text.write_text("word " * 2000)
    extra = ["--json"] if json_lines else []
    replay = ["--engine", "replay", "--text-file", str(text), "--rate", "40", "--max-tokens", "5000"]
    proc, first = slow_generate("x", *replay, *extra)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    out = first + out
    assert proc.returncode == 130
    assert b"Traceback" not in err and b"KeyboardInterrupt" not in err
    assert out.endswith(b"\n")  # the terminal is left at the start of a line
    if json_lines:
        *deltas, summary = [json.loads(line) for line in out.decode().splitlines()]
        assert summary["interrupted"] is True and summary["finish_reason"] is None
        assert 0 < len(deltas) < 2000 and summary["timings"]["ttft_s"] > 0
        assert summary["timings"]["total_s"] > summary["timings"]["ttft_s"]
    else:
        assert out.startswith(b"word word") and out.count(b"word") < 2000
        assert "finish: interrupted" in err.decode()


def test_ctrl_c_through_a_server_stops_its_generation(tmp_path: Path) -> None:
    app, _ = replay_app("word " * 2000, rate=40, max_tokens_limit=5000)
    with serve(app) as url:
        proc, _ = slow_generate("--url", url, "--max-tokens", "5000", "x")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 130 and b"Traceback" not in err
        deadline = time.monotonic() + 5
        while httpx.get(url + "/health").json()["active"]:  # the server saw its client leave
            assert time.monotonic() < deadline
            time.sleep(0.05)
        metrics = httpx.get(url + "/metrics").text
    assert 'tokenrelay_cancellations_total{model="replay"} 1.0' in metrics


def test_talking_to_a_server_needs_only_the_core() -> None:
    """No extra installed (as after a bare ``pip install tokenrelay``): ``generate --url`` still works."""
    from tokenrelay._extras import EXTRA_OF_MODULE

    app, _ = replay_app("core only ☕", rate=None)
    with serve(app) as url:
        proc = subprocess.run(
            [sys.executable, "-c", EXTRA_BLOCKER, ",".join(EXTRA_OF_MODULE), "generate", "--url", url, "x"],
            env=cli_env(),
            capture_output=True,
            timeout=60,
            check=False,
        )
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode() == "core only ☕\n"

"""llama.cpp's own ``llama-server`` for the tests that relay from it: find the binary, run it on a free port.

The binary is built by ``make llama-server`` (the llama.cpp sources inside the llama-cpp-python sdist, the
project's portable flags) into ``~/.cache/tokenrelay/llama-server/``; ``TOKENRELAY_LLAMA_SERVER`` names another.
Without it the tests skip, except in CI (``CI=true``), where a missing binary is a failure: CI must run them.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from server_helpers import free_port
from tokenrelay.engines.llamacpp import resolve_model_path

__all__ = ["LlamaServer", "llama_server_binary", "running_llama_server"]

DEFAULT_BINARY = Path.home() / ".cache" / "tokenrelay" / "llama-server" / "llama-server"


def llama_server_binary() -> Path:
    """The llama-server to test against; skips (fails in CI) when there is none."""
    path = Path(os.environ.get("TOKENRELAY_LLAMA_SERVER") or DEFAULT_BINARY).expanduser()
    if path.is_file() and os.access(path, os.X_OK):
        return path
    message = f"no llama-server at {path}: `make llama-server` builds it (about 7 minutes on 2 cores)"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message + "; CI must run the llama-server tests", pytrace=False)
    pytest.skip(message)


class LlamaServer:
    """A running llama-server: its base URL and process."""

    def __init__(self, url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.url = url
        self.proc = proc
        self.log = log

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def slots_busy(self) -> int:
        """How many of its slots are generating now (``GET /slots``)."""
        return sum(1 for slot in httpx.get(self.url + "/slots", timeout=5).json() if slot["is_processing"])

    def metric(self, name: str) -> float:
        """One of its Prometheus numbers (``GET /metrics``, the server runs with ``--metrics``)."""
        for line in httpx.get(self.url + "/metrics", timeout=5).text.splitlines():
            if line.startswith(f"llamacpp:{name} "):
                return float(line.split()[1])
        raise AssertionError(f"llama-server /metrics has no llamacpp:{name}")


@contextmanager
def running_llama_server(
    *, parallel: int = 2, threads: int = 1, timeout: float = 120, extra: Sequence[str] = ()
) -> Iterator[LlamaServer]:
    """llama-server over the embedded SmolLM2 GGUF on a free loopback port, until the block ends (``extra``:
    more of its arguments)."""
    binary = llama_server_binary()
    model = resolve_model_path("smollm2")
    with tempfile.TemporaryDirectory(prefix="llama-server-") as tmp:
        for attempt in range(3):  # the port is free when chosen; another process may take it first
            port = free_port()
            log = Path(tmp) / f"llama-server-{attempt}.log"
            argv = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port)]
            argv += ["--parallel", str(parallel), "-c", str(2048 * parallel), "-t", str(threads)]
            argv += ["-tb", str(threads), "--no-webui", "--metrics", *extra]
            with log.open("wb") as out:
                proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
            server = LlamaServer(f"http://127.0.0.1:{port}", proc, log)
            deadline = time.monotonic() + timeout
            while proc.poll() is None and time.monotonic() < deadline:
                try:
                    if httpx.get(server.url + "/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
            if proc.poll() is None and time.monotonic() < deadline:
                try:
                    yield server
                finally:
                    server.stop()
                return
            server.stop()
        raise AssertionError(f"llama-server did not start:\n{log.read_text(errors='replace')[-3000:]}")


# -- recording: `PYTHONPATH=src python tests/llama_server.py` rewrites tests/data/upstream/llama-server-*.json ----

RECORD_CASES: list[tuple[str, str | list[dict[str, str]], int]] = [
    ("/v1/chat/completions", [{"role": "user", "content": "Write a happy message with three emoji."}], 40),
    ("/v1/chat/completions", [{"role": "user", "content": "Write a happy message with three emoji."}], 7),
    ("/v1/chat/completions", [{"role": "user", "content": "How do you say 'thank you' in Japanese?"}], 48),
    ("/v1/chat/completions", [{"role": "user", "content": "Say hi."}], 100),
    ("/v1/completions", "The three primary colours are", 24),
]


def record() -> Path:
    """Stream each case from a real llama-server as tokenrelay asks for it, with its own non-streamed reply."""
    import json

    from tokenrelay.engines._upstream_wire import request

    cases = []
    with running_llama_server() as server:
        version = httpx.get(server.url + "/props", timeout=5).json().get("build_info", "unknown")
        for path, prompt, max_tokens in RECORD_CASES:
            _, body = request(
                "llamacpp", prompt, model="smol", max_tokens=max_tokens, temperature=0.0, top_p=1.0, seed=None
            )
            # The model is named by its path on the recording machine: keep only its file name.
            model = resolve_model_path("smollm2")
            stream = httpx.post(server.url + path, json=body, timeout=120).text.replace(
                str(model), model.name
            )
            whole = httpx.post(server.url + path, json={**body, "stream": False}, timeout=120).json()
            choice = whole["choices"][0]
            reply = choice["message"]["content"] if "message" in choice else choice["text"]
            cases.append(
                {
                    "path": path,
                    "request": body,
                    "reply": reply,
                    "finish_reason": choice["finish_reason"],
                    "usage": {k: whole["usage"][k] for k in ("prompt_tokens", "completion_tokens")},
                    "stream": stream,
                }
            )
    out = Path(__file__).parent / "data" / "upstream" / f"llama-server-{version}.json"
    server_name = f"llama.cpp llama-server {version} (llama-cpp-python 0.3.36's sources, `make llama-server`)"
    document = {"server": server_name + ", SmolLM2-135M-Instruct Q4_1 GGUF", "cases": cases}
    out.write_text(json.dumps(document, ensure_ascii=False, indent=1) + "\n", "utf-8")
    return out


if __name__ == "__main__":
    print(record())

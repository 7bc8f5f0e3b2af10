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
from collections.abc import Iterator
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
    *, parallel: int = 2, threads: int = 1, timeout: float = 120
) -> Iterator[LlamaServer]:
    """llama-server over the embedded SmolLM2 GGUF on a free loopback port, until the block ends."""
    binary = llama_server_binary()
    model = resolve_model_path("smollm2")
    with tempfile.TemporaryDirectory(prefix="llama-server-") as tmp:
        for attempt in range(3):  # the port is free when chosen; another process may take it first
            port = free_port()
            log = Path(tmp) / f"llama-server-{attempt}.log"
            argv = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port)]
            argv += ["--parallel", str(parallel), "-c", str(2048 * parallel), "-t", str(threads)]
            argv += ["-tb", str(threads), "--no-webui", "--metrics"]
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

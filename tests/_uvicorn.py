"""Serve an ASGI app with real uvicorn on 127.0.0.1, an ephemeral port, in a background thread.

Streaming tests need real sockets: chunk boundaries, connection close and chunked-encoding ends are what the
client must cope with, and an in-process transport hides them. Use it as a context manager::

    with serve(app) as base_url:
        httpx.get(base_url + "/health")
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from starlette.types import ASGIApp

__all__ = ["serve"]


@contextmanager
def serve(app: ASGIApp, *, startup_timeout: float = 10.0, http: str = "auto") -> Iterator[str]:
    """Run ``app`` until the block ends; yields its base URL (``http://127.0.0.1:PORT``).

    ``http`` picks uvicorn's HTTP implementation ("auto", "h11", "httptools"): the nginx tests pin h11.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))  # the port is known before the server starts: no race to find it
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="off", http=http, timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@contextmanager
def serve_relay(app: ASGIApp, *, startup_timeout: float = 10.0, **options: object) -> Iterator[str]:
    """As ``serve``, but through ``tokenrelay.server.run.uvicorn_server`` (header timeout, abort, drain).

    uvicorn's loggers propagate to the root logger here, so ``caplog`` sees what uvicorn reports.
    """
    from tokenrelay.server.run import uvicorn_server

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn_server(app, port=port, log_level="info", log_config=None, **options)  # type: ignore[arg-type]
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        sock.close()

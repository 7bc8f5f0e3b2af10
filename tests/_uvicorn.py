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


def _loopback_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))  # the port is known before the server starts: no race to find it
    return sock


@contextmanager
def _running(
    server: uvicorn.Server, sock: socket.socket, startup_timeout: float, join_timeout: float
) -> Iterator[str]:
    """Run ``server`` on ``sock`` in a daemon thread until the block ends; yields its base URL."""
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=join_timeout)
        sock.close()


@contextmanager
def serve(app: ASGIApp, *, startup_timeout: float = 10.0, http: str = "auto") -> Iterator[str]:
    """Run ``app`` until the block ends; yields its base URL (``http://127.0.0.1:PORT``).

    ``http`` picks uvicorn's HTTP implementation ("auto", "h11", "httptools"): the nginx tests pin h11.
    """
    config = uvicorn.Config(app, log_level="warning", lifespan="auto", http=http, timeout_graceful_shutdown=2)
    with _running(uvicorn.Server(config), _loopback_socket(), startup_timeout, join_timeout=10) as url:
        yield url


@contextmanager
def serve_relay(app: ASGIApp, *, startup_timeout: float = 10.0, **options: object) -> Iterator[str]:
    """As ``serve``, but through ``tokenrelay.server.run.uvicorn_server`` (header timeout, abort, drain).

    uvicorn's loggers propagate to the root logger here, so ``caplog`` sees what uvicorn reports.
    """
    from tokenrelay.server.run import uvicorn_server

    sock = _loopback_socket()
    server = uvicorn_server(app, port=sock.getsockname()[1], log_level="info", log_config=None, **options)  # type: ignore[arg-type]
    with _running(server, sock, startup_timeout, join_timeout=20) as url:
        yield url

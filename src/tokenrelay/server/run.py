"""Run an app with uvicorn: loopback by default, a log line per request, graceful shutdown.

The listening socket is bound first (:func:`bind_socket`), before the model loads, so a port already in use
is a one-line error at start rather than a failure after seconds of loading and a "serving on" line.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import socket

import uvicorn

from tokenrelay._errors import ConfigError
from tokenrelay.engines.base import Engine

from .app import ServerConfig, create_app

__all__ = ["bind_socket", "serve"]


def bind_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (``port`` 0 picks a free one), as uvicorn would bind it.

    Raises :class:`ConfigError` with one line when the address is taken or cannot be bound.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        # SO_REUSEADDR lets a restarted server take its port back from TIME_WAIT; it does not let two
        # servers listen on one port (Linux and macOS refuse that with EADDRINUSE).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"port {port} on {host} is already in use (another server?); choose one with --port"
            ) from exc
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sock.set_inheritable(True)
    return sock


class _Server(uvicorn.Server):
    """uvicorn on a socket bound beforehand, logging its address as uvicorn does when it binds one itself
    ("Uvicorn running on http://HOST:PORT"; scripts and the e2e harness read the port from it)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if sockets and self.started:
            host, port = sockets[0].getsockname()[:2]
            address = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
            logging.getLogger("uvicorn.error").info("Uvicorn running on %s (Press CTRL+C to quit)", address)


def serve(
    engine: Engine,
    config: ServerConfig | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
    graceful_timeout: int = 5,
    sock: socket.socket | None = None,
) -> None:
    """Serve ``engine`` until interrupted. Open streams get ``graceful_timeout`` seconds to finish on
    shutdown; then they are cancelled, which stops their generations. ``sock``, from :func:`bind_socket`,
    is listened on instead of binding ``host:port`` here."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(engine, config)
    if sock is None:
        sock = bind_socket(host, port)
    uvicorn_config = uvicorn.Config(
        app,
        host=host,
        port=sock.getsockname()[1],
        log_level=log_level,
        access_log=False,  # the app logs one line per generation with its timings instead
        timeout_graceful_shutdown=graceful_timeout,
    )
    server = _Server(uvicorn_config)
    with sock, contextlib.suppress(KeyboardInterrupt):
        # uvicorn shuts down gracefully on Ctrl-C, then re-raises the signal; Ctrl-C is how a user stops a
        # server, so it is a clean exit (status 0), as with uvicorn.run.
        server.run(sockets=[sock])
    if not server.started:  # uvicorn logged why (a failing lifespan); exit as uvicorn.run would
        raise SystemExit(3)

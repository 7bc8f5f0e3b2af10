"""Run an app with uvicorn: loopback by default, a log line per request, slow clients dropped, graceful shutdown.

The listening socket is bound first (:func:`bind_socket`), before the model loads, so a port already in use
is a one-line error at start rather than a failure after seconds of loading and a "serving on" line.

Two things uvicorn does not do on its own (issue 12):

* **Header timeout.** uvicorn keeps a connection that trickles its request line and headers (or never sends
  any) for as long as the client likes. ``guarded_protocol`` wraps uvicorn's HTTP protocol: from the moment a
  connection opens, or the next request's first byte arrives, the headers must be complete within
  ``header_timeout`` seconds, else the connection is closed. (The body has its own deadline in the app,
  ``ServerConfig.body_timeout``.) The same wrapper offers the app a ``tokenrelay.abort`` scope extension, so a
  stream whose client stopped reading closes its connection at once instead of leaving uvicorn to report a
  half-sent response as an error.
* **Frames straight to the connection.** A stream writes one frame per token, and uvicorn's ASGI ``send`` (a
  message dict and two coroutines per frame, its checks and framing in Python) cost about a tenth of the
  server's CPU per token in-process (issue 22, ``benchmarks/server_path.py --vs-send``). The wrapper offers a
  ``tokenrelay.body`` scope extension: called with the app's ``send`` once the response's headers are sent,
  it gives a :class:`ChunkedBody` that writes each frame to the transport as one HTTP/1.1 chunk (uvicorn's
  own framing: httptools' raw chunks, h11's ``Data`` events) and reports uvicorn's flow control; the body's
  last message still goes through ``send``, so uvicorn ends the response and keeps the connection as it
  always does. Where a middleware wraps ``send``, or uvicorn's internals are not the ones read here, it
  gives ``None`` and the app sends as any ASGI app does.
* **Shutdown that tells clients.** On SIGTERM or SIGINT uvicorn stops accepting connections; ``RelayServer``
  then has the app refuse new generations and end the ones still running after ``graceful_timeout`` seconds
  with an error event and ``[DONE]`` (``create_app``'s ``drain``), before uvicorn's own, later, deadline
  would cancel them mid-frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import sys
from collections.abc import Callable
from typing import Any, Protocol

import h11
import uvicorn
from uvicorn.config import HTTP_PROTOCOLS
from uvicorn.importer import import_from_string

from tokenrelay._errors import ConfigError
from tokenrelay.engines.base import Engine

from .app import ServerConfig, create_app

__all__ = [
    "ChunkedBody",
    "RelayServer",
    "bind_socket",
    "body_extension",
    "guarded_protocol",
    "serve",
    "uvicorn_server",
]

log = logging.getLogger("tokenrelay.server")

# uvicorn's own deadline comes this long after ours: by then every stream has had its final event.
_BACKSTOP = 5.0


def bind_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A TCP socket bound to ``host:port`` (``port`` 0 picks a free one), as uvicorn would bind it;
    ``reuse_port``: with SO_REUSEPORT, to listen beside the server's other sockets on that port (workers).

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
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
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


class ChunkedBody:
    """The body of one started response, written straight to its connection: each ``write`` one chunk.

    ``write`` returns false, writing nothing, once the client is gone. ``paused`` is uvicorn's flow control
    (the transport's buffer is over its high-water mark: the client reads slower than frames come);
    ``drained()`` waits until it is not (or the client is gone). The response's last message (``more_body``
    false) still goes through the ASGI ``send``, so uvicorn ends the response and keeps the connection.
    """

    __slots__ = ("_conn", "_cycle", "_flow", "_transport")

    def __init__(self, cycle: Any, transport: asyncio.Transport) -> None:
        self._cycle = cycle
        self._flow = cycle.flow
        self._transport = transport
        # h11's connection (uvicorn's h11 protocol: it frames the body and tracks its state), else None
        # (httptools': uvicorn frames chunks itself, as ``write`` does).
        self._conn: h11.Connection | None = getattr(cycle, "conn", None)

    def write(self, data: bytes) -> bool:
        if self._cycle.disconnected:
            return False
        if self._conn is None:
            # The chunk's size line, frame and end formatted at once: one buffer, one socket write.
            self._transport.write(b"%x\r\n%b\r\n" % (len(data), data))
        else:
            out = self._conn.send(h11.Data(data=data))
            if out:
                self._transport.write(out)
        return True

    @property
    def paused(self) -> bool:
        return bool(self._flow.write_paused) and not self._cycle.disconnected

    async def drained(self) -> None:
        await self._flow.drain()


def body_extension(cycle_class: type) -> Callable[[object], ChunkedBody | None]:
    """The ``tokenrelay.body`` extension of a uvicorn protocol whose request cycles are ``cycle_class``.

    Called with the app's ``send`` once the response's headers are sent, it gives that response's
    :class:`ChunkedBody`; ``None`` (use ``send``) when ``send`` is not a ``cycle_class`` object's own (a
    middleware wraps it: it may count or rewrite the body, so it must see every byte), for a body uvicorn
    frames otherwise (a ``Content-Length``, a ``HEAD``), or where the cycle lacks what is read here (another
    uvicorn). It holds no request: the cycle is ``send``'s, so a request's scope refers to nothing that
    refers back to it.
    """

    def body_of(send: object) -> ChunkedBody | None:
        owner = getattr(send, "__self__", None)
        if type(owner) is not cycle_class:
            return None
        cycle: Any = owner
        try:
            if not cycle.response_started or cycle.response_complete or cycle.disconnected:
                return None
            if cycle.scope["method"] == "HEAD" or not hasattr(cycle, "flow"):
                return None
            if getattr(cycle, "conn", None) is None and getattr(cycle, "chunked_encoding", None) is not True:
                return None  # (httptools: a Content-Length body, or none at all)
            transport = cycle.transport
        except (AttributeError, KeyError, TypeError):  # another uvicorn's internals: the ASGI send it is
            return None
        return ChunkedBody(cycle, transport)

    return body_of


class _Drains(Protocol):
    def drain(self, grace: float) -> None: ...


def guarded_protocol(http: str, header_timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's ``http`` protocol class ("auto", "h11", "httptools"), with a header deadline."""
    base: type[Any] = import_from_string(HTTP_PROTOCOLS.get(http, http))

    cycle_class = getattr(sys.modules.get(base.__module__), "RequestResponseCycle", None)
    body_of = body_extension(cycle_class) if isinstance(cycle_class, type) else None

    class Guarded(base):  # type: ignore[misc]
        # Works on what both of uvicorn's HTTP/1.1 protocols have: ``transport``, and ``cycle``, the request
        # whose headers are complete (a new object for each request).
        _header_timer: asyncio.TimerHandle | None = None
        _seen_cycle: Any = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            cycle: Any = getattr(self, "cycle", None)
            if cycle is not None and cycle is not self._seen_cycle:
                # A request's headers are complete: disarm, and let the app abort this connection.
                self._seen_cycle = cycle
                self._disarm()
                extensions = cycle.scope.setdefault("extensions", {})
                extensions["tokenrelay.abort"] = self.transport.abort
                if body_of is not None:
                    extensions["tokenrelay.body"] = body_of
            elif self._header_timer is None and (cycle is None or cycle.response_complete):
                self._arm()  # bytes of a next request (or of a body nobody reads): its headers are due

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            loop = asyncio.get_running_loop()
            self._header_timer = loop.call_later(header_timeout, self._headers_late)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_late(self) -> None:
            self._header_timer = None
            cycle: Any = getattr(self, "cycle", None)
            if cycle is not None and not cycle.response_complete:
                return  # a request is being served: not ours to cut
            if not self.transport.is_closing():
                peer = self.transport.get_extra_info("peername")
                log.info(
                    "closed a connection from %s: no complete request headers in %gs", peer, header_timeout
                )
                self.transport.abort()

    Guarded.__name__ = Guarded.__qualname__ = f"Guarded{base.__name__}"
    return Guarded


class RelayServer(uvicorn.Server):
    """uvicorn's server, telling the app when shutdown begins so running streams can end properly."""

    def __init__(
        self,
        config: uvicorn.Config,
        *,
        graceful_timeout: float,
        app_state: _Drains | None,
        on_started: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(config)
        self.graceful_timeout = graceful_timeout
        self.app_state = app_state
        self.on_started = on_started

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and self.on_started is not None:
            self.on_started()
        if sockets and self.started:
            # uvicorn logs its address only when it binds the socket itself; scripts and the e2e harness read
            # the port from this line ("Uvicorn running on http://HOST:PORT").
            host, port = sockets[0].getsockname()[:2]
            address = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
            logging.getLogger("uvicorn.error").info("Uvicorn running on %s (Press CTRL+C to quit)", address)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.app_state is not None:
            self.app_state.drain(self.graceful_timeout)
        await super().shutdown(sockets)
        # uvicorn re-raises the signal that stopped it once it is done (so SIGINT ends in KeyboardInterrupt);
        # a shutdown that completed gracefully is a normal exit, status 0, for SIGTERM and SIGINT alike.
        captured = getattr(self, "_captured_signals", None)
        if isinstance(captured, list) and not self.force_exit:
            captured.clear()


def uvicorn_server(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
    graceful_timeout: float = 5.0,
    header_timeout: float = 10.0,
    http: str = "auto",
    on_started: Callable[[], None] | None = None,
    **uvicorn_options: Any,
) -> RelayServer:
    """A uvicorn server for ``app`` (a ``create_app`` app, or any ASGI app) with the guards above;
    ``on_started`` is called once it listens; ``uvicorn_options`` go to ``uvicorn.Config``."""
    config = uvicorn.Config(
        app,
        **uvicorn_options,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,  # the app logs one line per generation with its timings instead
        http=guarded_protocol(http, header_timeout),
        timeout_graceful_shutdown=int(graceful_timeout + _BACKSTOP + 0.999),
    )
    state = getattr(getattr(app, "state", None), "tokenrelay", None)
    return RelayServer(config, graceful_timeout=graceful_timeout, app_state=state, on_started=on_started)


def serve(
    engine: Engine,
    config: ServerConfig | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
    graceful_timeout: float = 5.0,
    header_timeout: float = 10.0,
    sock: socket.socket | None = None,
) -> None:
    """Serve ``engine`` until SIGTERM or SIGINT. Running generations get ``graceful_timeout`` seconds to finish;
    then each ends with an error event and ``[DONE]`` (a whole-body request gets a 503). ``sock``, from
    :func:`bind_socket`, is listened on instead of binding ``host:port`` here."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(engine, config)
    if sock is None:
        sock = bind_socket(host, port)
    server = uvicorn_server(
        app,
        host=host,
        port=sock.getsockname()[1],
        log_level=log_level,
        graceful_timeout=graceful_timeout,
        header_timeout=header_timeout,
    )
    with sock, contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=[sock])
    if not server.started:  # uvicorn logged why (a failing lifespan); exit as uvicorn.run would
        raise SystemExit(3)

"""The OpenAI-compatible app: configuration, routes, errors and shutdown.

``create_app(engine, config)`` returns a FastAPI app. A generation request goes: API key (for every costly
path, ``intake.needs_key``) → body size and time limits → ``Intake.prepare`` (400s, the model's 404, the prompt's
tokens, off the event loop when large) → admission (429) → a ``generation.Run`` whose response runs the engine
through ``stream_events`` (``TextStream``: detokenizer + stops) and the endpoint's writer (``wire/``). Every error
becomes an OpenAI-shaped body ``{"error": {"message", "type", "param", "code"}}``, or Anthropic's on the Messages
API's paths (``generation.ERROR_BODIES``); the server keeps serving.

Shutdown (``drain``, called by ``server.run`` when SIGTERM or SIGINT arrives): new generations get a 503,
running ones get ``grace`` seconds to finish, then each is ended with an OpenAI-shaped error event and
``data: [DONE]`` (a whole-body request gets a 503), so every client learns why its reply stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.gzip import GZipMiddleware
from starlette.types import Receive, Scope, Send

from tokenrelay import __version__
from tokenrelay._errors import NotFoundError, RateLimitError, RequestTimeoutError, TokenRelayError
from tokenrelay._parsers import resolve_reasoning_parser, resolve_tool_call_parser
from tokenrelay.engines.base import Engine

from .admission import Admission
from .collector import restore_collector, tune_collector
from .config import ServerConfig
from .diagnostics import add_diagnostics_routes
from .docs import add_docs_routes
from .generation import ENDPOINTS, ERROR_BODIES, Endpoint, Run, error_bytes, shutting_down
from .intake import OPEN_PATHS, ClientGone, Intake, check_key, needs_key, read_body
from .metrics import CONTENT_TYPE, ServerMetrics
from .openapi import describe
from .page import mount_page
from .responses import EventStreamResponse, JSONGenerationResponse
from .responses_store import ResponseStore, add_response_routes

if TYPE_CHECKING:
    from .board import Seat

__all__ = ["THINKING_UNAVAILABLE", "ServerConfig", "create_app"]

#: The header of a reply to a request that asked for thinking from a server that reads no reasoning format
#: (issue 31): the reply is answered without reasoning, and says so.
THINKING_UNAVAILABLE = (b"x-tokenrelay-reasoning", b"unavailable")

log = logging.getLogger("tokenrelay.server")


class _Server:
    def __init__(self, engine: Engine, config: ServerConfig, seat: Seat | None = None) -> None:
        self.engine = engine
        self.config = config
        self.seat = seat  # one of several worker processes: their shared board, and this one's row
        # The formats the reply path reads replies with (issue 31): refused here, before anything is set up.
        template = getattr(engine.tokenizer, "chat_template", None)
        self.reasoning_format = resolve_reasoning_parser(config.reasoning_parser, template)
        if self.reasoning_format is None and config.reasoning_parser is None:
            # An engine that relays reasoning a replica sent apart, as markup of its own (upstream llama-server).
            self.reasoning_format = getattr(engine, "reasoning_markup", None)
        self.tool_call_format = resolve_tool_call_parser(config.tool_call_parser)
        self.reasoning_budget = config.reasoning_budget
        share = getattr(engine, "share_counts", None)  # an engine whose counts the workers share (upstream)
        if seat is not None and share is not None:
            share(seat.board.replica_cells(seat.worker))
        self.metrics = ServerMetrics(engine.model, ENDPOINTS, multiprocess=seat is not None)
        collector = getattr(engine, "metrics_collector", None)  # an engine's own numbers (upstream replicas)
        if collector is not None:
            self.metrics.add_collector(collector())
        self.admission = Admission(
            config.max_active,
            config.max_queued,
            self.metrics,
            config.retry_after,
            shared=None if seat is None else seat.generations(),
        )
        if seat is not None:  # the gauges and /health count every worker's generations
            board = seat.board
            self.metrics.watch(lambda: board.total("active"), lambda: board.total("queued"))
        self.models = (engine.model, *config.model_aliases)
        self.intake = Intake(
            engine,
            self.models,
            max_tokens_limit=config.max_tokens_limit,
            default_max_tokens=config.default_max_tokens,
            max_prompt_chars=config.max_prompt_chars,
        )
        self.live: set[Run] = set()  # generation requests whose response has not finished cleaning up
        self.responses = ResponseStore(
            config.responses_store_count,
            config.responses_store_bytes,
            workers=1 if seat is None else seat.board.workers,
        )
        self.intake.resolvers["responses"] = self.responses.resolve
        self.draining = False

    def drain(self, grace: float) -> None:
        """Shutdown has begun: refuse new generations; end the running ones after ``grace`` seconds."""
        if self.draining:
            return
        self.draining = True
        log.info("shutting down: %d generations running, %.1f s to finish", len(self.live), grace)
        asyncio.get_running_loop().call_later(grace, self.interrupt_all)

    def interrupt_all(self) -> None:
        if self.live:
            log.info("grace period over: ending %d generations", len(self.live))
        for run in list(self.live):
            run.interrupt()


def _error_response(
    exc: TokenRelayError,
    headers: Mapping[str, str] | None = None,
    endpoint: Endpoint | None = None,
    error_body: Callable[[TokenRelayError], tuple[int, bytes]] | None = None,
) -> Response:
    """An error in the shape of ``endpoint``'s dialect, or ``error_body``'s (OpenAI's for every other route)."""
    extra = dict(headers or {})
    if isinstance(exc, RateLimitError):
        extra["Retry-After"] = str(max(1, round(exc.retry_after)))
    if isinstance(exc, RequestTimeoutError):
        extra["Connection"] = "close"  # the rest of a late body must not be read as the next request
    if endpoint is not None:
        error_body = endpoint.error_body
    if error_body is None:
        status, body = exc.status_code, error_bytes(exc)
    else:
        status, body = error_body(exc)
    return Response(body, status, extra, media_type="application/json")


class _RelayApp(FastAPI):
    """FastAPI for everything, except that a generation request goes straight to its handler.

    A stream sends one ASGI message per token, and every middleware layer wraps ``send``: routing the two
    generation endpoints around the stack keeps the token path to our response and the server, which is
    worth about a tenth of the server's CPU per token under load (benchmarks/server_load.py). The routes are
    still declared on the app, so the OpenAPI schema and docs describe them.
    """

    generate: Callable[[Endpoint, Scope, Receive], Awaitable[Response]]
    api_key: str | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        endpoint = ENDPOINTS.get(scope["path"]) if scope["method"] == "POST" else None
        if self.api_key is not None and needs_key(scope["path"]):
            # Before routing: an unauthenticated request costs no body read, no plan, no stream (issue 12).
            try:
                check_key(scope["headers"], self.api_key)
            except TokenRelayError as exc:
                shape = ERROR_BODIES.get(scope["path"])
                await _error_response(exc, error_body=shape)(scope, receive, send)
                return
        if endpoint is None:
            await super().__call__(scope, receive, send)
            return
        response: Response
        try:
            response = await self.generate(endpoint, scope, receive)
        except TokenRelayError as exc:
            response = _error_response(exc, endpoint=endpoint)
        except ClientGone as exc:  # a normal event: one line, no traceback, no response to send
            log.info("POST %s: %s", scope["path"], exc)
            return
        except Exception as exc:
            log.exception("unexpected error on POST %s", scope["path"], exc_info=exc)
            response = _error_response(TokenRelayError("internal server error"), endpoint=endpoint)
        await response(scope, receive, send)


def create_app(engine: Engine, config: ServerConfig | None = None, *, seat: Seat | None = None) -> FastAPI:
    """An OpenAI-compatible FastAPI app serving ``engine``; ``seat``: the app of one worker process of several
    (``server.workers``), whose metrics and ``/health`` are the whole server's."""
    config = config or ServerConfig()
    server = _Server(engine, config, seat)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        thresholds = tune_collector() if config.tune_gc else None
        yield
        # On shutdown uvicorn cancels the streams still open after its graceful timeout, but does not wait
        # for them; give them a moment to close their generations and log, then release the engine.
        for _ in range(200):
            if not server.live:
                break
            await asyncio.sleep(0.01)
        server.intake.close()
        await engine.aclose()
        if thresholds is not None:  # the collector as it was (an app in a test, one of many)
            restore_collector(thresholds)

    # FastAPI's /docs and /redoc load their scripts from a CDN (blank offline): ours are served from here.
    app = _RelayApp(title="tokenrelay", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.tokenrelay = server
    app.api_key = config.api_key
    if config.gzip:  # ordinary responses only: _RelayApp sends generations around every middleware
        app.add_middleware(GZipMiddleware, minimum_size=500)

    @app.exception_handler(TokenRelayError)
    async def _relay_error(request: Request, exc: TokenRelayError) -> Response:
        return _error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        err: TokenRelayError
        if exc.status_code == 404:
            err = NotFoundError(f"{request.method} {request.url.path}: {exc.detail}")
        else:
            err = TokenRelayError(str(exc.detail))
            err.status_code, err.error_type = exc.status_code, "invalid_request_error"
        return _error_response(err, exc.headers)  # a 405 keeps its Allow header

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
        return _error_response(TokenRelayError("internal server error"))

    async def generate(endpoint: Endpoint, scope: Scope, receive: Receive) -> Response:
        if server.draining:
            raise shutting_down()
        body = await read_body(
            receive, scope["headers"], limit=config.max_body_bytes, timeout=config.body_timeout
        )
        # Everything knowable before the first byte is checked here, before any status line is sent.
        prepared = await server.intake.prepare(body, endpoint.kind)
        if server.draining:
            raise shutting_down()
        gen = prepared.gen
        server.metrics.requests_by_route[endpoint.path, gen.stream].inc()
        server.admission.enter()
        run = Run(server, prepared, endpoint.path)
        server.live.add(run)
        response: EventStreamResponse | JSONGenerationResponse
        if gen.stream:
            response = EventStreamResponse(
                run.frames(),
                keepalive_interval=config.keepalive_interval,
                send_timeout=config.send_timeout,
                on_done=run.done,
                keepalive=run.writer.keepalive,
            )
        else:
            response = JSONGenerationResponse(run.body, on_done=run.done)
        if gen.wants_thinking and server.reasoning_format is None:
            response.raw_headers.append(THINKING_UNAVAILABLE)  # answered without: the model does not think
        run.response = response
        return response

    def route(endpoint: Endpoint) -> Callable[[Request], Awaitable[Response]]:
        async def handler(request: Request) -> Response:
            return await generate(endpoint, request.scope, request.receive)

        return handler

    for endpoint in ENDPOINTS.values():
        # Declared for the OpenAPI schema and the docs; _RelayApp answers these POSTs before routing.
        app.add_api_route(
            endpoint.path,
            route(endpoint),
            methods=["POST"],
            name=endpoint.name,
            description=endpoint.summary,
            response_model=None,
        )
    app.generate = generate

    @app.post("/v1/messages/count_tokens", name="messages_count_tokens", response_model=None)
    async def count_tokens(request: Request) -> Response:
        """Anthropic's token count: the request's prompt (system, tools, messages) rendered and tokenized
        exactly as a generation of it would be; equal to that generation's `usage.input_tokens`."""
        try:
            body = await read_body(
                request.receive,
                request.scope["headers"],
                limit=config.max_body_bytes,
                timeout=config.body_timeout,
            )
            count = await server.intake.count_tokens(body)
        except TokenRelayError as exc:
            return _error_response(exc, error_body=ERROR_BODIES[request.url.path])
        except ClientGone:
            return Response(status_code=400)
        return JSONResponse({"input_tokens": count})

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        # One list both SDKs read: OpenAI's fields, and Anthropic's (type, display_name, created_at, the page).
        data = [
            {
                "id": m,
                "object": "model",
                "created": 0,
                "owned_by": "tokenrelay",
                "type": "model",
                "display_name": m,
                "created_at": "1970-01-01T00:00:00Z",
            }
            for m in server.models
        ]
        first, last = server.models[0], server.models[-1]
        return {"object": "list", "data": data, "has_more": False, "first_id": first, "last_id": last}

    @app.get("/health")
    async def health() -> JSONResponse:
        body: dict[str, object] = {"status": "draining" if server.draining else "ok", "model": engine.model}
        if seat is None:
            body["active"], body["queued"] = server.admission.active, server.admission.waiting
        else:  # the whole server: every worker's generations, and how many workers run
            board = seat.board
            body["active"], body["queued"] = board.total("active"), board.total("queued")
            states = board.worker_states()
            body["workers"] = {"configured": board.workers, "running": len(states), "each": states}
        down = server.draining
        replicas = getattr(engine, "health", None)  # an engine in front of others (upstream): their state
        if replicas is not None:
            report = await replicas()
            body["replicas"] = report["replicas"]
            if not report["healthy"]:
                body["status"], down = ("draining" if server.draining else "no healthy replica"), True
        return JSONResponse(body, status_code=503 if down else 200)

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> Response:
        return Response(server.metrics.render(), media_type=CONTENT_TYPE)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = describe(
                get_openapi(title=app.title, version=app.version, routes=app.routes),
                models=server.models,
                max_tokens_limit=config.max_tokens_limit,
                max_prompt_chars=config.max_prompt_chars,
                api_key=config.api_key is not None,
                open_paths=OPEN_PATHS,
            )
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    add_response_routes(app, server.responses)
    if config.diagnostics:  # GET /v1/diagnostics/stream and /v1/diagnostics/streams/{id}: the doctor's probe
        add_diagnostics_routes(app)
    add_docs_routes(app)
    mount_page(app)
    return app

"""The OpenAI-compatible app: routes, errors, limits, metrics, and the glue from engine events to frames.

``create_app(engine, config)`` returns a FastAPI app. A generation request goes: API key (for every costly
path, ``intake.needs_key``) → body size and time limits → ``Intake.prepare`` (400s, the model's 404, the prompt's
tokens, off the event loop when large) → admission (429) → a response that runs the engine through
``stream_events`` (``TextStream``: detokenizer + stops) and the chunk writers of ``_openai``. Every error
becomes an OpenAI-shaped body ``{"error": {"message", "type", "param", "code"}}``; the server keeps serving.

Shutdown (``drain``, called by ``server.run`` when SIGTERM or SIGINT arrives): new generations get a 503,
running ones get ``grace`` seconds to finish, then each is ended with an OpenAI-shaped error event and
``data: [DONE]`` (a whole-body request gets a 503), so every client learns why its reply stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.gzip import GZipMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from tokenrelay import __version__
from tokenrelay._errors import (
    EngineError,
    NotFoundError,
    RateLimitError,
    RequestTimeoutError,
    TokenRelayError,
    UnavailableError,
)
from tokenrelay._openai import (
    DONE,
    ChatChunkWriter,
    TextChunkWriter,
    chat_completion,
    error_event,
    json_bytes,
    text_completion,
)
from tokenrelay._stream import Finished, TextDelta, percentile
from tokenrelay.engines.base import Engine, stream_events

from .admission import Admission
from .diagnostics import add_diagnostics_routes
from .docs import add_docs_routes
from .intake import OPEN_PATHS, ClientGone, Intake, Prepared, check_key, needs_key, read_body
from .metrics import CONTENT_TYPE, ServerMetrics
from .openapi import describe
from .page import mount_page
from .responses import EventStreamResponse, JSONGenerationResponse, Outcome

__all__ = ["ServerConfig", "create_app"]

log = logging.getLogger("tokenrelay.server")


@dataclass(frozen=True)
class ServerConfig:
    """Limits and switches of one server. The defaults suit one small model on a laptop."""

    api_key: str | None = None
    max_active: int = 64  # generations running at once
    max_queued: int = 256  # generations waiting for a slot; beyond this, 429
    max_body_bytes: int = 1 << 20  # larger request bodies get 413
    body_timeout: float = 30.0  # a request body that takes longer to arrive gets 408
    max_prompt_chars: int = 200_000  # longer prompts get 400 before they are tokenized
    max_tokens_limit: int = 4096  # the largest max_tokens a request may ask for
    default_max_tokens: int = 512  # when a request names none
    keepalive_interval: float = 15.0  # seconds of silence before a keep-alive comment
    send_timeout: float = 30.0  # a client that reads nothing for this long is dropped
    gzip: bool = True  # compress ordinary responses (never event streams)
    model_aliases: tuple[str, ...] = ()
    retry_after: float = 1.0
    diagnostics: bool = True  # the doctor's diagnostic stream under /v1/diagnostics/


class _Server:
    def __init__(self, engine: Engine, config: ServerConfig) -> None:
        self.engine = engine
        self.config = config
        self.metrics = ServerMetrics(engine.model)
        collector = getattr(engine, "metrics_collector", None)  # an engine's own numbers (upstream replicas)
        if collector is not None:
            self.metrics.registry.register(collector())
        self.admission = Admission(config.max_active, config.max_queued, self.metrics, config.retry_after)
        self.models = (engine.model, *config.model_aliases)
        self.intake = Intake(
            engine,
            self.models,
            max_tokens_limit=config.max_tokens_limit,
            default_max_tokens=config.default_max_tokens,
            max_prompt_chars=config.max_prompt_chars,
        )
        self.live: set[_Run] = set()  # generation requests whose response has not finished cleaning up
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


class _Run:
    """One generation request: frames or a body out, then metrics and one log line."""

    def __init__(self, server: _Server, prepared: Prepared, endpoint: str) -> None:
        self.server = server
        self.gen = gen = prepared.gen
        self.prompt_ids = prepared.prompt_ids
        self.endpoint = endpoint
        self.id = ("chatcmpl-" if gen.kind == "chat" else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.started = time.perf_counter()
        self.delta_times: list[float] = []
        self.completion_ids = 0
        self.finished: Finished | None = None
        self.error: TokenRelayError | None = None
        self.asked_for_slot = False
        self.response: EventStreamResponse | JSONGenerationResponse | None = None

    def interrupt(self) -> None:
        """End this generation now (shutdown): an error event and [DONE], or a 503 body."""
        err = UnavailableError("the server is shutting down; retry the request", code="server_shutting_down")
        if isinstance(self.response, EventStreamResponse):
            self.response.interrupt(error_event(err) + DONE)
        elif isinstance(self.response, JSONGenerationResponse):
            self.response.interrupt(err.status_code, _error_bytes(err))

    async def _events(self) -> AsyncIterator[TextDelta | Finished]:
        server, gen = self.server, self.gen
        self.asked_for_slot = True
        async with server.admission.slot():
            events = stream_events(
                server.engine,
                gen.prompt,
                gen.params,
                stops=gen.stops,
                prompt_ids=self.prompt_ids,
                executor=server.intake.pool,
            )
            async for event in events:
                self._record(event)
                yield event

    def _record(self, event: TextDelta | Finished) -> None:
        if type(event) is TextDelta:
            self.delta_times.append(time.perf_counter())
            self.completion_ids += len(event.token_ids)
        else:
            assert isinstance(event, Finished)
            self.finished = event

    def _fail(self, exc: BaseException) -> TokenRelayError:
        if isinstance(exc, TokenRelayError):
            self.error = exc
        else:
            log.exception("generation failed", exc_info=exc)
            self.error = EngineError(f"generation failed: {type(exc).__name__}: {exc}")
        return self.error

    async def frames(self) -> AsyncIterator[bytes]:
        # The token path: one async generator between the engine's steps and the response (not _events),
        # since every layer costs on each token.
        server, gen = self.server, self.gen
        writer_cls = ChatChunkWriter if gen.kind == "chat" else TextChunkWriter
        writer = writer_cls(
            id=self.id, model=gen.model, created=self.created, include_usage=gen.include_usage
        )
        record = self._record
        with_ids = gen.return_token_ids
        try:
            self.asked_for_slot = True
            async with server.admission.slot():
                prompt_ids = server.engine.prompt_ids(gen.prompt) if with_ids else None
                if prompt_ids is not None:
                    writer.prompt_token_ids(prompt_ids)
                if isinstance(writer, ChatChunkWriter):
                    yield writer.role()  # the first chunk carries the role, as soon as generation starts
                events = stream_events(
                    server.engine,
                    gen.prompt,
                    gen.params,
                    stops=gen.stops,
                    prompt_ids=self.prompt_ids,
                    executor=server.intake.pool,
                )
                async for event in events:
                    record(event)
                    if type(event) is TextDelta:
                        yield (
                            writer.delta_with_ids(event.text, event.token_ids)
                            if with_ids
                            else writer.delta(event.text)
                        )
                    else:
                        assert isinstance(event, Finished)
                        yield writer.finish(event.reason, event.token_ids if with_ids else None)
                        if gen.include_usage:
                            yield writer.usage(event.usage)
                        yield DONE
        except Exception as exc:  # after the headers: report it in-stream, then end the stream cleanly
            yield error_event(self._fail(exc))

    async def body(self) -> tuple[int, bytes]:
        gen = self.gen
        parts: list[str] = []
        ids: list[int] = []
        try:
            async for event in self._events():
                if isinstance(event, TextDelta):
                    parts.append(event.text)
                ids.extend(event.token_ids)
        except Exception as exc:
            err = self._fail(exc)
            return err.status_code, _error_bytes(err)
        assert self.finished is not None
        usage = self.finished.usage
        shape = chat_completion if gen.kind == "chat" else text_completion
        key = "content" if gen.kind == "chat" else "text"
        fields: dict[str, Any] = {key: "".join(parts)}
        body = shape(
            id=self.id,
            model=gen.model,
            created=self.created,
            finish_reason=self.finished.reason,
            usage=usage,
            **fields,
        )
        if gen.return_token_ids:  # vLLM's shapes: the prompt's ids at the top, the reply's in the choice
            body["prompt_token_ids"] = self.server.engine.prompt_ids(gen.prompt)
            choices = body["choices"]
            assert isinstance(choices, list)
            choices[0]["token_ids"] = ids
        return 200, json_bytes(body)

    def done(self, outcome: Outcome) -> None:
        server, metrics = self.server, self.server.metrics
        server.live.discard(self)
        if not self.asked_for_slot:
            server.admission.leave_unstarted()
        # Cut short without a finish or an error: the client left (or stopped reading), or a forced shutdown.
        cancelled = (
            not outcome.completed and not outcome.interrupted and self.finished is None and self.error is None
        )
        end = time.perf_counter()
        ttft = self.delta_times[0] - self.started if self.delta_times else None
        gaps = [b - a for a, b in itertools.pairwise(self.delta_times)]
        if ttft is not None:
            metrics.ttft.observe(ttft)
        for gap in gaps:
            metrics.inter_token.observe(gap)
        metrics.e2e.observe(end - self.started)
        if cancelled:
            metrics.cancellations.inc()
        if self.error is not None:
            metrics.errors.labels(self.error.error_type).inc()
        elif outcome.interrupted:
            metrics.errors.labels(UnavailableError.error_type).inc()
        prompt_tokens = self.finished.usage.prompt_tokens if self.finished else len(self.prompt_ids)
        completion = self.finished.usage.completion_tokens if self.finished else self.completion_ids
        metrics.prompt_tokens.inc(prompt_tokens)
        metrics.completion_tokens.inc(completion)
        if outcome.interrupted:
            status = "shutdown"  # ended by the server after the grace period
        elif outcome.send_timed_out:
            status = "dropped"  # the client stopped reading for send_timeout seconds
        elif cancelled:
            status = "cancelled"  # the client left
        elif self.error:
            status = "error"
        else:
            status = self.finished.reason if self.finished else "?"
        p50, p95 = percentile(gaps, 50), percentile(gaps, 95)

        def ms(v: float | None) -> str:
            return "-" if v is None else f"{v * 1000:.1f}ms"

        log.info(
            "%s %s stream=%s finish=%s ttft=%s itl_p50=%s itl_p95=%s total=%s tokens=%d+%d",
            self.endpoint,
            self.id,
            self.gen.stream,
            status,
            ms(ttft),
            ms(p50),
            ms(p95),
            ms(end - self.started),
            prompt_tokens,
            completion,
        )


GENERATION_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})


class _GZipExceptGenerations:
    """Compress ordinary responses; never let a generation pass through a compressor.

    Starlette's GZipMiddleware already leaves ``text/event-stream`` alone, but it still wraps every send of
    the stream; routing generations around it keeps the token path free of it, whatever its rules become.
    """

    def __init__(self, app: ASGIApp, minimum_size: int = 500) -> None:
        self.app = app
        self.gzip = GZipMiddleware(app, minimum_size=minimum_size)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in GENERATION_PATHS:
            await self.app(scope, receive, send)
        else:
            await self.gzip(scope, receive, send)


def _error_bytes(exc: TokenRelayError) -> bytes:
    # ASCII JSON: a message may quote the client's input, and that must not fail on a lone surrogate.
    return json.dumps(exc.to_openai(), separators=(",", ":")).encode()


def _error_response(exc: TokenRelayError, headers: Mapping[str, str] | None = None) -> Response:
    extra = dict(headers or {})
    if isinstance(exc, RateLimitError):
        extra["Retry-After"] = str(max(1, round(exc.retry_after)))
    if isinstance(exc, RequestTimeoutError):
        extra["Connection"] = "close"  # the rest of a late body must not be read as the next request
    return Response(_error_bytes(exc), exc.status_code, extra, media_type="application/json")


class _RelayApp(FastAPI):
    """FastAPI for everything, except that a generation request goes straight to its handler.

    A stream sends one ASGI message per token, and every middleware layer wraps ``send``: routing the two
    generation endpoints around the stack keeps the token path to our response and the server, which is
    worth about a tenth of the server's CPU per token under load (benchmarks/server_load.py). The routes are
    still declared on the app, so the OpenAPI schema and docs describe them.
    """

    generation_handlers: dict[str, Callable[[Request], Awaitable[Response]]]
    api_key: str | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        if self.api_key is not None and needs_key(scope["path"]):
            # Before routing: an unauthenticated request costs no body read, no plan, no stream (issue 12).
            try:
                check_key(scope["headers"], self.api_key)
            except TokenRelayError as exc:
                await _error_response(exc)(scope, receive, send)
                return
        handler = self.generation_handlers.get(scope["path"]) if scope["method"] == "POST" else None
        if handler is None:
            await super().__call__(scope, receive, send)
            return
        response: Response
        try:
            response = await handler(Request(scope, receive))
        except TokenRelayError as exc:
            response = _error_response(exc)
        except ClientGone as exc:  # a normal event: one line, no traceback, no response to send
            log.info("POST %s: %s", scope["path"], exc)
            return
        except Exception as exc:
            log.exception("unexpected error on POST %s", scope["path"], exc_info=exc)
            response = _error_response(TokenRelayError("internal server error"))
        await response(scope, receive, send)


def create_app(engine: Engine, config: ServerConfig | None = None) -> FastAPI:
    """An OpenAI-compatible FastAPI app serving ``engine``."""
    config = config or ServerConfig()
    server = _Server(engine, config)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        # On shutdown uvicorn cancels the streams still open after its graceful timeout, but does not wait
        # for them; give them a moment to close their generations and log, then release the engine.
        for _ in range(200):
            if not server.live:
                break
            await asyncio.sleep(0.01)
        server.intake.close()
        await engine.aclose()

    # FastAPI's /docs and /redoc load their scripts from a CDN (blank offline): ours are served from here.
    app = _RelayApp(title="tokenrelay", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.tokenrelay = server
    app.api_key = config.api_key
    if config.gzip:
        app.add_middleware(_GZipExceptGenerations, minimum_size=500)

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

    def shutting_down() -> UnavailableError:
        return UnavailableError("the server is shutting down; retry the request", code="server_shutting_down")

    async def generate(request: Request, kind: Literal["chat", "completion"], endpoint: str) -> Response:
        if server.draining:
            raise shutting_down()
        body = await read_body(
            request.receive,
            request.scope["headers"],
            limit=config.max_body_bytes,
            timeout=config.body_timeout,
        )
        # Everything knowable before the first byte is checked here, before any status line is sent.
        prepared = await server.intake.prepare(body, kind)
        if server.draining:
            raise shutting_down()
        gen = prepared.gen
        server.metrics.requests_by_route[endpoint, "true" if gen.stream else "false"].inc()
        server.admission.enter()
        run = _Run(server, prepared, endpoint)
        server.live.add(run)
        response: EventStreamResponse | JSONGenerationResponse
        if gen.stream:
            response = EventStreamResponse(
                run.frames(),
                keepalive_interval=config.keepalive_interval,
                send_timeout=config.send_timeout,
                on_done=run.done,
            )
        else:
            response = JSONGenerationResponse(run.body, on_done=run.done)
        run.response = response
        return response

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(request: Request) -> Response:
        """OpenAI chat completions; `stream: true` answers with server-sent events."""
        return await generate(request, "chat", "/v1/chat/completions")

    @app.post("/v1/completions", response_model=None)
    async def completions(request: Request) -> Response:
        """Legacy OpenAI text completions; `stream: true` answers with server-sent events."""
        return await generate(request, "completion", "/v1/completions")

    app.generation_handlers = {"/v1/chat/completions": chat_completions, "/v1/completions": completions}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "tokenrelay"} for m in server.models]
        return {"object": "list", "data": data}

    @app.get("/health")
    async def health() -> JSONResponse:
        body = {
            "status": "draining" if server.draining else "ok",
            "model": engine.model,
            "active": server.admission.active,
            "queued": server.admission.waiting,
        }
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

    if config.diagnostics:  # GET /v1/diagnostics/stream and /v1/diagnostics/streams/{id}: the doctor's probe
        add_diagnostics_routes(app)
    add_docs_routes(app)
    mount_page(app)
    return app

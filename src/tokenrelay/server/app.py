"""The OpenAI-compatible app: routes, errors, limits, metrics, and the glue from engine events to frames.

``create_app(engine, config)`` returns a FastAPI app. A generation request goes: API key → body size limit →
``parse_generation`` (400s) → model check (404) → admission (429) → a response that runs the engine through
``stream_events`` (``TextStream``: detokenizer + stops) and the chunk writers of ``_openai``. Every error
becomes an OpenAI-shaped body ``{"error": {"message", "type", "param", "code"}}``; the server keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import itertools
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.gzip import GZipMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from tokenrelay._errors import (
    AuthenticationError,
    EngineError,
    NotFoundError,
    PayloadTooLargeError,
    RateLimitError,
    TokenRelayError,
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
from .metrics import CONTENT_TYPE, ServerMetrics
from .requests import ChatCompletionBody, CompletionBody, Generation, parse_generation
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
        self.metrics = ServerMetrics()
        collector = getattr(engine, "metrics_collector", None)  # an engine's own numbers (upstream replicas)
        if collector is not None:
            self.metrics.registry.register(collector())
        self.admission = Admission(config.max_active, config.max_queued, self.metrics, config.retry_after)
        self.models = (engine.model, *config.model_aliases)
        self.live: set[_Run] = set()  # generation requests whose response has not finished cleaning up

    def check_key(self, request: Request) -> None:
        key = self.config.api_key
        if key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
            raise AuthenticationError(
                "invalid or missing API key (send 'Authorization: Bearer KEY')", code="invalid_api_key"
            )

    async def read_body(self, request: Request) -> bytes:
        limit = self.config.max_body_bytes
        declared = request.headers.get("content-length", "")
        too_big = PayloadTooLargeError(f"request body over {limit} bytes", code="request_too_large")
        if declared.isdigit() and int(declared) > limit:
            raise too_big
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise too_big
            chunks.append(chunk)
        return b"".join(chunks)


class _Run:
    """One generation request: frames or a body out, then metrics and one log line."""

    def __init__(self, server: _Server, gen: Generation, endpoint: str) -> None:
        self.server = server
        self.gen = gen
        self.endpoint = endpoint
        self.id = ("chatcmpl-" if gen.kind == "chat" else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.started = time.perf_counter()
        self.delta_times: list[float] = []
        self.completion_ids = 0
        self.finished: Finished | None = None
        self.error: TokenRelayError | None = None
        self.asked_for_slot = False

    async def _events(self) -> AsyncIterator[TextDelta | Finished]:
        server, gen = self.server, self.gen
        self.asked_for_slot = True
        async with server.admission.slot():
            async for event in stream_events(server.engine, gen.prompt, gen.params, stops=gen.stops):
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
                    server.engine, gen.prompt, gen.params, stops=gen.stops, prompt_ids=prompt_ids
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
            return err.status_code, json_bytes(err.to_openai())
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
        # Cut short without a finish or an error: the client left, or the server cancelled it at shutdown.
        cancelled = not outcome.completed and self.finished is None and self.error is None
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
        prompt_tokens = self.finished.usage.prompt_tokens if self.finished else 0
        completion = self.finished.usage.completion_tokens if self.finished else self.completion_ids
        metrics.prompt_tokens.inc(prompt_tokens)
        metrics.completion_tokens.inc(completion)
        status = (
            "cancelled"
            if cancelled
            else "error"
            if self.error
            else (self.finished.reason if self.finished else "?")
        )
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


def _error_response(exc: TokenRelayError) -> JSONResponse:
    headers = {}
    if isinstance(exc, RateLimitError):
        headers["Retry-After"] = str(max(1, round(exc.retry_after)))
    return JSONResponse(exc.to_openai(), status_code=exc.status_code, headers=headers)


class _RelayApp(FastAPI):
    """FastAPI for everything, except that a generation request goes straight to its handler.

    A stream sends one ASGI message per token, and every middleware layer wraps ``send``: routing the two
    generation endpoints around the stack keeps the token path to our response and the server, which is
    worth about a tenth of the server's CPU per token under load (benchmarks/server_load.py). The routes are
    still declared on the app, so the OpenAPI schema and docs describe them.
    """

    generation_handlers: dict[str, Callable[[Request], Awaitable[Response]]]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            handler = self.generation_handlers.get(scope["path"])
            if handler is not None:
                response: Response
                try:
                    response = await handler(Request(scope, receive))
                except TokenRelayError as exc:
                    response = _error_response(exc)
                except Exception as exc:
                    log.exception("unexpected error on POST %s", scope["path"], exc_info=exc)
                    response = _error_response(TokenRelayError("internal server error"))
                await response(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


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
        await engine.aclose()

    app = _RelayApp(title="tokenrelay", version="0.1.0", lifespan=lifespan)
    app.state.tokenrelay = server
    if config.gzip:
        app.add_middleware(_GZipExceptGenerations, minimum_size=500)

    @app.exception_handler(TokenRelayError)
    async def _relay_error(request: Request, exc: TokenRelayError) -> JSONResponse:
        return _error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        err: TokenRelayError
        if exc.status_code == 404:
            err = NotFoundError(f"{request.method} {request.url.path}: {exc.detail}")
        else:
            err = TokenRelayError(str(exc.detail))
            err.status_code, err.error_type = exc.status_code, "invalid_request_error"
        return _error_response(err)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
        return _error_response(TokenRelayError("internal server error"))

    async def generate(request: Request, kind: Literal["chat", "completion"], endpoint: str) -> Response:
        server.check_key(request)
        body = await server.read_body(request)
        gen = parse_generation(
            body, kind, max_tokens_limit=config.max_tokens_limit, default_max_tokens=config.default_max_tokens
        )
        if not gen.model:
            gen = dataclasses.replace(gen, model=engine.model)
        if gen.model not in server.models:
            raise NotFoundError(
                f"model '{gen.model}' does not exist; this server serves {', '.join(server.models)}",
                param="model",
                code="model_not_found",
            )
        server.metrics.requests_by_route[endpoint, "true" if gen.stream else "false"].inc()
        server.admission.enter()
        run = _Run(server, gen, endpoint)
        server.live.add(run)
        if gen.stream:
            return EventStreamResponse(
                run.frames(),
                keepalive_interval=config.keepalive_interval,
                send_timeout=config.send_timeout,
                on_done=run.done,
            )
        return JSONGenerationResponse(run.body, on_done=run.done)

    def schema(model: type[ChatCompletionBody] | type[CompletionBody]) -> dict[str, Any]:
        content = {"application/json": {"schema": model.model_json_schema()}}
        return {"requestBody": {"required": True, "content": content}}

    @app.post("/v1/chat/completions", openapi_extra=schema(ChatCompletionBody), response_model=None)
    async def chat_completions(request: Request) -> Response:
        """OpenAI chat completions; `stream: true` answers with server-sent events."""
        return await generate(request, "chat", "/v1/chat/completions")

    @app.post("/v1/completions", openapi_extra=schema(CompletionBody), response_model=None)
    async def completions(request: Request) -> Response:
        """Legacy OpenAI text completions; `stream: true` answers with server-sent events."""
        return await generate(request, "completion", "/v1/completions")

    app.generation_handlers = {"/v1/chat/completions": chat_completions, "/v1/completions": completions}

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        server.check_key(request)
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "tokenrelay"} for m in server.models]
        return {"object": "list", "data": data}

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "model": engine.model,
            "active": server.admission.active,
            "queued": server.admission.waiting,
        }

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(server.metrics.render(), media_type=CONTENT_TYPE)

    if config.diagnostics:  # GET /v1/diagnostics/stream and /v1/diagnostics/streams/{id}: the doctor's probe
        add_diagnostics_routes(app)
    _mount_page(app)
    return app


WEB_DIR = Path(__file__).resolve().parents[1] / "web"
VENDOR_FILE = "markdown-it.esm.min.mjs"
# The page runs under this policy: no inline script or style, no plugins, no framing, and Trusted Types so
# that no code path can turn model text into HTML (the page builds DOM nodes).
PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'none'; "
    "require-trusted-types-for 'script'; trusted-types 'none'"
)
PAGE_HEADERS = {"Content-Security-Policy": PAGE_CSP, "X-Content-Type-Options": "nosniff"}


def vendor_path() -> Path | None:
    """markdown-it's browser ES module: a copy shipped in ``web/vendor/``, or the project's node_modules."""
    shipped = WEB_DIR / "vendor" / VENDOR_FILE
    if shipped.is_file():
        return shipped
    for parent in WEB_DIR.parents:
        candidate = parent / "node_modules" / "markdown-it" / "dist" / "browser" / VENDOR_FILE
        if candidate.is_file():
            return candidate
    return None


def _mount_page(app: FastAPI) -> None:
    """The chat page at ``/``, its modules under ``/static/``, markdown-it under ``/static/vendor/``."""
    index = WEB_DIR / "index.html"
    if not index.is_file():
        return
    files = {p.name: p for p in WEB_DIR.iterdir() if p.suffix in (".js", ".css", ".html")}
    types = {".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css", ".html": "text/html"}

    def serve_file(path: Path) -> Response:
        media_type = types[path.suffix] + "; charset=utf-8"
        return Response(path.read_bytes(), media_type=media_type, headers=PAGE_HEADERS)

    @app.get("/", include_in_schema=False)
    async def page() -> Response:
        return serve_file(index)

    @app.get("/static/vendor/{name}", include_in_schema=False)
    async def vendor(name: str) -> Response:
        path = vendor_path()
        if name != VENDOR_FILE or path is None:
            raise NotFoundError(f"/static/vendor/{name}: not installed (run `npm ci` in the project)")
        return serve_file(path)

    @app.get("/static/{name}", include_in_schema=False)
    async def static(name: str) -> Response:
        if name not in files:
            raise NotFoundError(f"/static/{name}: no such file")
        return serve_file(files[name])

"""One generation request after its intake: the engine's events to frames (or a body), then metrics and a log line.

``ENDPOINTS`` names the generation paths and their kinds, once (``WRITERS`` each kind's writer): the app routes them around its middleware
and declares them for the docs, the metrics label them, the OpenAPI schema describes them, all from here.

A ``Run`` is made once the request is valid and admitted to the queue. ``frames()`` is the token path of a
stream (one async generator between the engine's steps and the response, since every layer costs on each
token); ``body()`` collects a whole reply. ``done()`` runs when the response has finished, however it ended:
TTFT is measured here from the request's arrival (queue wait included), the gaps between deltas and their
percentiles come from ``Finished.timings`` (``TextStream`` computed them; a reply cut short before its end
has none to give, and only its TTFT, duration and tokens are counted).

It is over 400 lines because a run's stream loop, its whole-body twin, the pipeline and engine stream they
share (which hold-backs, where stop strings act, which tokens the text keeps) and the end they both reach
(``done()``) read each other's state on every token: apart, each would pass that state across a module line.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from tokenrelay._errors import EngineError, TokenRelayError, UnavailableError
from tokenrelay._reasoning import ReasoningFormat, ReasoningSplitter, ReplyStart, reply_start
from tokenrelay._reply import ReplyCollector, ReplyFailed, ReplyWriter
from tokenrelay._reply_pipeline import ReplyPipeline
from tokenrelay._stream import Finished, TextDelta, TextStream
from tokenrelay._tool_call_events import FORMATS, ToolCallFormat, format_for_template
from tokenrelay.engines.base import ThinkingBudget, stream_events
from tokenrelay.wire._chat_writer import ChatReplyWriter, CompletionReplyWriter, openai_error_body
from tokenrelay.wire._messages import MessagesReplyWriter, anthropic_error_body

from .responses import EventStreamResponse, JSONGenerationResponse, Outcome
from .responses_request import responses_writer

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from tokenrelay.engines.base import Engine

    from .admission import Admission
    from .intake import Intake, Prepared
    from .metrics import ServerMetrics

__all__ = [
    "ENDPOINTS",
    "ERROR_BODIES",
    "WRITERS",
    "Endpoint",
    "Run",
    "RunHost",
    "call_format",
    "error_bytes",
    "shutting_down",
]

log = logging.getLogger("tokenrelay.server")


@dataclass(frozen=True)
class Endpoint:
    """A generation path: the kind of body it takes and how the docs describe it."""

    path: str
    kind: str  # the body it takes (``intake.PARSERS``) and the writer of its replies (``WRITERS``)
    name: str  # the route's name (and so the OpenAPI operation id)
    summary: str
    id_prefix: str  # of the reply's id
    #: An error before the stream starts, in the dialect's shape: its status and body.
    error_body: Callable[[TokenRelayError], tuple[int, bytes]] = openai_error_body
    call_prefix: str = "call_"  # of the ids made for the reply's tool calls


#: The generation endpoints, by path.
ENDPOINTS: Mapping[str, Endpoint] = {
    e.path: e
    for e in (
        Endpoint(
            "/v1/chat/completions",
            "chat",
            "chat_completions",
            "OpenAI chat completions; `stream: true` answers with server-sent events.",
            "chatcmpl-",
        ),
        Endpoint(
            "/v1/completions",
            "completion",
            "completions",
            "Legacy OpenAI text completions; `stream: true` answers with server-sent events.",
            "cmpl-",
        ),
        Endpoint(
            "/v1/responses",
            "responses",
            "responses",
            "OpenAI Responses API; `stream: true` answers with its typed server-sent events.",
            "resp_",
        ),
        Endpoint(
            "/v1/messages",
            "messages",
            "messages",
            "Anthropic Messages API; `stream: true` answers with server-sent events (`event:` named).",
            "msg_",
            anthropic_error_body,
            "toolu_",
        ),
    )
}

#: Paths of a dialect that are not generations, with the shape of their errors (``app.py``'s key check).
ERROR_BODIES: Mapping[str, Callable[[TokenRelayError], tuple[int, bytes]]] = {
    "/v1/messages/count_tokens": anthropic_error_body,
    **{path: e.error_body for path, e in ENDPOINTS.items()},
}


def error_bytes(exc: TokenRelayError) -> bytes:
    """An OpenAI-shaped error body (the errors of every route but a dialect's own generations)."""
    return openai_error_body(exc)[1]


def shutting_down() -> UnavailableError:
    return UnavailableError("the server is shutting down; retry the request", code="server_shutting_down")


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.1f}ms"


def call_format(engine: Engine) -> ToolCallFormat:
    """The markup the model writes its calls in: its template's own where the engine renders templates that
    take tools (``renders_tool_templates``), else the generic format's (Hermes)."""
    if getattr(engine, "renders_tool_templates", False):
        native = format_for_template(getattr(engine.tokenizer, "chat_template", None))
        if native is not None:
            return native
    return FORMATS["hermes"]


def _call_id(prefix: str) -> Callable[[], str]:
    return lambda: prefix + os.urandom(12).hex()


def _chat_writer(run: Run) -> ReplyWriter:
    gen = run.gen
    cls = ChatReplyWriter if gen.kind == "chat" else CompletionReplyWriter
    return cls(
        id=run.id,
        model=gen.model,
        created=run.created,
        include_usage=gen.include_usage,
        prompt_ids=run.prompt_ids if gen.return_token_ids else None,
        origin=run.started if gen.step_times else None,
    )


def _messages_writer(run: Run) -> ReplyWriter:
    return MessagesReplyWriter(id=run.id, model=run.gen.model, input_tokens=len(run.prompt_ids))


#: Each endpoint kind's writer of a reply (``_reply.ReplyWriter``): the one thing that differs by dialect.
WRITERS: Mapping[str, Callable[[Run], ReplyWriter]] = {
    "chat": _chat_writer,
    "completion": _chat_writer,
    "responses": responses_writer,
    "messages": _messages_writer,
}


class RunHost(Protocol):
    """What a ``Run`` needs of the server it runs in (the app's state provides it; a run never sees the app).

    The engine and the intake's thread pool to generate with, the admission slots, the metrics to count into,
    and the set of live runs it leaves when done.
    """

    @property
    def engine(self) -> Engine: ...
    @property
    def intake(self) -> Intake: ...
    @property
    def admission(self) -> Admission: ...
    @property
    def metrics(self) -> ServerMetrics: ...
    @property
    def live(self) -> set[Run]: ...
    @property
    def reasoning_format(self) -> ReasoningFormat | None: ...
    @property
    def tool_call_format(self) -> ToolCallFormat | None: ...
    @property
    def reasoning_budget(self) -> int | None: ...


class Run:
    """One generation request: frames or a body out, then metrics and one log line."""

    __slots__ = (
        "asked_for_slot",
        "completion_ids",
        "created",
        "endpoint",
        "error",
        "finished",
        "first_at",
        "gen",
        "id",
        "keeps_specials",
        "prompt_ids",
        "response",
        "server",
        "started",
        "stops_in_pipeline",
        "text_stream",
        "writer",
    )

    def __init__(self, server: RunHost, prepared: Prepared, endpoint: str) -> None:
        self.server = server
        self.gen = gen = prepared.gen
        self.prompt_ids = prepared.prompt_ids
        self.endpoint = endpoint
        # 128 random bits in hex, as uuid4().hex reads (less the version digits), without building a UUID.
        self.id = ENDPOINTS[endpoint].id_prefix + os.urandom(16).hex()
        self.created = int(time.time())
        self.started = time.perf_counter()
        self.first_at: float | None = None  # when the first delta left the engine's stream
        self.completion_ids = 0  # ids of the deltas so far (the count of a reply cut short)
        self.finished: Finished | None = None
        self.error: TokenRelayError | None = None
        self.asked_for_slot = False
        # Set by _pipeline(): stop strings act on the answer, after reasoning; the text keeps special tokens
        # (a reasoning or tool-call format whose markers are special tokens, as Mistral's).
        self.stops_in_pipeline = self.keeps_specials = False
        self.text_stream: TextStream | None = None  # the engine's, once made (_stopped_here counts with it)
        self.response: EventStreamResponse | JSONGenerationResponse | None = None
        self.writer = WRITERS[gen.kind](self)

    def interrupt(self) -> None:
        """End this generation now (shutdown): the dialect's error frames, or an error body."""
        err = shutting_down()
        if isinstance(self.response, EventStreamResponse):
            self.response.interrupt(b"".join(self.writer.write(ReplyFailed(err))))
        elif isinstance(self.response, JSONGenerationResponse):
            self.response.interrupt(*self.writer.error_body(err))

    def _stream(self, step_times: bool = False) -> AsyncIterator[TextDelta | Finished]:
        server, gen = self.server, self.gen
        params = gen.params
        fmt = server.reasoning_format
        budget = gen.thinking_budget if gen.thinking_budget is not None else server.reasoning_budget
        if fmt is not None and budget is not None and gen.kind != "completion":
            params = dataclasses.replace(params, thinking=ThinkingBudget(fmt, self._reply_start(fmt), budget))
        return stream_events(
            server.engine,
            gen.prompt,
            params,
            stops=() if self.stops_in_pipeline else gen.stops,
            skip_special_tokens=not self.keeps_specials,
            on_stream=self._keep_stream,
            prompt_ids=self.prompt_ids,
            executor=server.intake.pool,
            step_times=step_times,
        )

    def _pipeline(self) -> ReplyPipeline:
        """The hold-backs this reply needs: the reasoning splitter when the server reads a reasoning format
        (``--reasoning-parser``, or the template's), the tool-call extractor when the request has tools."""
        server, gen = self.server, self.gen
        fmt, tools = server.reasoning_format, gen.tools
        reasoning = None
        if fmt is not None and gen.kind != "completion":
            reasoning = ReasoningSplitter(fmt, start=self._reply_start(fmt))
        if tools is None and reasoning is None:
            return ReplyPipeline()
        calls = None if tools is None else server.tool_call_format or call_format(server.engine)
        # With reasoning split off, stop strings act on the answer alone: the pipeline matches them after
        # the splitter, and the engine's TextStream gets none (``_stream``).
        self.stops_in_pipeline = reasoning is not None and bool(gen.stops)
        self.keeps_specials = (reasoning is not None and fmt is not None and fmt.needs_specials) or (
            calls is not None and calls.needs_specials
        )
        return ReplyPipeline(
            tools=calls,
            parallel=True if tools is None else tools.parallel,
            reasoning=reasoning,
            new_call_id=_call_id(ENDPOINTS[self.endpoint].call_prefix),
            stops=gen.stops if self.stops_in_pipeline else (),
        )

    def _reply_start(self, fmt: ReasoningFormat) -> ReplyStart:
        """Where this reply starts, read from the end of its rendered prompt (a template that opened the tag,
        or opened and closed it to turn thinking off)."""
        tail = self.server.engine.tokenizer.decode(self.prompt_ids[-8:], skip_special_tokens=False)
        return reply_start(fmt, tail)

    def _fail(self, exc: BaseException) -> TokenRelayError:
        if isinstance(exc, TokenRelayError):
            # Kept without its traceback, whose frames hold this run: no cycle outlives the request.
            self.error = exc.with_traceback(None)
        else:
            log.exception("generation failed", exc_info=exc)
            self.error = EngineError(f"generation failed: {type(exc).__name__}: {exc}")
        return self.error

    def _keep_stream(self, stream: TextStream) -> None:
        self.text_stream = stream

    def _stopped_here(self) -> Finished:
        """The reply is complete before the engine ended it (``ReplyPipeline.done``): its end as it stands,
        counted by the engine's ``TextStream`` (every id it consumed, text relayed without ids included)."""
        assert self.text_stream is not None  # stream_events gave it before its first event
        return Finished("stop", self.text_stream.usage)

    async def frames(self) -> AsyncIterator[bytes]:
        """The stream: the engine's events through the reply pipeline and the endpoint's writer, frame by frame.

        Every reply of every kind and dialect takes this path; a reply with no hold-back (plain prose or JSON)
        passes each delta through the pipeline unchanged."""
        server, writer, pipeline = self.server, self.writer, self._pipeline()
        write, feed = writer.write, pipeline.feed
        # stream_options.include_step_times: each frame is stamped as it leaves, one clock read per frame.
        step_times, clock = self.gen.step_times, time.perf_counter
        try:
            self.asked_for_slot = True
            async with server.admission.slot():
                for frame in writer.start(clock() if step_times else None):  # as soon as generation starts
                    yield frame
                finished: Finished | None = None
                async for event in self._stream(step_times):
                    if type(event) is TextDelta:
                        if self.first_at is None:
                            self.first_at = time.perf_counter()
                        self.completion_ids += len(event.token_ids)
                        for reply_event in feed(event):
                            for frame in write(reply_event, clock() if step_times else None):
                                yield frame  # one SSE event, one write
                        if pipeline.done:  # parallel_tool_calls: false, and the one call is complete
                            finished = self._stopped_here()
                            break  # the engine stops here
                    else:
                        assert isinstance(event, Finished)
                        finished = event
                assert finished is not None
                self.finished = finished
                for reply_event in pipeline.finish(finished):
                    for frame in write(reply_event, clock() if step_times else None):
                        yield frame
        except Exception as exc:  # after the headers: report it in-stream, then end the stream cleanly
            for frame in write(ReplyFailed(self._fail(exc))):
                yield frame

    async def body(self) -> tuple[int, bytes]:
        """A whole reply: the same events as :meth:`frames`, collected, then written as one body."""
        writer, pipeline, collector = self.writer, self._pipeline(), ReplyCollector()
        add = collector.add
        try:
            self.asked_for_slot = True
            async with self.server.admission.slot():
                finished: Finished | None = None
                async for event in self._stream():
                    if type(event) is TextDelta:
                        if self.first_at is None:
                            self.first_at = time.perf_counter()
                        self.completion_ids += len(event.token_ids)
                        for reply_event in pipeline.feed(event):
                            add(reply_event)
                        if pipeline.done:
                            finished = self._stopped_here()
                            break
                    else:
                        assert isinstance(event, Finished)
                        finished = event
                assert finished is not None
                self.finished = finished
                for reply_event in pipeline.finish(finished):
                    add(reply_event)
        except Exception as exc:
            return writer.error_body(self._fail(exc))
        return 200, writer.body(collector.reply())

    def done(self, outcome: Outcome) -> None:
        server, metrics, finished = self.server, self.server.metrics, self.finished
        server.live.discard(self)
        self.response = None  # it holds this run's methods: let both go by reference counting
        if not self.asked_for_slot:
            server.admission.leave_unstarted()
        # Cut short without a finish or an error: the client left (or stopped reading), or a forced shutdown.
        cancelled = (
            not outcome.completed and not outcome.interrupted and finished is None and self.error is None
        )
        end = time.perf_counter()
        ttft = None if self.first_at is None else self.first_at - self.started
        timings = finished.timings if finished is not None else None
        latency = metrics.latency[self.endpoint]
        if ttft is not None:
            latency.ttft.observe(ttft)
        if timings is not None:
            latency.inter_token.observe_many(timings.gaps)
        latency.e2e.observe(end - self.started)
        if cancelled:
            metrics.cancellations.inc()
        if self.error is not None:
            metrics.errors.labels(self.error.error_type).inc()
        elif outcome.interrupted:
            metrics.errors.labels(UnavailableError.error_type).inc()
        prompt_tokens = finished.usage.prompt_tokens if finished else len(self.prompt_ids)
        completion = finished.usage.completion_tokens if finished else self.completion_ids
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
            status = finished.reason if finished else "?"
        if log.isEnabledFor(logging.INFO):
            log.info(
                "%s %s stream=%s finish=%s ttft=%s itl_p50=%s itl_p95=%s total=%s tokens=%d+%d",
                self.endpoint,
                self.id,
                self.gen.stream,
                status,
                _ms(ttft),
                _ms(timings.p50 if timings else None),
                _ms(timings.p95 if timings else None),
                _ms(end - self.started),
                prompt_tokens,
                completion,
            )

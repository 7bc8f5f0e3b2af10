"""One generation request after its intake: the engine's events to frames (or a body), then metrics and a log line.

``ENDPOINTS`` names the two generation paths and their kinds, once: the app routes them around its middleware
and declares them for the docs, the metrics label them, the OpenAPI schema describes them, all from here.

A ``Run`` is made once the request is valid and admitted to the queue. ``frames()`` is the token path of a
stream (one async generator between the engine's steps and the response, since every layer costs on each
token); ``body()`` collects a whole reply. ``done()`` runs when the response has finished, however it ended:
TTFT is measured here from the request's arrival (queue wait included), the gaps between deltas and their
percentiles come from ``Finished.timings`` (``TextStream`` computed them; a reply cut short before its end
has none to give, and only its TTFT, duration and tokens are counted).
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from tokenrelay._errors import EngineError, TokenRelayError, UnavailableError
from tokenrelay._openai import (
    DONE,
    ChatChunkWriter,
    TextChunkWriter,
    chat_completion,
    error_event,
    json_bytes,
    text_completion,
    timed_frame,
)
from tokenrelay._stream import Finished, TextDelta
from tokenrelay.engines.base import stream_events

from .responses import EventStreamResponse, JSONGenerationResponse, Outcome
from .tool_replies import tool_body, tool_frames

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    from tokenrelay.engines.base import Engine

    from .admission import Admission
    from .intake import Intake, Prepared
    from .metrics import ServerMetrics

__all__ = ["ENDPOINTS", "Endpoint", "Run", "RunHost", "error_bytes", "shutting_down"]

log = logging.getLogger("tokenrelay.server")


@dataclass(frozen=True)
class Endpoint:
    """A generation path: the kind of body it takes and how the docs describe it."""

    path: str
    kind: Literal["chat", "completion"]
    name: str  # the route's name (and so the OpenAPI operation id)
    summary: str


#: The generation endpoints, by path.
ENDPOINTS: Mapping[str, Endpoint] = {
    e.path: e
    for e in (
        Endpoint(
            "/v1/chat/completions",
            "chat",
            "chat_completions",
            "OpenAI chat completions; `stream: true` answers with server-sent events.",
        ),
        Endpoint(
            "/v1/completions",
            "completion",
            "completions",
            "Legacy OpenAI text completions; `stream: true` answers with server-sent events.",
        ),
    )
}


def error_bytes(exc: TokenRelayError) -> bytes:
    # ASCII JSON: a message may quote the client's input, and that must not fail on a lone surrogate.
    return json.dumps(exc.to_openai(), separators=(",", ":")).encode()


def shutting_down() -> UnavailableError:
    return UnavailableError("the server is shutting down; retry the request", code="server_shutting_down")


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.1f}ms"


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
        "prompt_ids",
        "response",
        "server",
        "started",
    )

    def __init__(self, server: RunHost, prepared: Prepared, endpoint: str) -> None:
        self.server = server
        self.gen = gen = prepared.gen
        self.prompt_ids = prepared.prompt_ids
        self.endpoint = endpoint
        # 128 random bits in hex, as uuid4().hex reads (less the version digits), without building a UUID.
        self.id = ("chatcmpl-" if gen.kind == "chat" else "cmpl-") + os.urandom(16).hex()
        self.created = int(time.time())
        self.started = time.perf_counter()
        self.first_at: float | None = None  # when the first delta left the engine's stream
        self.completion_ids = 0  # ids of the deltas so far (the count of a reply cut short)
        self.finished: Finished | None = None
        self.error: TokenRelayError | None = None
        self.asked_for_slot = False
        self.response: EventStreamResponse | JSONGenerationResponse | None = None

    def interrupt(self) -> None:
        """End this generation now (shutdown): an error event and [DONE], or a 503 body."""
        err = shutting_down()
        if isinstance(self.response, EventStreamResponse):
            self.response.interrupt(error_event(err) + DONE)
        elif isinstance(self.response, JSONGenerationResponse):
            self.response.interrupt(err.status_code, error_bytes(err))

    def _stream(self, step_times: bool = False) -> AsyncIterator[TextDelta | Finished]:
        server, gen = self.server, self.gen
        return stream_events(
            server.engine,
            gen.prompt,
            gen.params,
            stops=gen.stops,
            prompt_ids=self.prompt_ids,
            executor=server.intake.pool,
            step_times=step_times,
        )

    # For tool_replies (issue 21), which reads the events and reports a failure as the token path does.
    def events(self, step_times: bool = False) -> AsyncIterator[TextDelta | Finished]:
        return self._stream(step_times)

    def fail(self, exc: BaseException) -> TokenRelayError:
        return self._fail(exc)

    def _fail(self, exc: BaseException) -> TokenRelayError:
        if isinstance(exc, TokenRelayError):
            # Kept without its traceback, whose frames hold this run: no cycle outlives the request.
            self.error = exc.with_traceback(None)
        else:
            log.exception("generation failed", exc_info=exc)
            self.error = EngineError(f"generation failed: {type(exc).__name__}: {exc}")
        return self.error

    async def frames(self) -> AsyncIterator[bytes]:
        server, gen = self.server, self.gen
        if gen.tools is not None:  # a reply that may call tools: its own path, so others pay nothing
            async for frame in tool_frames(self):
                yield frame
            return
        writer_cls = ChatChunkWriter if gen.kind == "chat" else TextChunkWriter
        writer = writer_cls(
            id=self.id, model=gen.model, created=self.created, include_usage=gen.include_usage
        )
        with_ids = gen.return_token_ids
        delta = writer.delta
        # stream_options.include_step_times: each frame is stamped as it leaves, one clock read per chunk.
        step_times, origin, clock = gen.step_times, self.started, time.perf_counter
        try:
            self.asked_for_slot = True
            async with server.admission.slot():
                if with_ids:  # the ids intake tokenized, not a second encode
                    writer.prompt_token_ids(self.prompt_ids)
                if isinstance(writer, ChatChunkWriter):
                    role = writer.role()  # the first chunk carries the role, as soon as generation starts
                    yield timed_frame(role, origin=origin, sent=clock(), steps=None) if step_times else role
                async for event in self._stream(step_times):
                    if type(event) is TextDelta:
                        if self.first_at is None:
                            self.first_at = time.perf_counter()
                        self.completion_ids += len(event.token_ids)
                        frame = (
                            writer.delta_with_ids(event.text, event.token_ids)
                            if with_ids
                            else delta(event.text)
                        )
                        if step_times:
                            frame = timed_frame(frame, origin=origin, sent=clock(), steps=event.steps)
                        yield frame
                    else:
                        assert isinstance(event, Finished)
                        self.finished = event
                        frame = writer.finish(event.reason, event.token_ids if with_ids else None)
                        if step_times:
                            frame = timed_frame(frame, origin=origin, sent=clock(), steps=event.steps)
                        yield frame
                        if gen.include_usage:
                            frame = writer.usage(event.usage)
                            if step_times:
                                frame = timed_frame(frame, origin=origin, sent=clock(), steps=None)
                            yield frame
                        yield DONE
        except Exception as exc:  # after the headers: report it in-stream, then end the stream cleanly
            # [DONE] after the error, as vLLM's server and our shutdown send it: a client that reads to the
            # end marker ends here too, and the error frame stays the last data it acts on.
            yield error_event(self._fail(exc)) + DONE

    async def body(self) -> tuple[int, bytes]:
        gen = self.gen
        if gen.tools is not None:
            return await tool_body(self)
        parts: list[str] = []
        ids: list[int] = []
        try:
            self.asked_for_slot = True
            async with self.server.admission.slot():
                async for event in self._stream():
                    if type(event) is TextDelta:
                        if self.first_at is None:
                            self.first_at = time.perf_counter()
                        parts.append(event.text)
                    else:
                        assert isinstance(event, Finished)
                        self.finished = event
                    ids.extend(event.token_ids)
        except Exception as exc:
            err = self._fail(exc)
            return err.status_code, error_bytes(err)
        assert self.finished is not None
        shape = chat_completion if gen.kind == "chat" else text_completion
        key = "content" if gen.kind == "chat" else "text"
        fields: dict[str, Any] = {key: "".join(parts)}
        body = shape(
            id=self.id,
            model=gen.model,
            created=self.created,
            finish_reason=self.finished.reason,
            usage=self.finished.usage,
            **fields,
        )
        if gen.return_token_ids:  # vLLM's shapes: the prompt's ids at the top, the reply's in the choice
            body["prompt_token_ids"] = self.prompt_ids
            choices = body["choices"]
            assert isinstance(choices, list)
            choices[0]["token_ids"] = ids
        return 200, json_bytes(body)

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
        if ttft is not None:
            metrics.ttft.observe(ttft)
        if timings is not None:
            metrics.inter_token.observe_many(timings.gaps)
        metrics.e2e.observe(end - self.started)
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

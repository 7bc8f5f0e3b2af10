"""A reply that may call tools (issue 21): the text stream through a ``ToolCallExtractor`` to tool-call chunks.

``Run.frames()`` and ``Run.body()`` hand a request with tools (``Generation.tools``) to :func:`tool_frames` and
:func:`tool_body`; a request without tools never comes here, so it pays nothing for them. The format the
model writes its calls in is the generic one (Hermes markup, ``_tools``) unless the engine renders its own
template's tool support (:func:`call_format`).

Per event of the text stream: content deltas go out as content chunks, a call's first delta (its ``call_…``
id, made here, and its name) and its argument fragments as ``tool_calls`` chunks, each as soon as the
extractor releases it. ``return_token_ids``: a delta's ids ride on the first chunk written from it (or on a
later one when the extractor held its text). The finish reason is ``tool_calls`` when the reply called
something and ended by itself, ``length`` when it was cut (the calls as they stand). With
``parallel_tool_calls: false`` the reply ends once its first call is complete: the engine is stopped there.
A malformed call ends the stream with an error event (an error response when not streamed):
``ToolCallError``, ``invalid_tool_call``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

from tokenrelay._errors import ToolCallError
from tokenrelay._openai import DONE, ChatChunkWriter, chat_completion, error_event, json_bytes, timed_frame
from tokenrelay._stream import Finished, StepTime, TextDelta, Usage
from tokenrelay._tool_calls import (
    FORMATS,
    ContentDelta,
    ToolArgumentsDelta,
    ToolCallEvent,
    ToolCallExtractor,
    ToolCallFormat,
    ToolCallInvalid,
    ToolCallStarted,
    format_for_template,
)

if TYPE_CHECKING:
    from tokenrelay._errors import TokenRelayError
    from tokenrelay.engines.base import Engine

    from .admission import Admission
    from .requests import Generation

__all__ = ["ToolRun", "call_format", "tool_body", "tool_frames"]


class _Host(Protocol):
    @property
    def engine(self) -> Engine: ...
    @property
    def admission(self) -> Admission: ...


class ToolRun(Protocol):
    """What these functions need of ``generation.Run`` (which imports this module, so it is not imported)."""

    gen: Generation
    id: str
    created: int
    started: float
    prompt_ids: list[int]
    first_at: float | None
    completion_ids: int
    finished: Finished | None
    asked_for_slot: bool

    @property
    def server(self) -> _Host: ...
    def events(self, step_times: bool = False) -> AsyncIterator[TextDelta | Finished]: ...
    def fail(self, exc: BaseException) -> TokenRelayError: ...


def call_format(engine: Engine) -> ToolCallFormat:
    """The markup the model writes its calls in: its template's own where the engine renders templates that
    take tools (``renders_tool_templates``), else the generic format's (Hermes)."""
    if getattr(engine, "renders_tool_templates", False):
        native = format_for_template(getattr(engine.tokenizer, "chat_template", None))
        if native is not None:
            return native
    return FORMATS["hermes"]


def _call_id() -> str:
    return "call_" + os.urandom(12).hex()


class _Reply:
    """One reply's extractor, the ids it gave its calls, and what it has written (for a whole response)."""

    __slots__ = ("arguments", "content", "extractor", "ids", "names")

    def __init__(self, run: ToolRun) -> None:
        tools = run.gen.tools
        assert tools is not None
        self.extractor = ToolCallExtractor(call_format(run.server.engine), parallel=tools.parallel)
        self.ids: list[str] = []
        self.names: list[str] = []
        self.arguments: list[list[str]] = []
        self.content: list[str] = []

    def record(self, events: Sequence[ToolCallEvent]) -> None:
        for e in events:
            if type(e) is ContentDelta:
                self.content.append(e.text)
            elif type(e) is ToolCallStarted:
                self.ids.append(_call_id())
                self.names.append(e.name)
                self.arguments.append([])
            elif type(e) is ToolArgumentsDelta:
                self.arguments[e.index].append(e.text)
            elif type(e) is ToolCallInvalid:
                raise ToolCallError(
                    f"the model's tool call is malformed: {e.message} (at character {e.offset} of the reply)",
                    code="invalid_tool_call",
                )

    def finish_reason(self, finished: Finished) -> str:
        return "tool_calls" if self.ids and finished.reason == "stop" else finished.reason

    def calls(self) -> list[tuple[str, str, str]]:
        return [(i, n, "".join(a)) for i, n, a in zip(self.ids, self.names, self.arguments, strict=True)]


class _Carry:
    """Ids (``return_token_ids``) and step times (``include_step_times``) of deltas whose text the extractor
    has not written yet: they ride on the next chunk written."""

    __slots__ = ("ids", "steps")

    def __init__(self, ids: bool) -> None:
        self.ids: list[int] | None = [] if ids else None
        self.steps: list[StepTime] = []

    def take(self) -> tuple[list[int] | None, tuple[StepTime, ...] | None]:
        ids, steps = self.ids, tuple(self.steps) or None
        if ids is not None:
            self.ids = []
        self.steps = []
        return ids, steps


_WRITTEN = (ContentDelta, ToolCallStarted, ToolArgumentsDelta)


def _frames(
    reply: _Reply, writer: ChatChunkWriter, events: Sequence[ToolCallEvent], carry: _Carry
) -> Iterator[tuple[bytes, tuple[StepTime, ...] | None]]:
    """The chunks of the extractor's events, each with what it carries: ``(frame, steps)``."""
    for e in events:
        if type(e) not in _WRITTEN:
            continue
        ids, steps = carry.take()
        if type(e) is ContentDelta:
            frame = writer.delta(e.text) if ids is None else writer.delta_with_ids(e.text, ids)
        elif type(e) is ToolCallStarted:
            frame = writer.tool_call(e.index, reply.ids[e.index], e.name, ids)
        else:
            assert type(e) is ToolArgumentsDelta
            frame = writer.tool_arguments(e.index, e.text, ids)
        yield frame, steps


async def tool_frames(run: ToolRun) -> AsyncIterator[bytes]:
    """The stream of a chat reply that may call tools (``Run.frames()`` for ``Generation.tools``)."""
    gen = run.gen
    writer = ChatChunkWriter(id=run.id, model=gen.model, created=run.created, include_usage=gen.include_usage)
    reply = _Reply(run)
    extractor = reply.extractor
    carry = _Carry(gen.return_token_ids)
    step_times, origin, clock = gen.step_times, run.started, time.perf_counter

    def stamp(frame: bytes, steps: tuple[StepTime, ...] | None) -> bytes:
        return timed_frame(frame, origin=origin, sent=clock(), steps=steps) if step_times else frame

    try:
        run.asked_for_slot = True
        async with run.server.admission.slot():
            if gen.return_token_ids:
                writer.prompt_token_ids(run.prompt_ids)
            yield stamp(writer.role(), None)
            finished: Finished | None = None
            async for event in run.events(step_times):
                if type(event) is TextDelta:
                    if run.first_at is None:
                        run.first_at = time.perf_counter()
                    run.completion_ids += len(event.token_ids)
                    if carry.ids is not None:
                        carry.ids.extend(event.token_ids)
                    if event.steps:
                        carry.steps.extend(event.steps)
                    found = extractor.feed(event.text)
                    reply.record(found)
                    for frame, steps in _frames(reply, writer, found, carry):
                        yield stamp(frame, steps)
                    if extractor.done:  # parallel_tool_calls: false, and the one call is complete
                        finished = Finished("stop", Usage(len(run.prompt_ids), run.completion_ids))
                        break  # the engine stops here
                else:
                    assert isinstance(event, Finished)
                    finished = event
            assert finished is not None
            run.finished = finished
            found = extractor.finish(truncated=finished.reason == "length")
            reply.record(found)
            for frame, steps in _frames(reply, writer, found, carry):
                yield stamp(frame, steps)
            ids, steps = carry.take()
            if ids is not None:
                ids.extend(finished.token_ids)
            yield stamp(
                writer.finish(reply.finish_reason(finished), ids),
                (*(steps or ()), *(finished.steps or ())) or None,
            )
            if gen.include_usage:
                yield stamp(writer.usage(finished.usage), None)
            yield DONE
    except Exception as exc:  # after the headers: report it in-stream, then end the stream cleanly
        yield error_event(run.fail(exc))


async def tool_body(run: ToolRun) -> tuple[int, bytes]:
    """The whole response of a chat reply that may call tools (``Run.body()`` for ``Generation.tools``)."""
    gen = run.gen
    reply = _Reply(run)
    extractor = reply.extractor
    ids: list[int] = []
    finished: Finished | None = None
    try:
        run.asked_for_slot = True
        async with run.server.admission.slot():
            async for event in run.events():
                ids.extend(event.token_ids)
                if type(event) is TextDelta:
                    if run.first_at is None:
                        run.first_at = time.perf_counter()
                    run.completion_ids += len(event.token_ids)
                    reply.record(extractor.feed(event.text))
                    if extractor.done:  # parallel_tool_calls: false, and the one call is complete
                        finished = Finished("stop", Usage(len(run.prompt_ids), run.completion_ids))
                        break
                else:
                    assert isinstance(event, Finished)
                    finished = event
            assert finished is not None
            run.finished = finished
            reply.record(extractor.finish(truncated=finished.reason == "length"))
    except Exception as exc:
        err = run.fail(exc)
        # ASCII JSON, as every error body: a message may quote the client's input.
        return err.status_code, json.dumps(err.to_openai(), separators=(",", ":")).encode()
    body = chat_completion(
        id=run.id,
        model=gen.model,
        created=run.created,
        content="".join(reply.content),
        finish_reason=reply.finish_reason(finished),
        usage=finished.usage,
        tool_calls=reply.calls(),
    )
    if gen.return_token_ids:  # vLLM's shapes: the prompt's ids at the top, the reply's in the choice
        body["prompt_token_ids"] = run.prompt_ids
        choices = body["choices"]
        assert isinstance(choices, list)
        choices[0]["token_ids"] = ids
    return 200, json_bytes(body)

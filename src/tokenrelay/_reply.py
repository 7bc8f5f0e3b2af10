"""The reply-event model: one reply, whatever dialect writes it.

A reply crosses the server on one path. ``TextStream`` (detokenizer and stop strings) gives ``TextDelta`` and
``Finished``; a ``ReplyPipeline`` (``_reply_pipeline``) runs the text through the other hold-backs (the
reasoning splitter, the tool-call extractor) and gives the **reply events** defined here; one writer per dialect
(``wire/``, each a :class:`ReplyWriter`) turns the events into frames or a whole body, and a
:class:`ReplyCollector` gathers them into a whole :class:`Reply`. Nothing below the writers knows a dialect.

The events, in the order a reply can give them:

- ``TextDelta`` (``_stream``'s own type: the answer's text, final) and :class:`ReasoningDelta` (reasoning text,
  final), any number, interleaved only as the model wrote them;
- per tool call, :class:`CallStarted` (its index from 0, the id made for it, the function's name), then
  :class:`CallArguments` (fragments of the arguments' JSON text, the model's own characters), then
  :class:`CallEnded`;
- exactly one :class:`ReplyEnded` (why, usage, the matched stop) — or :class:`ReplyFailed` when the reply
  broke (a malformed call, an engine failure) after it started.

Every event that a token produced carries ``token_ids``, the ids consumed since the previous such event (ids
whose text a hold-back kept ride on the next event written), and ``steps``, their step times when asked for;
so the ids of all events, joined, are the engine's ids up to the reply's end, for any split.

Standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, TypeAlias

from tokenrelay._errors import UseAfterFinishError
from tokenrelay._stream import StepTime, TextDelta, Timings, Usage

if TYPE_CHECKING:
    from tokenrelay._errors import TokenRelayError

__all__ = [
    "CallArguments",
    "CallEnded",
    "CallStarted",
    "EndReason",
    "ReasoningDelta",
    "Reply",
    "ReplyCollector",
    "ReplyEnded",
    "ReplyEvent",
    "ReplyFailed",
    "ReplyWriter",
    "TextDelta",
    "ToolCall",
]

EndReason: TypeAlias = Literal["stop", "length", "tool_calls"]


# The per-token events are plain slotted classes, not frozen ones: a frozen dataclass's __init__ goes through
# object.__setattr__ per field, 670 ns against 140 ns here (python -m timeit), once per token on the reasoning
# path. Nothing changes them once made.
@dataclass(slots=True)
class ReasoningDelta:
    """Reasoning text that is final (the model's thinking, apart from the answer)."""

    text: str
    token_ids: tuple[int, ...] = ()
    steps: tuple[StepTime, ...] | None = None


@dataclass(frozen=True, slots=True)
class CallStarted:
    """The reply's ``index``-th tool call (from 0): the id made for it and the function's name."""

    index: int
    id: str
    name: str
    token_ids: tuple[int, ...] = ()
    steps: tuple[StepTime, ...] | None = None


@dataclass(slots=True)
class CallArguments:
    """More of the ``index``-th call's arguments: JSON text as the model wrote it, never re-serialized."""

    index: int
    text: str
    token_ids: tuple[int, ...] = ()
    steps: tuple[StepTime, ...] | None = None


@dataclass(frozen=True, slots=True)
class CallEnded:
    """The ``index``-th call is complete: its arguments are all out."""

    index: int
    token_ids: tuple[int, ...] = ()  # always empty: the ids of a call's text ride on its other events
    steps: tuple[StepTime, ...] | None = None


@dataclass(frozen=True, slots=True)
class ReplyEnded:
    """The reply ended: ``"stop"`` (by itself, or a stop string: ``matched``), ``"length"`` (cut by
    ``max_tokens`` or the context) or ``"tool_calls"`` (it called something and ended by itself).

    ``token_ids``: the consumed ids no other event carried (the end-of-sequence id, ids of held text);
    ``reasoning_tokens``: how many of the reply's ids were reasoning."""

    reason: EndReason
    usage: Usage
    token_ids: tuple[int, ...] = ()
    steps: tuple[StepTime, ...] | None = None
    matched: str | int | None = None
    timings: Timings | None = None
    reasoning_tokens: int = 0
    in_reasoning: bool = False  # the reply was cut while it was still reasoning


@dataclass(frozen=True, slots=True)
class ReplyFailed:
    """The reply broke after it started (a malformed call, an engine failure): a writer reports ``error``."""

    error: TokenRelayError


ReplyEvent: TypeAlias = (
    TextDelta | ReasoningDelta | CallStarted | CallArguments | CallEnded | ReplyEnded | ReplyFailed
)


class ReplyWriter(Protocol):
    """One dialect's writer of one reply (``wire/``): reply events in, SSE frame bytes or a whole body out.

    A stream: ``start()`` is the frames that go before the first event (a role chunk, a ``response.created``,
    a ``message_start``); ``write(event)`` the frames of one event (none for an event the dialect does not
    show), those of ``ReplyEnded`` or ``ReplyFailed`` ending the stream. Each frame is one SSE event, which
    the server sends as one write. ``sent`` is when the frame leaves, on the server's
    clock, for a writer that stamps frames (Chat Completions' ``include_step_times``). ``keepalive`` is the
    frame sent while the stream is idle. A whole reply: ``body(reply)``, or ``error_body(error)`` (the status
    and body of an error in the dialect's shape)."""

    @property
    def keepalive(self) -> bytes: ...
    def start(self, sent: float | None = None) -> Sequence[bytes]: ...
    def write(self, event: ReplyEvent, sent: float | None = None) -> Sequence[bytes]: ...
    def body(self, reply: Reply) -> bytes: ...
    def error_body(self, error: TokenRelayError) -> tuple[int, bytes]: ...


@dataclass(frozen=True)
class ToolCall:
    """One call of a whole reply."""

    id: str
    name: str
    arguments: str


@dataclass
class Reply:
    """A whole reply, collected from its events (:class:`ReplyCollector`): what a non-streamed body says."""

    text: str
    reasoning: str
    calls: list[ToolCall]
    end: ReplyEnded
    token_ids: list[int] = field(default_factory=list)  # every id of the reply, in order


class ReplyCollector:
    """Reply events in, a :class:`Reply` out (the whole-body form of one reply; ``ReplyFailed`` raises)."""

    __slots__ = ("_arguments", "_calls", "_end", "_ids", "_reasoning", "_text")

    def __init__(self) -> None:
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: list[tuple[str, str]] = []
        self._arguments: list[list[str]] = []
        self._ids: list[int] = []
        self._end: ReplyEnded | None = None

    def add(self, event: ReplyEvent) -> None:
        t = type(event)
        if t is ReplyFailed:
            assert isinstance(event, ReplyFailed)
            raise event.error
        if self._end is not None:
            raise UseAfterFinishError("ReplyCollector.add() after the reply ended")
        self._ids.extend(event.token_ids)  # type: ignore[union-attr]
        if t is TextDelta:
            self._text.append(event.text)  # type: ignore[union-attr]
        elif t is ReasoningDelta:
            self._reasoning.append(event.text)  # type: ignore[union-attr]
        elif t is CallStarted:
            assert isinstance(event, CallStarted)
            self._calls.append((event.id, event.name))
            self._arguments.append([])
        elif t is CallArguments:
            assert isinstance(event, CallArguments)
            self._arguments[event.index].append(event.text)
        elif t is ReplyEnded:
            assert isinstance(event, ReplyEnded)
            self._end = event

    def reply(self) -> Reply:
        """The whole reply; the events must have ended with ``ReplyEnded``."""
        if self._end is None:
            raise ValueError("the reply has not ended")
        calls = [ToolCall(i, n, "".join(a)) for (i, n), a in zip(self._calls, self._arguments, strict=True)]
        return Reply("".join(self._text), "".join(self._reasoning), calls, self._end, self._ids)

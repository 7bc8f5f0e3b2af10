"""The reply pipeline: ``TextStream``'s events through the hold-backs, as reply events (``_reply``).

Contract of :class:`ReplyPipeline` (tested over every split of the engine's ids): the joined text of each kind,
the calls and the end are the same for any split; no event is empty; an event is released as soon as every
hold-back has made it final; the ids of all events, joined, are the engine's ids up to the reply's end. Standard
library only; ids of calls come from the caller (``new_call_id``), so the core holds no randomness.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from tokenrelay._errors import ToolCallError, UseAfterFinishError
from tokenrelay._reasoning import ReasoningSplitter
from tokenrelay._reply import (
    CallArguments,
    CallEnded,
    CallStarted,
    EndReason,
    ReasoningDelta,
    ReplyEnded,
    ReplyEvent,
)
from tokenrelay._stops import StopMatcher
from tokenrelay._stream import Finished, StepTime, TextDelta
from tokenrelay._tool_call_events import (
    ContentDelta,
    ToolArgumentsDelta,
    ToolCallEnded,
    ToolCallInvalid,
    ToolCallStarted,
)
from tokenrelay._tool_calls import ToolCallExtractor

if TYPE_CHECKING:
    from tokenrelay._tool_call_events import ToolCallFormat

__all__ = ["ReplyPipeline"]


class ReplyPipeline:
    """``TextStream``'s events through the reasoning splitter and the tool-call extractor, as reply events.

    ``feed(delta)`` per ``TextDelta``, ``finish(finished)`` with the stream's ``Finished`` (or, once
    :attr:`done`, one the caller made: the engine must then be stopped). With neither hold-back a delta goes
    out as it came (the same object). Joined outputs over any split of the ids equal the one-shot result.
    ``ToolCallInvalid`` (a call whose markup broke) is raised as ``ToolCallError`` (``invalid_tool_call``).

    ``stops``: stop strings that act on the answer alone, between the reasoning splitter and the tool-call
    extractor (a stop string the model writes while it thinks does not end the reply). The server gives them
    here instead of to ``TextStream`` when it splits reasoning off; the reply is then :attr:`done` at the
    stop, which ``ReplyEnded.matched`` names.
    """

    __slots__ = (
        "_calls",
        "_closing",
        "_ended",
        "_extractor",
        "_ids",
        "_mid_reasoning",
        "_new_call_id",
        "_passing",
        "_reasoning",
        "_reasoning_only",
        "_reasoning_tokens",
        "_steps",
        "_stops",
        "_timed",
        "plain",
    )

    def __init__(
        self,
        *,
        tools: ToolCallFormat | None = None,
        parallel: bool = True,
        reasoning: ReasoningSplitter | None = None,
        new_call_id: Callable[[], str] | None = None,
        stops: Sequence[str] = (),
    ) -> None:
        self._extractor = ToolCallExtractor(tools, parallel=parallel) if tools is not None else None
        self._stops = StopMatcher(stops) if stops else None
        self._reasoning = reasoning
        if tools is not None and new_call_id is None:
            raise ValueError("a pipeline with tools needs new_call_id")
        self._new_call_id = new_call_id
        self._calls = 0
        self._ids: list[int] = []  # ids of text a hold-back keeps: they ride on the next event out
        self._steps: list[StepTime] = []
        self._timed = False
        self._reasoning_tokens = 0
        self._ended = False
        #: No hold-back: every delta goes out unchanged (the server's plain prose path).
        self.plain = self._extractor is None and reasoning is None and self._stops is None
        self._passing = self.plain
        self._reasoning_only = reasoning is not None and self._extractor is None and self._stops is None
        self._mid_reasoning = reasoning is not None and reasoning.mid_reasoning  # kept after each feed
        self._closing = reasoning.format.closing if reasoning is not None else ""

    @property
    def done(self) -> bool:
        """The reply is complete before the engine ended it (``parallel_tool_calls: false``, one call out;
        a stop string in the answer)."""
        return (self._extractor is not None and self._extractor.done) or (
            self._stops is not None and self._stops.stopped
        )

    @property
    def calls(self) -> int:
        """Calls started so far."""
        return self._calls

    def feed(self, delta: TextDelta) -> Sequence[ReplyEvent]:
        """The reply events of one ``TextDelta``."""
        if self._passing:
            # No hold-back, or reasoning alone and its answer begun with nothing held: the delta goes out as it
            # came, for every later delta too (the splitter would pass it on whole).
            return (delta,)
        if self._ended:
            raise UseAfterFinishError("ReplyPipeline.feed() after finish()")
        if self._reasoning_only and not self._ids:
            # Reasoning alone, nothing held: the common deltas leave as one event with the delta's own ids.
            # Mid-reasoning, a delta with no closing tag in it is all reasoning and changes nothing in the
            # splitter: checked here (the splitter's own fast-path test, inlined: once per token).
            text = delta.text
            if self._mid_reasoning and text:
                closing = self._closing
                if text.find(closing[0], -len(closing)) < 0 and closing not in text:
                    ids = delta.token_ids
                    self._reasoning_tokens += len(ids)
                    return (ReasoningDelta(text, ids, delta.steps),)
            reasoning = self._reasoning
            assert reasoning is not None
            if reasoning.answering:
                self._passing = True
                return (delta,)
            pieces = reasoning.feed(text)
            self._mid_reasoning = reasoning.mid_reasoning
            if len(pieces) == 1:
                piece = pieces[0]
                if type(piece) is ContentDelta:
                    return (
                        delta
                        if piece.text == delta.text
                        else TextDelta(piece.text, delta.token_ids, delta.steps),
                    )
                self._reasoning_tokens += len(delta.token_ids)
                return (ReasoningDelta(piece.text, delta.token_ids, delta.steps),)
            self._ids.extend(delta.token_ids)
            if delta.steps is not None:
                self._timed = True
                self._steps.extend(delta.steps)
            out: list[ReplyEvent] = []
            self._split(pieces, out)
            return out
        self._ids.extend(delta.token_ids)
        if delta.steps is not None:
            self._timed = True
            self._steps.extend(delta.steps)
        out = []
        reasoning = self._reasoning
        if reasoning is None:
            self._answer(delta.text, out)
        else:
            self._split(reasoning.feed(delta.text), out)
            self._mid_reasoning = reasoning.mid_reasoning
        return out

    def finish(self, finished: Finished) -> list[ReplyEvent]:
        """The events that end the reply: what the hold-backs still held, then ``ReplyEnded``."""
        if self._ended:
            return []
        self._ended = True
        self._passing = False  # a feed after this raises
        out: list[ReplyEvent] = []
        in_reasoning = False
        if self._reasoning is not None:
            in_reasoning = self._reasoning.in_reasoning
            self._split(self._reasoning.finish(), out)
        matched = finished.matched
        reason: EndReason = finished.reason
        if self._stops is not None:
            if self._stops.stopped:
                reason, matched = "stop", self._stops.matched
            else:
                held = self._stops.finish()
                if held:
                    self._past_stops(held, out)
        if self._extractor is not None:
            self._tool_events(self._extractor.finish(truncated=reason == "length"), out)
        ids, steps = self._take()
        steps = (*(steps or ()), *(finished.steps or ())) or None
        if self._calls and reason == "stop":
            reason = "tool_calls"
        out.append(
            ReplyEnded(
                reason,
                finished.usage,
                (*ids, *finished.token_ids),
                steps,
                matched,
                finished.timings,
                self._reasoning_tokens,
                in_reasoning,
            )
        )
        return out

    # -- internals ---------------------------------------------------------------------------------

    def _take(self) -> tuple[tuple[int, ...], tuple[StepTime, ...] | None]:
        ids = tuple(self._ids)
        self._ids.clear()
        steps = tuple(self._steps) if self._timed else None
        self._steps.clear()
        return ids, steps

    def _split(self, pieces: Sequence[object], out: list[ReplyEvent]) -> None:
        for piece in pieces:
            text = piece.text  # type: ignore[attr-defined]
            if type(piece) is ContentDelta:
                self._answer(text, out)
            else:  # the splitter's reasoning
                ids, steps = self._take()
                self._reasoning_tokens += len(ids)
                out.append(ReasoningDelta(text, ids, steps))

    def _answer(self, text: str, out: list[ReplyEvent]) -> None:
        if self._stops is not None:
            text = self._stops.feed(text)  # what can no longer become a stop; "" once stopped
            if text:
                self._past_stops(text, out)
            return
        self._past_stops(text, out)

    def _past_stops(self, text: str, out: list[ReplyEvent]) -> None:
        if self._extractor is None:
            ids, steps = self._take()
            out.append(TextDelta(text, ids, steps))
        else:
            self._tool_events(self._extractor.feed(text), out)

    def _tool_events(self, events: Sequence[object], out: list[ReplyEvent]) -> None:
        for e in events:
            t = type(e)
            if t is ContentDelta:
                assert isinstance(e, ContentDelta)
                ids, steps = self._take()
                out.append(TextDelta(e.text, ids, steps))
            elif t is ToolCallStarted:
                assert isinstance(e, ToolCallStarted) and self._new_call_id is not None
                ids, steps = self._take()
                self._calls += 1
                out.append(CallStarted(e.index, self._new_call_id(), e.name, ids, steps))
            elif t is ToolArgumentsDelta:
                assert isinstance(e, ToolArgumentsDelta)
                ids, steps = self._take()
                out.append(CallArguments(e.index, e.text, ids, steps))
            elif t is ToolCallEnded:
                assert isinstance(e, ToolCallEnded)
                out.append(CallEnded(e.index))
            elif t is ToolCallInvalid:
                assert isinstance(e, ToolCallInvalid)
                raise ToolCallError(
                    f"the model's tool call is malformed: {e.message} (at character {e.offset} of the reply)",
                    code="invalid_tool_call",
                )

"""The Markdown fence a model may write around a constrained JSON reply, kept out of the text sent.

Small models open a JSON answer with a Markdown fence (SmolLM2's most likely first token for "… as JSON." is
```` ``` ````), and a grammar that starts at ``{`` pushes them off the path they would follow: the embedded engine
loops where llama-server, whose ``json_object`` grammar lets the fence open first and strips it afterwards,
finishes (issue 33, benchmarks/README.md). So the constrained grammar allows an optional opening fence
(:data:`OPENINGS`) before the JSON and an optional :data:`CLOSING` after it, and :class:`FenceStripper` takes
them out of the reply's text as it streams: the client gets the JSON alone, the same text whether or not the
model wrote a fence.

``feed(text) -> text`` and ``finish() -> text``. Held back: at the start, only a real partial opening fence
(at most ``len("```json\\n") - 1`` characters, and only while the reply has not shown anything else); at any
point, only a real partial closing fence at the end of what came (at most 3 characters). The closing fence is
dropped only at the very end of the reply; one followed by anything is text. Joined outputs over any split of
the input equal the one-shot result. :class:`UnfencedEvents` applies it to ``TextStream``'s events (what
``engines.base.stream_events`` does for a constrained reply, so every front end gets the JSON alone): the ids
of text it holds ride on the next delta, or on ``Finished``. Standard library only.
"""

from __future__ import annotations

import dataclasses

from tokenrelay._errors import UseAfterFinishError
from tokenrelay._stream import Event, TextDelta

__all__ = ["CLOSING", "OPENINGS", "FenceStripper", "UnfencedEvents"]

#: The opening fences the grammar allows before the JSON, longest first.
OPENINGS = ("```json\n", "```\n")
#: The closing fence the grammar allows after the JSON (the reply's last characters).
CLOSING = "\n```"


class FenceStripper:
    """A constrained reply's text without the fence around its JSON (see the module docstring)."""

    __slots__ = ("_finished", "_head", "_opening", "_tail")

    def __init__(self) -> None:
        self._opening = True  # the start is not settled: the text so far may be an opening fence
        self._head = ""  # while opening: what came so far (a proper prefix of an opening fence)
        self._tail = ""  # after it: a partial closing fence held at the end
        self._finished = False

    def feed(self, text: str) -> str:
        """The part of the reply's text that is final (``""`` while only a partial fence came)."""
        if self._finished:
            raise UseAfterFinishError("FenceStripper.feed() called after finish()")
        if self._opening:
            head = self._head + text
            for fence in OPENINGS:
                if head.startswith(fence):
                    self._opening, self._head = False, ""
                    return self._body(head[len(fence) :])
            if any(fence.startswith(head) for fence in OPENINGS):
                self._head = head  # still a real partial opening fence
                return ""
            self._opening, self._head = False, ""
            return self._body(head)
        return self._body(text)

    def finish(self) -> str:
        """End of the reply: a complete closing fence is dropped; a partial one, or a partial opening, is text."""
        if self._finished:
            return ""
        self._finished = True
        if self._opening:
            head, self._head = self._head, ""
            return head
        tail, self._tail = self._tail, ""
        return "" if tail == CLOSING else tail

    def _body(self, text: str) -> str:
        if not text:
            return ""
        text = self._tail + text
        # Hold the longest suffix that is a prefix of the closing fence (it may be the reply's last characters).
        for n in range(min(len(CLOSING), len(text)), 0, -1):
            if CLOSING.startswith(text[-n:]):
                self._tail = text[-n:]
                return text[:-n]
        self._tail = ""
        return text


class UnfencedEvents:
    """``TextStream``'s events of a constrained reply, the fence taken out of their text; the ids of every event
    joined are the stream's ids (a delta whose text was all fence passes its ids on)."""

    __slots__ = ("_ids", "_strip")

    def __init__(self) -> None:
        self._strip = FenceStripper()
        self._ids: tuple[int, ...] = ()

    def feed(self, events: list[Event]) -> list[Event]:
        out: list[Event] = []
        for event in events:
            if isinstance(event, TextDelta):
                text = self._strip.feed(event.text)
                ids = self._ids + event.token_ids
                if text:
                    self._ids = ()
                    out.append(dataclasses.replace(event, text=text, token_ids=ids))
                else:
                    self._ids = ids
                continue
            rest = self._strip.finish()
            ids, self._ids = self._ids, ()
            if rest:
                out.append(TextDelta(rest, ids))
                ids = ()
            out.append(dataclasses.replace(event, token_ids=ids + event.token_ids) if ids else event)
        return out

"""ToolCallExtractor: a reply's text deltas in, content deltas and tool-call deltas out (issue 21 §2).

Sans-I/O and standard library only. A model asked to call tools writes the calls in its own markup; this
reads the formats real models emit (``_tool_call_events.FORMATS``, which also holds the events):

- ``hermes`` (Hermes, Qwen 2.5/3, and tokenrelay's generic format): ``<tool_call>`` + one JSON object
  ``{"name": ..., "arguments": {...}}`` + ``</tool_call>``, repeated for parallel calls; text before the first
  call is content. A last call whose closing tag never comes (the reply ends after its JSON) is complete;
- ``llama3`` (Llama 3.1–3.3 JSON tool calling): a reply that starts with ``<|python_tag|>`` is calls, JSON
  objects ``{"name": ..., "parameters": {...}}`` separated by ``;``. A reply that starts with a bare ``{`` is
  a call only once its object has the call's shape, a string ``name`` and an object ``parameters`` (or
  ``arguments``), in either order, with an optional ``"type": "function"``: any other JSON answer
  (``{"capital": "Paris"}``, ``{}``, ``{"a": 1} is a dict``) is content, released as soon as a key that no
  call has (or a value that no call holds) shows it (issue 31 §3); any other reply is content;
- ``mistral`` (Mistral v3 and Tekken): ``[TOOL_CALLS]`` + one JSON array of ``{"name", "arguments"}`` objects.

``<|python_tag|>`` and ``[TOOL_CALLS]`` are special tokens, which a detokenizer drops by default: those formats
need text decoded with special tokens kept (:attr:`ToolCallFormat.needs_specials`).

The rules (each has a test in ``tests/test_tool_calls.py``):

1. Arguments are the model's own text: the ``arguments`` value's characters exactly as written (never parsed
   and re-serialized), from its ``{`` to its ``}``. A call whose object has no ``arguments`` gets ``{}``.
2. Every character goes out as soon as it is known: content at once, except a tail that is a real partial
   match of the opening marker (the stop matcher's rule, ``_stops.py``) and whitespace at the very start of
   the reply (it may precede a call); a call's first delta (:class:`ToolCallStarted`) as soon as its name is
   complete (a bare llama3 call: once it has the call's shape); argument text as soon as it is read (while
   the call is not announced it waits). Whitespace between and after calls is markup, not content.
3. The JSON inside the markers is read once by :class:`~tokenrelay._partial_json.PartialJSON`, fed in pieces
   cut after each ``{`` and ``}``: the events of each piece then say exactly where the arguments begin (the
   ``{`` that ends the piece in which they start) and end (the ``}`` that ends the piece in which they
   complete). No text is parsed twice.
4. A malformed call — JSON that cannot continue, a call that is not an object, a name that is not a string or
   is missing, arguments that are not an object, text where a closing marker must be, a reply that stops
   inside a call — ends the extraction with :class:`ToolCallInvalid` (the server sends an OpenAI-shaped error
   event, or an error response) once the reply has announced a call: never a half call passed off as
   complete, and never retracted text. The argument text before the offending character still goes out
   first, so the events joined are the same for every split. Markup that breaks before the reply announced
   any call (``<tool_call>not valid json</tool_call>``, ``[TOOL_CALLS] none``) never became a call: it and the
   rest of the reply are content, released when it breaks, as the peers do (vLLM's parsers return the text
   as content; issue 31 §3). A reply cut by ``max_tokens`` inside a call (``finish(truncated=True)``) keeps
   the calls as they stand (``finish_reason: "length"`` says the last one is cut: it gets no
   :class:`ToolCallEnded`); a call cut after its marker but before its name was complete shows nothing.
5. ``parallel=False``: the extraction is :attr:`done` once the first call is complete; what follows is dropped
   (the caller stops the engine).

At ~480 lines this module is over the usual size because it is one state machine (text, a call's JSON, after
a call, plain text) whose states hand each other positions in the same piece of text, and whose give-back of
markup that never became a call (rule 4) reaches into all of them: split in two, each half would need the
other's state. The formats and events are already apart (``_tool_call_events.py``).

Contract: for any split of the reply's text into deltas, the events joined (:func:`join_events`) over the
``feed`` calls and ``finish`` are the same. ``finish()`` again returns ``[]``; ``feed`` after it raises
:class:`UseAfterFinishError`; after :attr:`done` or a :class:`ToolCallInvalid`, ``feed`` returns ``[]``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ._errors import JSONSyntaxError, UseAfterFinishError
from ._json_events import JSONEvent, ValueCompleted, ValueStarted
from ._partial_json import PartialJSON
from ._tool_call_events import (
    FORMATS,
    ContentDelta,
    ToolArgumentsDelta,
    ToolCallEnded,
    ToolCallEvent,
    ToolCallFormat,
    ToolCallInvalid,
    ToolCallStarted,
    format_for_template,
    join_events,
)

__all__ = [
    "FORMATS",
    "ContentDelta",
    "ToolArgumentsDelta",
    "ToolCallEnded",
    "ToolCallEvent",
    "ToolCallExtractor",
    "ToolCallFormat",
    "ToolCallInvalid",
    "ToolCallStarted",
    "format_for_template",
    "join_events",
]


class _Malformed(Exception):
    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


_BRACE = re.compile(r"[{}]")
# An array format's document ends at its ']': a piece ends there too, so text after the array (text again) is
# never fed to the JSON parser with it, whatever the cut.
_BRACE_OR_BRACKET = re.compile(r"[{}\]]")
_BARE_KEYS = frozenset(("name", "type", "parameters", "arguments"))  # what a bare llama3 call may open with
_WS = frozenset(" \t\r\n")

# Where the extractor is: in text (looking for the opening marker), inside a call's JSON, after a call's JSON
# (whitespace, then the closing marker or the separator), or in plain text with no call to come.
_TEXT, _JSON, _AFTER, _PLAIN = range(4)


class _Call:
    """The call being read: its name, and its arguments' text until it is announced."""

    __slots__ = ("arguments_open", "held", "index", "name", "seen_arguments")

    def __init__(self) -> None:
        self.name: str | None = None
        self.index = -1  # set when it is announced (its name complete; for a bare llama3 call, its shape too)
        self.held: list[str] = []  # argument text read before it was announced
        self.arguments_open = False
        self.seen_arguments = False


class ToolCallExtractor:
    """Incremental tool-call reader for one reply: ``feed(text) -> list[ToolCallEvent]``, then ``finish()``.

    Joined outputs over any split of the input equal the one-shot result (the contract and the rules are in
    the module docstring)."""

    __slots__ = (
        "_after_call",
        "_bare",
        "_call",
        "_calls",
        "_doc_base",
        "_done",
        "_ended",
        "_finished",
        "_fmt",
        "_held",
        "_json",
        "_out",
        "_parallel",
        "_pos",
        "_raw",
        "_raw_from",
        "_started",
        "_state",
    )

    def __init__(self, fmt: ToolCallFormat, *, parallel: bool = True) -> None:
        self._fmt = fmt
        self._parallel = parallel
        self._state = _TEXT
        self._held = ""  # text not yet released: a partial opening marker, leading whitespace, a closing one
        self._started = False  # some content has been released
        self._after_call = False  # the last thing read was a call: whitespace is markup
        self._json: PartialJSON | None = None
        self._doc_base = 0  # the reply offset where the current JSON document starts
        self._call: _Call | None = None
        self._calls = 0
        self._pos = 0  # characters of the reply fed before the current piece
        # The markup of a document read while the reply has announced no call (rule 4): it is given back as
        # content if it never becomes one. ``_raw_from``: where this feed's part of it begins.
        self._raw: list[str] | None = None
        self._raw_from = 0
        self._bare = False  # the document is llama3's bare ``{``: a call only once it has the call's shape
        self._out: list[ToolCallEvent] = []
        self._done = False
        self._ended = False  # done, or malformed: input is dropped
        self._finished = False

    @property
    def calls(self) -> int:
        """Calls announced so far."""
        return self._calls

    @property
    def done(self) -> bool:
        """``parallel=False`` and the one call is complete: the reply has nothing more to give."""
        return self._done

    def feed(self, text: str) -> list[ToolCallEvent]:
        """The events the next piece of the reply's text causes."""
        if self._finished:
            raise UseAfterFinishError("ToolCallExtractor.feed() after finish()")
        out = self._out = []
        if self._ended or not text:
            return out
        self._raw_from = 0
        try:
            self._read(text)
        except _Malformed as bad:
            self._fail(bad, text)
        else:
            if self._raw is not None:
                self._raw.append(text[self._raw_from :])
        self._pos += len(text)
        return out

    def finish(self, *, truncated: bool = False) -> list[ToolCallEvent]:
        """The reply is over; ``truncated``: it was cut (``max_tokens``), so a call inside it stays as it is."""
        if self._finished:
            return []
        self._finished = True
        out = self._out = []
        if self._ended:
            return out
        self._raw_from = 0
        try:
            self._end(truncated)
        except _Malformed as bad:
            self._fail(bad, "")
        return out

    # -- reading --------------------------------------------------------------------------------------------

    def _read(self, text: str) -> None:
        i, n = 0, len(text)
        while i < n and not self._ended:
            state = self._state
            if state == _PLAIN:
                self._content(text[i:])
                return
            if state == _TEXT:
                i = self._in_text(text, i)
            elif state == _JSON:
                i = self._in_json(text, i)
            else:
                i = self._after(text, i)

    def _content(self, text: str) -> None:
        if text:
            self._started = True
            out = self._out
            if out and type(out[-1]) is ContentDelta:  # one delta per feed where possible: one frame
                out[-1] = ContentDelta(out[-1].text + text)
            else:
                out.append(ContentDelta(text))

    def _in_text(self, text: str, i: int) -> int:
        fmt, opening = self._fmt, self._fmt.opening
        base = self._pos + i - len(self._held)  # the reply offset of ``buf[0]``
        buf = self._held + text[i:]
        self._held = ""
        start = 0
        if not self._started or self._after_call:
            # Whitespace at the start of the reply waits (a call may follow); after a call it is markup.
            while start < len(buf) and buf[start] in _WS:
                start += 1
            if start == len(buf):
                if not self._after_call:
                    self._held = buf
                return len(text)
            if self._after_call:
                buf, base, start = buf[start:], base + start, 0
                self._after_call = False
        if fmt.leading:  # llama3: calls only at the start of the reply
            rest = buf[start:]
            if rest.startswith(opening):
                return self._open_json(base + start + len(opening), buf[: start + len(opening)])
            if rest.startswith("{"):
                return self._open_json(base + start, buf[:start], bare=True)
            if opening.startswith(rest):
                self._held = buf  # a partial <|python_tag|>
                return len(text)
            self._state = _PLAIN
            self._content(buf)
            return len(text)
        found = buf.find(opening, start)
        if found >= 0:
            before = buf[:found]
            shown = self._started or before.strip()
            self._content(before if shown else "")
            return self._open_json(base + found + len(opening), opening if shown else before + opening)
        keep = _partial_tail(buf, opening, start)
        if not self._started and not buf[:keep].strip():
            keep = 0  # only whitespace before the partial marker: hold it all
        self._content(buf[:keep])
        self._held = buf[keep:]
        return len(text)

    def _open_json(self, reply_offset: int, markup: str = "", *, bare: bool = False) -> int:
        """Start a JSON document at ``reply_offset``, in the current piece (a marker ends there; held text is
        only ever part of one); its index in the piece. ``markup``: the text before it that goes back to
        content with it if it never becomes a call."""
        self._json = PartialJSON()
        self._doc_base = reply_offset
        self._state = _JSON
        self._bare = bare
        at = reply_offset - self._pos
        if self._calls == 0:
            self._raw = [markup]
            self._raw_from = at
        return at

    def _in_json(self, text: str, i: int) -> int:
        """Feed the JSON document; the index where it ended (or ``len(text)``)."""
        pj = self._json
        assert pj is not None
        ends = _BRACE_OR_BRACKET if self._fmt.array else _BRACE
        n = len(text)
        while i < n:
            brace = ends.search(text, i)
            j = brace.end() if brace else n
            piece = text[i:j]
            was_open = self._call is not None and self._call.arguments_open
            try:
                events = pj.feed(piece)
            except JSONSyntaxError as err:
                good = err.offset - (self._pos + i - self._doc_base)
                self._json_events(err.events, piece[:good], was_open)
                what = str(err).rsplit(" at offset ", 1)[0]
                raise _Malformed(f"a tool call is not valid JSON: {what}", self._pos + i + good) from None
            if self._json_events(events, piece, was_open):
                return j
            i = j
        return n

    def _json_events(self, events: Iterable[JSONEvent], piece: str, was_open: bool) -> bool:
        """Act on the events of one piece; true when the document is complete. (Events carry no offsets: a
        call that is well-formed JSON but not a call is reported at its document's start.)"""
        at = self._doc_base
        fmt = self._fmt
        call = self._call
        if was_open and call is not None:
            # Inside the arguments, every character read is theirs (they close at a '}' ending a piece).
            self._arguments(call, piece)
        for event in events:
            path = event.path
            depth = 1 if fmt.array else 0
            if type(event) is ValueStarted:
                if len(path) < depth:
                    if event.kind != "array":
                        raise _Malformed("the tool calls are not a JSON array", at)
                elif len(path) == depth:
                    if event.kind != "object":
                        raise _Malformed("a tool call is not a JSON object", at)
                    self._call = call = _Call()
                elif len(path) == depth + 1 and path[-1] in fmt.arguments and call is not None:
                    if call.seen_arguments:
                        raise _Malformed(f"a tool call has its arguments twice ({path[-1]!r})", at)
                    if event.kind != "object":
                        raise _Malformed(f"a tool call's {path[-1]!r} are not a JSON object", at)
                    call.seen_arguments = call.arguments_open = True
                    if call.index < 0 and call.name is not None:
                        self._announce(call)  # a bare call: its name and now its arguments, the call's shape
                    self._arguments(call, "{")  # the brace that ends this piece
                elif (
                    len(path) == 1
                    and self._bare
                    and call is not None
                    and call.index < 0
                    and path[0] not in _BARE_KEYS
                ):
                    raise _Malformed(f"a JSON object with a {path[-1]!r} is not a tool call", at)
            elif type(event) is ValueCompleted:
                if call is not None and len(path) == depth + 1:
                    if path[-1] == "name":
                        if not isinstance(event.value, str) or not event.value:
                            raise _Malformed("a tool call's name is not a non-empty string", at)
                        if call.name is None:
                            call.name = event.value
                            if not self._bare or call.seen_arguments:
                                self._announce(call)
                    elif path[-1] == "type" and self._bare and call.index < 0 and event.value != "function":
                        raise _Malformed(
                            "a JSON object whose 'type' is not 'function' is not a tool call", at
                        )
                    elif path[-1] in fmt.arguments and call.arguments_open:
                        call.arguments_open = False
                elif call is not None and len(path) == depth:
                    self._end_call(call, at)
                    call = None
                    if self._done:
                        return True
                if len(path) == 0:
                    self._json = None
                    self._raw = None  # a document that ended well (mistral's []): nothing to give back
                    self._state = _AFTER
                    self._after_call = True
                    return True
        return False

    def _announce(self, call: _Call) -> None:
        assert call.name is not None
        call.index = self._calls
        self._calls += 1
        self._raw = None  # a call was announced: from now on broken markup is an error (rule 4)
        self._out.append(ToolCallStarted(call.index, call.name))
        if call.held:
            self._out.append(ToolArgumentsDelta(call.index, "".join(call.held)))
            call.held.clear()

    def _arguments(self, call: _Call, text: str) -> None:
        if not text:
            return
        if call.index < 0:
            call.held.append(text)
            return
        out = self._out
        last = out[-1] if out else None
        if type(last) is ToolArgumentsDelta and last.index == call.index:
            out[-1] = ToolArgumentsDelta(call.index, last.text + text)
        else:
            out.append(ToolArgumentsDelta(call.index, text))

    def _end_call(self, call: _Call, at: int) -> None:
        if call.name is None:
            raise _Malformed("a tool call has no name", at)
        if call.index < 0:
            raise _Malformed("a JSON object with no arguments is not a tool call", at)  # bare llama3
        if not call.seen_arguments:
            self._out.append(ToolArgumentsDelta(call.index, "{}"))  # rule 1: no arguments is {}
        self._out.append(ToolCallEnded(call.index))
        self._call = None
        if not self._parallel:
            self._done = self._ended = True

    def _after(self, text: str, i: int) -> int:
        """After a call's JSON: whitespace, then the closing marker (hermes) or the separator (llama3)."""
        fmt = self._fmt
        expect = fmt.closing or fmt.separator
        if not expect:  # mistral: the array held the calls; what follows is text again
            self._state = _TEXT
            return i
        base = self._pos + i - len(self._held)
        buf = self._held + text[i:]
        self._held = ""
        start = 0
        while start < len(buf) and buf[start] in _WS:
            start += 1
        rest = buf[start:]
        if not rest:
            return len(text)  # whitespace between calls is markup
        if rest.startswith(expect):
            end = base + start + len(expect)
            if fmt.separator:
                return self._open_json(end)
            self._state = _TEXT
            return end - self._pos
        if expect.startswith(rest):
            self._held = rest  # a partial closing marker
            return len(text)
        raise _Malformed(f"expected {expect!r} after a tool call's JSON", base + start)

    # -- the end --------------------------------------------------------------------------------------------

    def _end(self, truncated: bool) -> None:
        state, held = self._state, self._held
        self._held = ""
        if state == _TEXT:
            self._content(held)  # a partial marker or leading whitespace, and no call after all
        elif state == _JSON and (not truncated or (self._bare and self._raw is not None)):
            pj = self._json
            # After a separator (llama3's trailing ';'), nothing more is fine; anything else is a cut call
            # (a bare llama3 one that never had the call's shape, truncated or not: given back as content).
            if pj is None or pj.has_value or not self._fmt.separator or self._bare:
                raise _Malformed("the reply ended inside a tool call", self._pos)
        # _AFTER: the last call's JSON is complete; its closing marker may be missing or partial (models end
        # there). A truncated reply keeps its calls as they stand: the finish reason says it was cut.

    def _fail(self, bad: _Malformed, text: str) -> None:
        """Malformed markup: an error once a call was announced; before, the markup and the rest of the reply
        are content (``text``: the current feed, whose part from ``_raw_from`` on is not in ``_raw`` yet)."""
        raw = self._raw
        if raw is None:
            self._out.append(ToolCallInvalid(str(bad), bad.offset))
            self._ended = True
            return
        self._raw = self._json = self._call = None
        self._held = ""
        self._state = _PLAIN
        self._content("".join(raw) + text[self._raw_from :])


def _partial_tail(buf: str, marker: str, start: int) -> int:
    """Where the longest tail of ``buf[start:]`` that is a proper prefix of ``marker`` begins (``len(buf)``:
    none)."""
    first = marker[0]
    k = max(start, len(buf) - len(marker) + 1)
    while True:
        k = buf.find(first, k)
        if k < 0:
            return len(buf)
        if marker.startswith(buf[k:]):
            return k
        k += 1

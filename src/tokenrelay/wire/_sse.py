"""Server-sent events, both ways: :func:`encode_event` writes one frame, :class:`SSEParser` reads a byte stream.

Sans-I/O and standard library only. The parser is the WHATWG HTML "event stream interpretation"
(https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation), rule by rule:

=====================  =================================================================================
bytes                  UTF-8 with U+FFFD replacement, never an exception; one leading BOM is dropped, even
                       when it arrives split over several chunks
line ends              CRLF, LF or a lone CR; a CR closing one chunk and an LF opening the next are one end
blank line             dispatch: last event id := id buffer; if data was seen, emit the event (data minus
                       its final LF, type from the event buffer or "message"); reset data, type, retry
``:...``               comment, ignored
``name:value``         one leading space of the value is dropped; a line without a colon is a name with an
                       empty value
``data``               append value + LF to the data buffer
``event``              set the event type buffer
``id``                 set the id buffer unless the value holds U+0000; it sticks across events
``retry``              only ASCII digits: set the reconnection time; anything else is ignored
other names            ignored
end of stream          the unterminated event is discarded; :attr:`SSEParser.truncated` says one was cut
=====================  =================================================================================

Because CR and LF never occur inside a multi-byte UTF-8 sequence, lines are split on bytes and each line is
decoded on its own; that gives exactly the text a whole-stream decode would, and lets the size limit count
real bytes.

Contract (tested whole, one byte at a time, at every split offset, and with hypothesis): for any way of
cutting the input into chunks, the events joined over ``feed(...)`` calls and ``close()`` equal the events of
``feed(whole); close()``, with the same ``last_event_id``, ``retry`` and ``truncated``. When the input breaks
the size limit, every cutting returns the same events and then raises the same :class:`ProtocolError`.
:meth:`SSEParser.iter_events` over the chunks is the same calls in a loop, and is tested the same way.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Iterable
from typing import NamedTuple

from tokenrelay._errors import ProtocolError, UseAfterFinishError

__all__ = ["DEFAULT_MAX_EVENT_BYTES", "KEEPALIVE", "SSEParser", "ServerSentEvent", "encode_event"]

#: A keep-alive: a comment line and a blank line. Every SSE client skips it; a blank line with no data
#: dispatches nothing (WHATWG), and a naive client that splits on "\n\n" sees a frame with no "data:" line.
KEEPALIVE = b": keep-alive\n\n"

#: The default bound on one line and on one event's field lines, in bytes. A chat chunk is a few hundred
#: bytes; 1 MiB still holds a whole long reply in a single event, while a peer that never ends a line or an
#: event costs at most a few MiB per stream before the parser refuses it. Raise it for endpoints that ship
#: images or other bulky payloads inside events.
DEFAULT_MAX_EVENT_BYTES = 1 << 20

_BOM = b"\xef\xbb\xbf"
_TEXT_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_FORBIDDEN_IN_FIELD = re.compile(r"[\r\n\0]")
_DATA = b"data: "


class ServerSentEvent(NamedTuple):
    """One dispatched event. ``id`` is the stream's last event id when it was dispatched (it is sticky).

    ``retry`` is the reconnection time (ms) set by a ``retry`` field inside this event, if any. A NamedTuple
    rather than a frozen dataclass: it is built once per event on the parser's hot path, where the
    dataclass's ``object.__setattr__`` initialiser costs several times as much.
    """

    event: str = "message"
    data: str = ""
    id: str = ""
    retry: int | None = None


_new_event = tuple.__new__


def encode_event(
    data: str | None = None,
    *,
    event: str | None = None,
    id: str | None = None,
    retry: int | None = None,
    comment: str | None = None,
) -> bytes:
    """One SSE frame as UTF-8 bytes with LF line ends.

    ``data`` is split on every line break (CRLF, CR, LF), one ``data:`` line each, so the payload can never
    end the frame early; the parser joins the lines with LF, so CRLF and CR in ``data`` arrive as LF.
    ``event`` and ``id`` holding CR, LF or NUL, and a ``retry`` that is not a non-negative int, raise
    :class:`ValueError`: rewriting them would silently send something else. A frame with only a ``comment``
    has no blank line, so it dispatches nothing: use it as a keep-alive. A frame with ``id`` or ``retry``
    but no ``data`` ends with a blank line, which sets the last event id without dispatching an event.
    """
    if data is None and event is None and id is None and retry is None and comment is None:
        raise ValueError("encode_event() needs data, event, id, retry or comment")
    lines: list[str] = []
    if comment is not None:
        lines.extend(": " + part if part else ":" for part in _TEXT_LINE_BREAK.split(comment))
    if event is not None:
        if _FORBIDDEN_IN_FIELD.search(event):
            raise ValueError(f"SSE event name may not contain CR, LF or NUL: {event!r}")
        lines.append("event: " + event)
    if id is not None:
        if _FORBIDDEN_IN_FIELD.search(id):
            # The spec makes a parser ignore an id holding NUL, and CR/LF would end the field early.
            raise ValueError(f"SSE id may not contain CR, LF or NUL: {id!r}")
        lines.append("id: " + id)
    if retry is not None:
        if isinstance(retry, bool) or not isinstance(retry, int) or retry < 0:
            raise ValueError(f"SSE retry must be a non-negative int (milliseconds), got {retry!r}")
        lines.append(f"retry: {retry}")
    if data is not None:
        lines.extend("data: " + part for part in _TEXT_LINE_BREAK.split(data))
    if data is None and event is None and id is None and retry is None:
        return ("\n".join(lines) + "\n").encode()
    return ("\n".join(lines) + "\n\n").encode()


class SSEParser:
    """Incremental, exact WHATWG event-stream parser: ``feed(bytes) -> list[ServerSentEvent]``, ``close()``;
    or ``iter_events(chunks)`` to drive both from an iterable of chunks.

    Joined outputs over any split of the input equal the one-shot result (see the module docstring).
    ``max_event_bytes`` bounds every line and the sum of an event's non-comment lines (line ends excluded); a
    stream over it gets :class:`ProtocolError` instead of more memory. Events completed before the offending
    line are returned first; the error is raised by that call when it has none to return, else by the next
    ``feed``/``close``. ``last_event_id`` seeds the id buffer, as a reconnecting client does. After
    :meth:`close` (which may be called again), ``feed`` raises :class:`UseAfterFinishError`.
    """

    __slots__ = (
        "_closed", "_data", "_error", "_event_type", "_head", "_id_buffer", "_last_event_id", "_limit",
        "_partial", "_plain", "_retry", "_retry_field", "_room", "_size", "_skip_lf", "_truncated",
    )  # fmt: skip

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES, *, last_event_id: str = "") -> None:
        if max_event_bytes < 1:
            raise ValueError("max_event_bytes must be positive")
        self._limit = max_event_bytes
        self._head: bytes | None = b""  # bytes held until we know whether they start with a BOM
        self._partial: list[bytes] = []  # the unterminated last line, in pieces
        self._room = max_event_bytes  # how far the partial line may grow before its size is checked
        self._skip_lf = False  # the last chunk ended in CR: an LF opening the next one ends no new line
        self._plain = False  # no BOM pending, no CR to pair, no error, not closed: feed's fast paths apply
        self._data: list[bytes] = []  # the current event's data values
        self._event_type = ""
        self._retry_field: int | None = None
        self._size = 0  # bytes of the current event's non-comment lines
        self._id_buffer = self._last_event_id = last_event_id
        self._retry: int | None = None
        self._error: ProtocolError | None = None
        self._closed = self._truncated = False

    @property
    def last_event_id(self) -> str:
        """The last event id string: the id buffer as it stood at the latest blank line."""
        return self._last_event_id

    @property
    def retry(self) -> int | None:
        """The reconnection time in milliseconds from the latest valid ``retry`` field, else ``None``."""
        return self._retry

    @property
    def truncated(self) -> bool:
        """After :meth:`close`: whether the stream stopped inside an event (a field line or a partial
        non-comment line with no blank line after it). Such an event is never dispatched."""
        return self._truncated

    def feed(self, data: bytes) -> list[ServerSentEvent]:
        """Parse the next chunk; return the events it completed, in a new list the caller may keep."""
        if not self._plain:  # a BOM still possible, an LF to skip, an error, a closed parser
            data = self._prepare(data)
        # ``10 in data`` is one memchr. (``b"\n" in data`` first tries to read ``b"\n"`` as an int and clears
        # the TypeError: several times slower, and this runs once per network read.)
        if 10 not in data:
            if 13 not in data:  # a piece of a line: most chunks when reads are small
                self._partial.append(data)
                room = self._room - len(data)
                self._room = room
                if room < 0:
                    self._check_partial()
                return []
            return self._any_lines(data)
        if 13 in data:
            return self._any_lines(data)
        return self._lf_lines(data)

    def _lf_lines(self, data: bytes) -> list[ServerSentEvent]:
        """``data`` ends lines with LF only, and at least one: parse the lines it completes."""
        # The region: the partial line and the chunk up to its last LF, that LF left out. ``rpartition`` is
        # one call for what ``rfind`` and two slices would do.
        head, _, tail = data.rpartition(b"\n")
        partial = self._partial
        if partial:
            partial.append(head)
            region = b"".join(partial)
            partial.clear()
        else:
            region = head
        # Most regions are ``data: p1\n\ndata: p2\n`` with nothing pending before them, so type "message",
        # no retry field, id buffer = last event id: the payloads are the pieces between ``\n\ndata: ``,
        # as long as none holds an LF. Anything else goes line by line.
        end = len(region) - 1  # the index of the region's last byte
        if self._size == 0 and region[:6] == _DATA and end < self._limit:
            if region.find(b"\n") == end:  # one event: a chat chunk at small cuts
                try:  # strict decoding is faster, and gives the same text when it succeeds
                    text = region[6:-1].decode()
                except UnicodeDecodeError:
                    text = region[6:-1].decode("utf-8", "replace")
                events = [_new_event(ServerSentEvent, ("message", text, self._last_event_id, None))]
            elif region[-1] != 10:
                return self._keep(tail, self._lines(region.split(b"\n")))
            else:
                payloads = region[6:-1].split(b"\n\ndata: ")
                if b"".join(payloads).find(b"\n") >= 0:
                    return self._keep(tail, self._lines(region.split(b"\n")))
                last_id = self._last_event_id
                events = []
                for payload in payloads:  # a loop, not a comprehension: no function frame on 3.10/3.11
                    try:
                        text = payload.decode()
                    except UnicodeDecodeError:
                        text = payload.decode("utf-8", "replace")
                    events.append(_new_event(ServerSentEvent, ("message", text, last_id, None)))
            room = self._limit - len(tail)
            if room < 0:
                return self._keep(tail, events)
            self._room = room
            if tail:
                partial.append(tail)
            return events
        return self._keep(tail, self._lines(region.split(b"\n")))

    def _any_lines(self, data: bytes) -> list[ServerSentEvent]:
        """``data`` holds a CR: split it as ``bytes.splitlines()`` does, at exactly CRLF, CR and LF."""
        lines = data.splitlines()
        last = data[-1]
        tail = b"" if last == 10 or last == 13 else lines.pop()  # the new unterminated line, if any
        if last == 13:  # maybe the CR of a CRLF: an LF opening the next chunk ends no line
            self._skip_lf, self._plain = True, False
        partial = self._partial
        if partial:
            partial.append(lines[0])
            lines[0] = b"".join(partial)
            partial.clear()
        return self._keep(tail, self._lines(lines))

    def iter_events(self, chunks: Iterable[bytes]) -> Generator[ServerSentEvent, None, None]:
        """Parse a stream given as chunks: ``feed`` each in turn, then :meth:`close` when they run out.

        Yields exactly the events those calls return and raises what they raise, each event before the next
        chunk is read, so a live stream is not held back. It is ``feed`` minus a method call per chunk: the
        chunks that end no line (most of them when reads are small) are handled here inline. Leaving the
        loop early leaves the parser open. Do not ``feed`` or ``close`` it yourself while the loop runs.
        """
        feed, lf_lines = self.feed, self._lf_lines
        partial = self._partial  # the same list until close(), after which _plain stays false
        plain = self._plain  # read again after every call and yield: anything may happen meanwhile
        for data in chunks:
            if plain:  # feed()'s tests, in the same order
                if 10 not in data:
                    if 13 not in data:
                        partial.append(data)
                        room = self._room = self._room - len(data)
                        if room < 0:
                            self._check_partial()
                        continue
                elif 13 not in data:
                    yield from lf_lines(data)
                    plain = self._plain
                    continue
            yield from feed(data)
            plain = self._plain
        self.close()

    def close(self) -> list[ServerSentEvent]:
        """End of stream. Returns no events (the spec discards an unterminated one); sets :attr:`truncated`."""
        if self._error is not None:
            raise self._error
        if not self._closed:
            self._closed, self._plain = True, False
            tail = (self._head or b"") + b"".join(self._partial)
            self._head, self._partial, self._data = None, [], []
            self._truncated = self._size > 0 or (bool(tail) and tail[0] != 58)  # 58 is ":", a comment
        return []

    def _prepare(self, data: bytes) -> bytes:
        """Raise a pending error; drop a BOM and the LF of a CRLF cut in two; say if the fast path applies."""
        if self._error is not None:
            raise self._error
        if self._closed:
            raise UseAfterFinishError("SSEParser.feed() after close()")
        if self._head is not None:
            data = self._take_bom(data)
        if self._skip_lf and data:
            self._skip_lf = False
            if data[0] == 10:
                data = data[1:]
        self._plain = self._head is None and not self._skip_lf
        return data

    def _keep(self, tail: bytes, events: list[ServerSentEvent]) -> list[ServerSentEvent]:
        """Keep ``tail`` as the partial line; raise a size error now only if there are no events."""
        self._room = self._limit - self._size
        if tail and self._error is None:
            self._partial.append(tail)
            self._room -= len(tail)
            if self._room < 0:
                try:
                    self._check_partial()
                except ProtocolError:
                    if not events:
                        raise
        if self._error is not None and not events:
            raise self._error
        return events

    def _take_bom(self, data: bytes) -> bytes:
        head = (self._head or b"") + data
        if len(head) < 3 and _BOM.startswith(head):
            self._head = head  # could still become a BOM
            return b""
        self._head = None
        return head[3:] if head.startswith(_BOM) else head

    def _fail(self) -> ProtocolError:
        # One message for both limits: a long line can trip either check first, depending on the cutting.
        self._error = ProtocolError(
            f"SSE line or event exceeds max_event_bytes={self._limit}", code="sse_event_too_large"
        )
        self._plain = False
        return self._error

    def _check_partial(self) -> None:
        """The partial line used up ``_room``: over the limit, unless it is a comment within the line limit."""
        line = b"".join(self._partial)
        length = len(line)
        if length > self._limit or line[0] != 58:
            raise self._fail()
        # A comment counts towards the line limit only (it is never stored): check again when it passes that.
        self._room = self._limit - length

    def _lines(self, lines: list[bytes]) -> list[ServerSentEvent]:
        """Process complete lines, one by one. ``data: ...`` and blank lines are handled inline."""
        events: list[ServerSentEvent] = []
        data = self._data
        size = self._size
        limit = self._limit
        for line in lines:
            if line[:6] == _DATA:
                data.append(line[6:])
                size += len(line)
                if size > limit:
                    break
            elif not line:
                self._last_event_id = self._id_buffer
                if data:
                    text = (data[0] if len(data) == 1 else b"\n".join(data)).decode("utf-8", "replace")
                    event = (self._event_type or "message", text, self._last_event_id, self._retry_field)
                    events.append(_new_event(ServerSentEvent, event))
                    data.clear()
                self._event_type = ""
                self._retry_field = None
                size = 0
            elif line[0] == 58:  # ":" starts a comment
                if len(line) > limit:
                    self._fail()
                    break
            else:
                size += len(line)
                if size > limit:
                    break
                self._field(line)
        if size > limit:
            self._fail()
        self._size = size
        return events

    def _field(self, line: bytes) -> None:
        name, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event_type = value.decode("utf-8", "replace")
        elif name == b"id":
            if b"\0" not in value:
                self._id_buffer = value.decode("utf-8", "replace")
        elif name == b"retry" and value.isdigit():  # bytes.isdigit(): ASCII digits only, not empty
            self._retry = self._retry_field = _decimal(value)


def _decimal(digits: bytes) -> int:
    """``int(digits)`` without CPython's 4300-digit guard (a hostile ``retry`` must not raise ValueError)."""
    value = 0
    for start in range(0, len(digits), 4000):
        piece = digits[start : start + 4000]
        value = value * 10 ** len(piece) + int(piece)
    return value

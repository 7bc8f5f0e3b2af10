"""What the probe recorded, as plain data: each body chunk with its arrival time, the headers, the cancel try.

Sans-I/O, standard library only: the probe fills these in from the network, tests build them by hand, and
:mod:`tokenrelay.doctor._checks` judges them.

Times are milliseconds on the client's clock since the request was sent. A chunk is one read from the
connection, after the transfer coding (chunked) and the content coding (gzip, deflate) were undone; ``wire``
is its size before the content coding, so compression shows as ``wire < len(data)``.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tokenrelay._errors import ProtocolError, UseAfterFinishError
from tokenrelay.wire._sse import ServerSentEvent, SSEParser

__all__ = [
    "CancelObservation",
    "Chunk",
    "ContentDecoder",
    "Exchange",
    "TimedEvent",
    "join_headers",
    "line_ends",
    "naive_event_count",
]


@dataclass(frozen=True)
class Chunk:
    at_ms: float
    data: bytes
    wire: int


@dataclass(frozen=True)
class TimedEvent:
    """An SSE event and the arrival time of the chunk that completed it."""

    event: ServerSentEvent
    at_ms: float
    index: int  # which chunk completed it


@dataclass(frozen=True)
class Exchange:
    """One streamed response. ``error`` is a transport or decoding failure that ended it early."""

    url: str
    status: int
    headers: Mapping[str, str]  # names in lower case; repeated headers joined with ", "
    headers_ms: float
    chunks: Sequence[Chunk]
    error: str | None = None
    method: str = "POST"

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    @property
    def body(self) -> bytes:
        return b"".join(chunk.data for chunk in self.chunks)

    @property
    def wire_bytes(self) -> int:
        return sum(chunk.wire for chunk in self.chunks)

    def chunk_ends(self) -> list[int]:
        """The body offset just past each chunk."""
        ends, total = [], 0
        for chunk in self.chunks:
            total += len(chunk.data)
            ends.append(total)
        return ends

    def events(self) -> tuple[list[TimedEvent], bool, str | None]:
        """The SSE events with arrival times, whether the stream stopped inside an event, and a parser error.

        Parsed with tokenrelay's own :class:`SSEParser` (CR, LF and CRLF line ends, split anywhere).
        """
        parser = SSEParser()
        timed: list[TimedEvent] = []
        try:
            for i, chunk in enumerate(self.chunks):
                timed.extend(TimedEvent(event, chunk.at_ms, i) for event in parser.feed(chunk.data))
            parser.close()
        except ProtocolError as exc:
            return timed, True, exc.message
        return timed, parser.truncated, None


@dataclass(frozen=True)
class CancelObservation:
    """The probe closed a diagnostic stream early and asked the status endpoint what the server did.

    ``noticed_ms`` is the client time from the close to the first status that no longer said ``running``;
    ``writes_later`` counts writes the server made between the last two status reads (0 once it stopped).
    """

    events_read: int
    status_available: bool
    state: str | None = None
    noticed_ms: float | None = None
    writes_sent: int = 0
    writes_received: int = 0
    writes_later: int = 0


def naive_event_count(body: bytes) -> int:
    """Events a client sees that splits the stream on ``"\\n\\n"`` and reads ``data:`` lines (a common bug:
    the WHATWG format also allows CRLF and a lone CR). Blocks after the last ``"\\n\\n"`` are never read."""
    blocks = body.split(b"\n\n")[:-1]
    return sum(1 for block in blocks if any(line.startswith(b"data:") for line in block.split(b"\n")))


def line_ends(body: bytes) -> dict[str, int]:
    """How many CRLF, lone CR and lone LF line ends ``body`` holds."""
    crlf = body.count(b"\r\n")
    return {"crlf": crlf, "cr": body.count(b"\r") - crlf, "lf": body.count(b"\n") - crlf}


class ContentDecoder:
    """Undo a ``Content-Encoding`` incrementally: ``feed(bytes) -> bytes``, ``flush() -> bytes``.

    Joined outputs over any split of the input equal the one-shot decoding. ``identity`` (or none), ``gzip``
    and ``deflate`` (zlib-wrapped, or raw as some servers send it) are known; anything else raises
    :class:`ValueError` at construction (the probe only offers ``gzip, deflate``); a corrupt body raises
    :class:`ValueError` too. ``flush()`` again returns ``b""``; ``feed`` after it raises
    :class:`UseAfterFinishError`.
    """

    def __init__(self, encoding: str | None) -> None:
        self.encoding = (encoding or "identity").strip().lower()
        self._head: bytes | None = None  # deflate: the first bytes, until there are two to sniff
        self._flushed = False
        if self.encoding in ("identity", ""):
            self._zlib = None
        elif self.encoding in ("gzip", "x-gzip"):
            self._zlib = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif self.encoding == "deflate":
            self._zlib = zlib.decompressobj()
            self._head = b""
        else:
            raise ValueError(f"cannot decode Content-Encoding {encoding!r}")

    def feed(self, data: bytes) -> bytes:
        if self._flushed:
            raise UseAfterFinishError("ContentDecoder.feed() after flush()")
        if self._zlib is None:
            return data
        if self._head is not None:
            data = self._head + data
            if len(data) < 2:
                self._head = data
                return b""
            self._head = None
            # RFC 9110 means zlib-wrapped (RFC 1950), but some servers send raw deflate: sniff the zlib header
            # (compression method 8 and a header checksum that is a multiple of 31).
            if data[0] & 0x0F != 8 or ((data[0] << 8) | data[1]) % 31:
                self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
        try:
            return self._zlib.decompress(data)
        except zlib.error as exc:
            raise ValueError(f"corrupt {self.encoding} body: {exc}") from exc

    def flush(self) -> bytes:
        flushed, self._flushed = self._flushed, True
        if self._zlib is None or flushed:
            return b""
        if self._head:
            raise ValueError("deflate stream ended after one byte")
        return self._zlib.flush()


def join_headers(pairs: Sequence[tuple[str, str]]) -> dict[str, str]:
    """Lower-case header names; repeated headers joined with ``", "`` (RFC 9110 §5.3)."""
    out: dict[str, str] = {}
    for name, value in pairs:
        key = name.lower()
        out[key] = f"{out[key]}, {value}" if key in out else value
    return out

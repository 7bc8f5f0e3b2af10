"""The diagnostic stream's payload: known bytes, cut at seeded random offsets into timed writes.

Sans-I/O and standard library only; the server (``tokenrelay.server.diagnostics``) writes what this module
plans and the probe rebuilds the same plan to check what arrived.

The body is a pure function of ``(stream, seed, events, eol)``:

* ``events`` SSE events, event ``k`` being ``id: k``, then ``data:`` holding an OpenAI
  ``chat.completion.chunk`` (so any OpenAI client can read it) whose ``delta.content`` is ``"[k] "`` and
  :data:`SAMPLE`, then a blank line. Every line ends with ``eol``: CRLF by default, because it is valid SSE
  that a client splitting on ``"\\n\\n"`` misreads; LF and a lone CR are there to try the other two.
* :data:`SAMPLE` holds what breaks relays: 4-byte emoji, a ZWJ sequence, a skin-tone modifier, the 3-byte
  ideographic full stop, Devanagari with virama and vowel signs, a combining acute accent (a hop that
  normalises Unicode changes it) and a *literal* U+FFFD, so that exactly one per event is expected.
* The body opens with the comment ``: stream open`` (:data:`OPENING_COMMENT`), sent alone as write 0, as
  tokenrelay's chat stream opens (``server.responses.OPENING``): a hop that decides from the first write
  (Caddy's ``encode`` compresses only when the first write is at least 512 bytes) must decide as it does for
  a chat stream, or the probe would measure a set-up the chat streams never see.
* The events after it are cut at ``events - 1`` distinct offsets drawn with ``random.Random(seed)``: as many
  writes as events, of random sizes, landing inside UTF-8 sequences and between CR and LF as chance has it.

Write ``i`` (the opening is write 0) is sent ``i * cadence`` after the first. The send times cannot be inside the writes they time
(the body is fixed before it is sent), so they travel after it: one last write holds an ``event: schedule``
whose data is :class:`Schedule` (every write's send time in ms since the response began, its byte offset and
size, the plan's parameters, the body's length and SHA-256), then ``data: [DONE]``. The server also keeps the
schedule under the stream id for the status endpoint, which covers a stream the client closed early.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

__all__ = [
    "EOLS",
    "MODEL",
    "OPENING_COMMENT",
    "SAMPLE",
    "DiagnosticPlan",
    "Schedule",
    "event_text",
    "parse_schedule",
]

SAMPLE = "🦙 👩\u200d💻 🙏🏽 日本語の文。 नमस्ते हिन्दी e\u0301 literal\ufffd end"
"""The text every event carries after its ``[k]`` prefix (the ``é`` is ``e`` + U+0301)."""

MODEL = "tokenrelay-diagnostics"
OPENING_COMMENT = ": stream open"
"""The comment line the body opens with (a chat stream's first write; see the module docstring)."""
EOLS = {"crlf": "\r\n", "lf": "\n", "cr": "\r"}
_MAX_EVENTS = 100_000


def event_text(index: int) -> str:
    """The ``delta.content`` of event ``index``."""
    return f"[{index}] {SAMPLE}"


def _chunk_json(stream: str, index: int) -> str:
    chunk = {
        "id": f"diag-{stream}",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": MODEL,
        "choices": [
            {"index": 0, "delta": {"content": event_text(index)}, "logprobs": None, "finish_reason": None}
        ],
    }
    # ensure_ascii=False: the emoji must travel as raw UTF-8 bytes, which is what the random cuts split.
    return json.dumps(chunk, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class DiagnosticPlan:
    """What one diagnostic stream sends. ``cadence_ms`` is the time between writes; it does not change bytes."""

    stream: str
    seed: int
    events: int = 60
    cadence_ms: float = 50.0
    eol: str = "crlf"

    def __post_init__(self) -> None:
        if not self.stream or not self.stream.isascii() or not self.stream.replace("-", "").isalnum():
            raise ValueError("stream id must be non-empty ASCII letters, digits and '-'")
        if len(self.stream) > 64:
            raise ValueError("stream id is at most 64 characters")
        if not 1 <= self.events <= _MAX_EVENTS:
            raise ValueError(f"events must be between 1 and {_MAX_EVENTS}")
        if not 0.0 <= self.cadence_ms <= 10_000.0:
            raise ValueError("cadence_ms must be between 0 and 10000")
        if self.eol not in EOLS:
            raise ValueError(f"eol must be one of {', '.join(EOLS)}")

    @cached_property
    def body(self) -> bytes:
        """Every payload event, in order, as the bytes the writes are cut from."""
        eol = EOLS[self.eol]
        return (
            self.opening
            + "".join(
                f"id: {k}{eol}data: {_chunk_json(self.stream, k)}{eol}{eol}" for k in range(self.events)
            )
        ).encode("utf-8")

    @property
    def opening(self) -> str:
        """The first write: the opening comment and a blank line."""
        return f"{OPENING_COMMENT}{EOLS[self.eol] * 2}"

    @cached_property
    def cuts(self) -> tuple[tuple[int, int], ...]:
        """``(offset, size)`` of each write: the opening, then ``events`` writes cut at seeded random offsets."""
        body, start = self.body, len(self.opening)
        points = sorted(random.Random(self.seed).sample(range(start + 1, len(body)), self.events - 1))
        bounds = [0, start, *points, len(body)]
        return tuple((a, b - a) for a, b in itertools.pairwise(bounds))

    def cuts_inside_characters(self) -> int:
        """How many cuts fall inside a UTF-8 sequence (the byte after the cut is a continuation byte)."""
        return sum(1 for offset, _ in self.cuts[2:] if self.body[offset] & 0xC0 == 0x80)

    def cuts_inside_crlf(self) -> int:
        """How many cuts fall between the CR and the LF of a CRLF."""
        return sum(1 for offset, _ in self.cuts[2:] if self.body[offset - 1 : offset + 1] == b"\r\n")

    def request_json(self) -> dict[str, object]:
        """The JSON body of a POST that asks a server for this plan (the doctor's probe)."""
        return {
            "stream": self.stream,
            "seed": self.seed,
            "events": self.events,
            "cadence_ms": self.cadence_ms,
            "eol": self.eol,
        }

    def query(self) -> dict[str, str]:
        """The query parameters that ask a server for this plan."""
        return {
            "stream": self.stream,
            "seed": str(self.seed),
            "events": str(self.events),
            "cadence_ms": f"{self.cadence_ms:g}",
            "eol": self.eol,
        }

    def trailer(self, schedule: Schedule | Mapping[str, object]) -> bytes:
        """The last write: the schedule event (a :class:`Schedule` or its JSON object), then ``data: [DONE]``."""
        eol = EOLS[self.eol]
        obj = schedule.to_json() if isinstance(schedule, Schedule) else dict(schedule)
        data = json.dumps(obj, separators=(",", ":"))
        return f"event: schedule{eol}data: {data}{eol}{eol}data: [DONE]{eol}{eol}".encode()


@dataclass(frozen=True)
class Schedule:
    """The plan's parameters and when each write went out: ``writes[i] = (send_ms, offset, size)``."""

    plan: DiagnosticPlan
    writes: tuple[tuple[float, int, int], ...]

    def to_json(self) -> dict[str, object]:
        body = self.plan.body
        return {
            "stream": self.plan.stream,
            "seed": self.plan.seed,
            "events": self.plan.events,
            "cadence_ms": self.plan.cadence_ms,
            "eol": self.plan.eol,
            "bytes": len(body),
            "sha256": hashlib.sha256(body).hexdigest(),
            "writes": [[round(t, 3), offset, size] for t, offset, size in self.writes],
        }


def parse_schedule(data: str | Mapping[str, object]) -> Schedule:
    """The :class:`Schedule` in a schedule event's data (a JSON string) or in a status endpoint's reply (a
    mapping); ``ValueError`` if it is not one, or if it lies about the body it describes."""
    try:
        obj: Any = json.loads(data) if isinstance(data, str) else data  # checked field by field below
        plan = DiagnosticPlan(
            stream=str(obj["stream"]),
            seed=int(obj["seed"]),
            events=int(obj["events"]),
            cadence_ms=float(obj["cadence_ms"]),
            eol=str(obj["eol"]),
        )
        writes = tuple((float(t), int(offset), int(size)) for t, offset, size in obj["writes"])
        claimed = (int(obj["bytes"]), str(obj["sha256"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not a diagnostic schedule: {exc}") from exc
    if claimed != (len(plan.body), hashlib.sha256(plan.body).hexdigest()):
        raise ValueError("the schedule's body length or SHA-256 differs from the plan it names")
    if [(o, s) for _, o, s in writes] != list(plan.cuts[: len(writes)]):
        raise ValueError("the schedule's writes differ from the plan's cuts")
    return Schedule(plan, writes)

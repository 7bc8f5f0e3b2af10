"""What a JSON document says while it streams: the value types and the events of ``PartialJSON``.

Sans-I/O and standard library only. A :class:`~tokenrelay._partial_json.PartialJSON` parser reports each change
of its snapshot as one of three events, each naming the value by its *path* from the root (object keys as
``str``, array indices as ``int``; the root is ``()``):

=====================  ==============================================================================
``ValueStarted``       a value appeared in the snapshot, with its ``kind``: an object or array at its
                       bracket, a string at its opening quote (as ``""``), a number, ``true``, ``false``
                       or ``null`` once complete (so their ``ValueStarted`` is followed at once by their
                       ``ValueCompleted``). For a value inside an object this is when its key appears.
``StringGrew``         the string at ``path`` grew by ``text`` (at most one per string per ``feed``)
``ValueCompleted``     the value at ``path`` is final; ``value`` is that value (for an object or array the
                       snapshot's own container, which will not change again)
=====================  ==============================================================================

Every value gets exactly one ``ValueStarted`` and, once the document has reached its end, one
``ValueCompleted``; a container's ``ValueCompleted`` follows those of all its members. How much text one
``StringGrew`` carries depends on how the input was cut, so the split contract compares events *joined*:
:func:`join_events` merges adjacent ``StringGrew`` of the same path (nothing else can come between two pieces
of one string), just as text deltas are compared joined.

The JS twin (``web/lib/partial_json.js``) has the same events as plain objects (``{type: "started" | "grew" |
"completed", path, kind | text | value}``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, TypeAlias

__all__ = [
    "JSONEvent",
    "JSONKind",
    "JSONPath",
    "JSONValue",
    "StringGrew",
    "ValueCompleted",
    "ValueStarted",
    "join_events",
]

#: A JSON value as Python holds it (what ``json.loads`` returns).
JSONValue: TypeAlias = bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"] | None
#: Where a value sits: object keys and array indices from the root (``()``) down.
JSONPath: TypeAlias = tuple[str | int, ...]
#: What a value is, known at its first character.
JSONKind: TypeAlias = Literal["object", "array", "string", "number", "boolean", "null"]


@dataclass(frozen=True, slots=True)
class ValueStarted:
    """A value appeared in the snapshot at ``path`` (see the module docstring for when)."""

    path: JSONPath
    kind: JSONKind


@dataclass(frozen=True, slots=True)
class StringGrew:
    """The string at ``path`` grew by ``text``."""

    path: JSONPath
    text: str


@dataclass(frozen=True, slots=True)
class ValueCompleted:
    """The value at ``path`` is final."""

    path: JSONPath
    value: JSONValue


JSONEvent: TypeAlias = ValueStarted | StringGrew | ValueCompleted


def join_events(events: Iterable[JSONEvent]) -> list[JSONEvent]:
    """``events`` with adjacent :class:`StringGrew` of one path merged into one: the form in which the events of
    any split of a document equal those of the whole."""
    joined: list[JSONEvent] = []
    for event in events:
        if type(event) is StringGrew and joined:
            last = joined[-1]
            if type(last) is StringGrew and last.path == event.path:
                joined[-1] = StringGrew(event.path, last.text + event.text)
                continue
        joined.append(event)
    return joined

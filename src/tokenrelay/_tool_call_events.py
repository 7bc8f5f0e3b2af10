"""What the tool-call extractor reads and says: the formats models write calls in, and the events of
:class:`~tokenrelay._tool_calls.ToolCallExtractor` (issue 21).

Sans-I/O and standard library only. A format (:class:`ToolCallFormat`) is data: its markers, whether the calls
are one JSON array, where the arguments are, and whether its markers are special tokens (then the reply must
be decoded with them kept). The events are small frozen values; :func:`join_events` merges adjacent text of
one kind, the form in which the events of every split of a reply are equal.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeAlias

__all__ = [
    "FORMATS",
    "HERMES",
    "LLAMA3",
    "MISTRAL",
    "TOOL_CALL_PARSERS",
    "ContentDelta",
    "ToolArgumentsDelta",
    "ToolCallEnded",
    "ToolCallEvent",
    "ToolCallFormat",
    "ToolCallInvalid",
    "ToolCallStarted",
    "format_for_template",
    "join_events",
]


@dataclass(frozen=True)
class ToolCallFormat:
    """How one family of models writes its calls (see the module docstring)."""

    name: str
    opening: str  # the marker before a call (hermes), before the calls (llama3, mistral)
    closing: str = ""  # the marker after each call (hermes)
    array: bool = False  # the calls are one JSON array after the marker (mistral)
    leading: bool = False  # calls only at the start of the reply, ``{`` opening them too (llama3)
    separator: str = ""  # between calls (llama3)
    arguments: tuple[str, ...] = ("arguments",)  # the key(s) of the arguments object
    needs_specials: bool = False  # the markers are special tokens: decode with them kept


HERMES = ToolCallFormat("hermes", "<tool_call>", closing="</tool_call>")
LLAMA3 = ToolCallFormat(
    "llama3",
    "<|python_tag|>",
    leading=True,
    separator=";",
    arguments=("parameters", "arguments"),
    needs_specials=True,
)
MISTRAL = ToolCallFormat("mistral", "[TOOL_CALLS]", array=True, needs_specials=True)
FORMATS = {f.name: f for f in (HERMES, LLAMA3, MISTRAL)}
"""The formats by name; tokenrelay's generic format (``_tools``) is ``hermes``."""

TOOL_CALL_PARSERS = {"hermes": HERMES, "llama3_json": LLAMA3, "llama4_json": LLAMA3, "mistral": MISTRAL}
"""The formats by vLLM's ``--tool-call-parser`` names (vLLM reads Llama 3's and Llama 4's JSON calls with one
parser; Qwen 2.5/3 use ``hermes``)."""


def format_for_template(template: str | None) -> ToolCallFormat | None:
    """The format a chat template that takes tools teaches its model; ``None`` for a template without tool
    support (tokenrelay then writes the generic format, read as ``hermes``)."""
    if not template or "tools" not in template:
        return None
    for marker, fmt in (("<tool_call>", HERMES), ("[TOOL_CALLS]", MISTRAL), ("<|python_tag|>", LLAMA3)):
        if marker in template:
            return fmt
    if '"parameters"' in template or "ipython" in template:
        return LLAMA3
    return None


@dataclass(frozen=True, slots=True)
class ContentDelta:
    """Text of the reply that is not a call."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    """The reply's ``index``-th call (from 0) calls ``name``: its first delta."""

    index: int
    name: str


@dataclass(frozen=True, slots=True)
class ToolArgumentsDelta:
    """More of the ``index``-th call's arguments text."""

    index: int
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallEnded:
    """The ``index``-th call is complete (its arguments are all out)."""

    index: int


@dataclass(frozen=True, slots=True)
class ToolCallInvalid:
    """The reply's calls are malformed from ``offset`` (in the reply's text) on: the extraction ended."""

    message: str
    offset: int


ToolCallEvent: TypeAlias = (
    ContentDelta | ToolCallStarted | ToolArgumentsDelta | ToolCallEnded | ToolCallInvalid
)


def join_events(events: Iterable[ToolCallEvent]) -> list[ToolCallEvent]:
    """``events`` with adjacent content deltas, and adjacent argument deltas of one call, merged: the form in
    which the events of every split of a reply are equal."""
    out: list[ToolCallEvent] = []
    for e in events:
        last = out[-1] if out else None
        if type(e) is ContentDelta and type(last) is ContentDelta:
            out[-1] = ContentDelta(last.text + e.text)
        elif type(e) is ToolArgumentsDelta and type(last) is ToolArgumentsDelta and last.index == e.index:
            out[-1] = ToolArgumentsDelta(e.index, last.text + e.text)
        else:
            out.append(e)
    return out

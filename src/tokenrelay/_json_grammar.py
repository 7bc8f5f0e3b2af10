"""What a constrained JSON reply may look like (issue 33): bounded numbers and bounded whitespace, sans I/O.

A grammar that lets a digit loop run forever lets a small model write ``"population": 11122000000000…`` until
``max_tokens``. llama.cpp's JSON-schema grammar bounds every number: an integral part of at most 16 digits
(``[0-9] | [1-9] [0-9]{0,15}``), a fraction of 1 to 16 digits, an exponent of at most 16. llguidance, which
constrains here, bounds an integer only by a schema's own ``minimum``/``maximum`` and never bounds a fraction.
Two pieces close the gap:

- :func:`bound_numbers` gives every ``integer`` or ``number`` subschema of a schema bounds like those
  llama.cpp's grammar implies, where the schema gives none: ``integer`` within ``±(2^53 - 1)`` (16 digits,
  and every JSON parser keeps it exactly), ``number`` within ``±10^16``. A schema's own ``minimum``/``maximum`` (or exclusive ones) stay as they are, and
  llguidance turns them into an exact range. It is plain schema data, so every engine that takes a schema
  (the embedded engine and vLLM's structured outputs) gets it.
- :class:`DigitRuns` follows the JSON text as it is sampled and says how many more digits the current run of
  digits outside a string may take (:attr:`DigitRuns.room`): with it the embedded engine caps every run (an
  integral part, a fraction, an exponent, any number of a ``json_object``) at 16 digits, which no schema
  keyword can express for a fraction.

The layout (:data:`LAYOUTS`, :func:`layout_options`): llguidance's options for the whitespace allowed between
the JSON's tokens. ``compact`` allows none (``{"a":1}``); ``pretty`` allows what llama.cpp's JSON grammar
allows (its ``space`` rule: nothing, one space, or one or two newlines and up to 20 spaces or tabs), so a model
can write the indented JSON it was trained on, and cannot pad a reply with blank lines. Which one the engines
use (:data:`LAYOUT`) was measured, not guessed (``benchmarks/constrained_finish.py``, 42 prompts × 2
temperatures against llama-server, benchmarks/README.md): SmolLM2-135M finished more replies compact (59 JSON
and 11 tool replies of 72 and 12, against 57 and 6 pretty and 52 and 0 for llama-server), in fewer tokens
(0.54–0.61× llama-server's per finished reply, against 0.76–0.81× pretty: indentation costs tokens); pretty
did better only at temperature 0.7 (31 against 27 of 36; llama-server 28–30, so compact misses the issue's
target there). And the requests compact loops on are ones where the model wanted to open a Markdown fence
first and write indented JSON inside it: with the fence allowed (``_json_fence``) the pretty layout finished
``"List three colours as JSON."`` in 39 tokens, compact still looped. So ``response_format`` is ``pretty``
(:data:`LAYOUT`: at least as many finished as llama-server at both temperatures, 0.76–0.81× its tokens) and a
tool call's arguments are ``compact`` (:data:`TOOL_LAYOUT`: 5–6 of 6 calls ended, against 2–4 pretty).

Standard library only.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any, TypeGuard

__all__ = [
    "INTEGER_LIMIT",
    "LAYOUT",
    "LAYOUTS",
    "MAX_DIGITS",
    "NUMBER_LIMIT",
    "TOOL_LAYOUT",
    "DigitRuns",
    "bound_numbers",
    "bounded",
    "layout_options",
]

LAYOUTS: dict[str, dict[str, object]] = {
    "compact": {"whitespace_flexible": False},
    # llama.cpp's json-schema-to-grammar SPACE_RULE, as one llguidance skip between two tokens of the JSON.
    "pretty": {"whitespace_flexible": True, "whitespace_pattern": r"[ ]|\n{1,2}[ \t]{0,20}"},
}
"""llguidance JSON options per layout (the whitespace between the JSON's tokens; none after the last)."""
LAYOUT = "pretty"
"""The layout of a ``response_format`` reply on every engine that constrains here (the module docstring)."""
TOOL_LAYOUT = "compact"
"""The layout of a tool call's arguments (the module docstring)."""


def layout_options(layout: str | None = None) -> dict[str, object]:
    """llguidance's whitespace options for ``layout`` (:data:`LAYOUT` by default): a fresh dict."""
    return dict(LAYOUTS[layout or LAYOUT])


MAX_DIGITS = 16
"""The most digits one run may have (llama.cpp's JSON grammar: integral part, fraction and exponent each)."""
INTEGER_LIMIT = 2**53 - 1
"""An ``integer``'s bound where its schema gives none: the largest integer every JSON parser keeps exactly
(JavaScript's ``Number.MAX_SAFE_INTEGER``, 16 digits). llama.cpp's grammar allows any 16 digits, but llguidance
reads bounds as doubles, and 10^16 - 1 is not one."""
NUMBER_LIMIT = float(10**MAX_DIGITS)
"""A ``number``'s bound where its schema gives none (its integral part then has at most 16 digits, or is
exactly 10^16)."""

# Keywords whose value is a subschema, a list of them, or a map of names to them.
_ONE = (
    *("additionalProperties", "items", "not", "if", "then", "else", "contains", "propertyNames"),
    *("unevaluatedProperties", "unevaluatedItems", "additionalItems", "contentSchema"),
)
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_NAMED = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_LOWER = ("minimum", "exclusiveMinimum")
_UPPER = ("maximum", "exclusiveMaximum")


def bound_numbers(schema: str) -> str:
    """``schema`` (JSON text) with llama.cpp's number bounds added where it gives none (the module
    docstring); the text unchanged when nothing needed a bound, or when it is not a JSON object."""
    try:
        data = json.loads(schema)
    except ValueError:
        return schema  # the caller's own checks say what is wrong with it
    if not isinstance(data, dict) or not _bound(data):
        return schema
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def bounded(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``schema`` (parsed JSON) with llama.cpp's number bounds added where it gives none."""
    data = copy.deepcopy(dict(schema))
    _bound(data)
    return data


def _bound(schema: Any) -> bool:
    """Add the bounds in place, in ``schema`` and its subschemas; whether anything was added."""
    if isinstance(schema, list):
        changed = False
        for item in schema:
            changed |= _bound(item)
        return changed
    if not isinstance(schema, dict):
        return False
    changed = False
    for key in _ONE:
        if key in schema:
            changed |= _bound(schema[key])
    for key in _MANY:
        if isinstance(schema.get(key), list):
            changed |= _bound(schema[key])
    for key in _NAMED:
        value = schema.get(key)
        if isinstance(value, dict):
            for sub in value.values():
                changed |= _bound(sub)
    kinds = schema.get("type")
    kinds = {kinds} if isinstance(kinds, str) else set(kinds) if isinstance(kinds, list) else set()
    if "number" in kinds:
        limit: float = NUMBER_LIMIT
    elif "integer" in kinds:
        limit = INTEGER_LIMIT
    else:
        return changed
    # A draft-4 boolean exclusiveMinimum/exclusiveMaximum is not a bound by itself. A bound the schema gives
    # beyond the limit keeps the other side open: the schema asked for numbers that long.
    lower = [float(v) for v in map(schema.get, _LOWER) if _numeric(v)]
    upper = [float(v) for v in map(schema.get, _UPPER) if _numeric(v)]
    if not lower and all(v >= -limit for v in upper):
        schema["minimum"] = -limit
        changed = True
    if not upper and all(v <= limit for v in lower):
        schema["maximum"] = limit
        changed = True
    return changed


def _numeric(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


class DigitRuns:
    """How many digits the JSON being written may still add to its current run of digits.

    ``feed(data)`` takes the text as it is sampled (UTF-8 bytes, split anywhere); :attr:`room` is how many
    digits may come next: ``MAX_DIGITS`` minus the digits just written outside a string, or ``None`` where
    digits are not counted (inside a string, or before ``start``: a tool call's JSON comes after its
    ``<tool_call>`` marker, and the prose before it is not JSON). ``finish()`` returns the run in progress
    (0 when none). The state after feeding any split of a text equals the state after feeding it whole.
    """

    __slots__ = ("_escape", "_in_string", "_run", "_seen", "_start")

    def __init__(self, start: bytes = b"") -> None:
        self._start = start
        self._seen = b""  # the tail of the text before ``start`` was found
        self._in_string = False
        self._escape = False
        self._run = 0

    @property
    def active(self) -> bool:
        """Whether the JSON has begun (``start`` written, or none asked for)."""
        return not self._start

    @property
    def room(self) -> int | None:
        if self._start or self._in_string:
            return None
        return max(0, MAX_DIGITS - self._run)

    def feed(self, data: bytes) -> None:
        if self._start:
            seen = self._seen + data
            at = seen.find(self._start)
            if at < 0:
                self._seen = seen[-(len(self._start) - 1) :] if len(self._start) > 1 else b""
                return
            data = seen[at + len(self._start) :]
            self._start = self._seen = b""
        in_string, escape, run = self._in_string, self._escape, self._run
        for byte in data:
            if in_string:
                if escape:
                    escape = False
                elif byte == 0x5C:  # backslash
                    escape = True
                elif byte == 0x22:  # quote
                    in_string = False
            elif 0x30 <= byte <= 0x39:
                run += 1
            else:
                run = 0
                in_string = byte == 0x22
        self._in_string, self._escape, self._run = in_string, escape, run

    def finish(self) -> int:
        return 0 if self.room is None else self._run

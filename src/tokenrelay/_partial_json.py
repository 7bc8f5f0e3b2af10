"""Streamed JSON: :class:`PartialJSON` turns a JSON text arriving in pieces into a value that only grows.

Sans-I/O and standard library only. A model asked for JSON (``response_format``) sends its reply as text
deltas; a client that re-parses the accumulated text on every delta does O(n²) work over a reply and shows
values that later change. ``PartialJSON`` reads each character once and keeps one live snapshot.

The snapshot rule (what a user sees in :attr:`PartialJSON.value` after any prefix of the text):

* Every value in the snapshot is a prefix of its final value, and everything that can be shown is shown.
* A string appears at its opening quote (as ``""``) and grows. A trailing unfinished escape (``\\``,
  ``\\u12``) is held back, and so is a high-surrogate escape (``\\ud83d``) until its low half has fully
  arrived; a lone surrogate escape becomes U+FFFD (a high one as soon as the next character shows it has no
  low half). Raw characters are kept as they are.
* A number appears only once complete: when a delimiter follows it, or at :meth:`~PartialJSON.finish` for a
  top-level number. Never a value that later changes (``12`` then ``123``).
* ``true``, ``false`` and ``null`` appear once their last letter arrives.
* An array or object appears at its ``[`` / ``{``; a key appears as soon as its value can be shown (with a
  string at its quote, with a number once the number is complete).
* Objects and lists are updated in place: ``.value`` returns the same live root every time, and reading it
  costs O(1), plus the length of the one open string when that string grew since the last read (a Python
  ``str`` is immutable, so the open string is kept in pieces and joined only when read). Containers inside the
  snapshot are brought up to date by reading ``.value``.
* A repeated key replaces the earlier value (as ``json.loads`` and ``JSON.parse`` do): the one case in which
  a value leaves the snapshot; RFC 8259 leaves repeated names to the implementation.

What is accepted is RFC 8259 exactly, checked at every character: :class:`JSONSyntaxError` (with the
offending character's ``offset`` in the whole document) is raised by the ``feed`` that brings the first
character that cannot be continued into valid JSON: ``{"a": 12]`` at the ``]``, ``[1,]`` at the ``]``,
``01`` at the ``1``, ``1.e5`` at the ``e``, ``-a`` at the ``a``, a raw control character inside a string,
text after the top-level value (whitespace after it is fine). ``NaN`` and ``Infinity`` are not JSON. A
leading byte-order mark is an error at offset 0, as it is for ``json.loads`` and ``JSON.parse``: the
wire's own decoders drop one (the SSE parser does), so a BOM here is text the model wrote. After a syntax
error every call raises it again. :meth:`~PartialJSON.finish` returns the final value, or raises
:class:`TruncatedJSONError` carrying the snapshot when the text ended before the value did (``{"a": [1``,
``-``, ``tru``, nothing at all).

Contract (tested whole, one character at a time, at every split offset, at random cuts, with hypothesis and
a fuzz invariant): for any way of cutting the text into pieces, the events joined over the ``feed`` calls
(:func:`~tokenrelay._json_events.join_events`; with a syntax error's ``events`` last) equal those of
``feed(whole)``, and the snapshot after each piece is the snapshot of the whole text's prefix of that length;
the result of ``finish()`` and any error (message and offset) are the same too. ``finish()`` adds no events:
the one value that completes there, a top-level number, is its result. Input after ``finish()`` raises
:class:`UseAfterFinishError`; ``finish()`` again returns (or raises) the same.

The module is about 480 lines because one state machine reads every kind of token: moving strings or numbers
into a module of their own would put a call and a hand-over of state on the per-character path, which
``benchmarks/partial_json.py`` measures.
"""

from __future__ import annotations

import re
from typing import Any

from ._errors import JSONSyntaxError, TruncatedJSONError, UseAfterFinishError
from ._json_events import JSONEvent, JSONKind, JSONPath, JSONValue, StringGrew, ValueCompleted, ValueStarted

__all__ = ["DEFAULT_MAX_DEPTH", "PartialJSON"]

#: How deep arrays and objects may nest. Every event carries its path, so a document nested ``d`` deep costs
#: O(d) per value: 100 kB of ``[`` would be 5·10⁹ path entries. RFC 8259 lets a parser limit nesting; peers
#: do (serde_json 128, jiter 200; ``json.loads`` stops near 1000 with a ``RecursionError``), and no reply a
#: model writes for a UI comes near 512.
DEFAULT_MAX_DEPTH = 512

# Where the parser is. Between values: expecting a value (top level, after ':' or an array's ','), a value or
# ']' (after '['), a key or '}' (after '{'), a key (after an object's ','), ':', ',' or the container's close
# (after a member), nothing but whitespace (after the top-level value). Inside a token: a string (a value or
# a key), a number, a literal word.
_VALUE, _VALUE_OR_CLOSE, _KEY_OR_CLOSE, _KEY, _COLON, _AFTER, _END, _STRING, _NUMBER, _WORD = range(10)

_WS = re.compile(r"[ \t\n\r]*")
_PLAIN = re.compile(r'[^"\\\x00-\x1f]*')  # a run of string characters that need no decoding
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")
_HEX = frozenset("0123456789abcdefABCDEF")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_NUMBER_CHARS = re.compile(r"[0-9eE.+\-]*")
# The longest prefix of a text that some valid number starts with (``1.`` yes, ``1.e`` no: it stops at "1.").
_NUMBER_PREFIX = re.compile(r"-?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]+(?:[eE][+-]?[0-9]*)?|\.|[eE][+-]?[0-9]*)?)?")
_WHOLE_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_WORDS: dict[str, tuple[str, JSONValue, JSONKind]] = {
    "t": ("true", True, "boolean"),
    "f": ("false", False, "boolean"),
    "n": ("null", None, "null"),
}
_EXPECTED = {
    _VALUE: "a value",
    _VALUE_OR_CLOSE: "a value or ']'",
    _KEY_OR_CLOSE: "a string key or '}'",
    _KEY: "a string key",
    _COLON: "':'",
}


class PartialJSON:
    """Incremental JSON parser: ``feed(text) -> list[JSONEvent]``, the snapshot :attr:`value`, ``finish()``.

    Joined outputs over any split of the input equal the one-shot result, and the snapshot after any piece is
    that of the text so far (the rule and the contract are in the module docstring). An array or object
    nested deeper than ``max_depth`` is refused with :class:`JSONSyntaxError` at its bracket.
    """

    __slots__ = (
        "_dirty", "_error", "_escape", "_events", "_final", "_finished", "_fresh", "_has_value", "_high",
        "_holder", "_in_key", "_key", "_key_parts", "_max_depth", "_mode", "_number", "_offset", "_parts", "_paths", "_root",
        "_slot", "_stack", "_start", "_string_path", "_word", "_word_value",
    )  # fmt: skip

    def __init__(self, *, max_depth: int = DEFAULT_MAX_DEPTH) -> None:
        if max_depth < 1:
            raise ValueError("max_depth must be positive")
        self._max_depth = max_depth
        self._mode = _VALUE
        self._stack: list[Any] = []  # the open containers, the root first
        self._paths: list[JSONPath] = []  # the path of each open container
        self._key = ""  # the key of the member being read in the innermost object
        self._root: Any = None
        self._has_value = False
        self._offset = 0  # characters fed before the current piece
        self._events: list[JSONEvent] = []
        # The open string: a key is gathered in ``_key_parts``; a value's text in ``_parts`` (since the last
        # read of ``.value``) and ``_fresh`` (what this ``feed`` added: one ``StringGrew`` when it ends).
        self._in_key = False
        self._key_parts: list[str] = []
        self._parts: list[str] = []
        self._fresh: list[str] = []
        self._dirty = False  # the open string grew since ``.value`` was read
        self._holder: Any = None  # the container holding the open string (None: it is the root)
        self._slot: str | int = 0  # its key or index there
        self._string_path: JSONPath = ()
        self._escape = ""  # an unfinished escape: "\\", "\\u", "\\u1", ...
        self._high = 0  # a high-surrogate escape waiting for its low half
        # The open number (its text so far) or literal (the word), and the offset where it started.
        self._number = ""
        self._word = ""
        self._word_value: JSONValue = None
        self._start = 0
        self._error: JSONSyntaxError | None = None
        self._finished = False
        self._final: JSONValue | TruncatedJSONError = None

    @property
    def value(self) -> JSONValue:
        """The snapshot: the live root value (``None`` while :attr:`has_value` is false)."""
        if self._dirty:
            self._sync()
        return self._root  # type: ignore[no-any-return]

    @property
    def has_value(self) -> bool:
        """Whether a value has started (``value`` is ``None`` both before that and for ``null``)."""
        return self._has_value

    def feed(self, text: str) -> list[JSONEvent]:
        """Read the next piece of the text; the events it caused, in order. Raises :class:`JSONSyntaxError`
        at the first character that cannot be continued into JSON."""
        if self._finished:
            raise UseAfterFinishError("PartialJSON.feed() after finish()")
        if self._error is not None:
            raise self._again()
        events = self._events = []
        n = len(text)
        i = 0
        while i < n:
            mode = self._mode
            if mode == _STRING:
                i = self._in_string(text, i, n)
            elif mode == _NUMBER:
                i = self._in_number(text, i, n)
            elif mode == _WORD:
                i = self._in_word(text, i, n)
            else:
                i = self._between(text, i, n, mode)
        if self._fresh:
            self._grew()
        self._offset += n
        return events

    def finish(self) -> JSONValue:
        """The input is over: the final value. Raises :class:`TruncatedJSONError` (with the snapshot) when
        the value is incomplete, or the earlier :class:`JSONSyntaxError`."""
        if self._error is not None:
            raise self._again()
        if not self._finished:
            self._finished = True
            if self._mode == _NUMBER and not self._stack and _WHOLE_NUMBER.fullmatch(self._number):
                self._events = []  # the top-level number's events: finish() reports none
                self._complete_number(self._offset)
            if self._mode == _END:
                self._final = self.value
            else:
                self._final = TruncatedJSONError(
                    f"the JSON text ended {self._where()} at offset {self._offset}: the value is incomplete",
                    value=self.value,
                )
        if isinstance(self._final, TruncatedJSONError):
            raise self._final
        return self._final

    # -- between tokens -------------------------------------------------------------------------------------

    def _between(self, text: str, i: int, n: int, mode: int) -> int:
        c = text[i]
        if c in " \t\n\r":
            i = _WS.match(text, i).end()  # type: ignore[union-attr]
            if i == n:
                return n
            c = text[i]
        if mode == _AFTER:
            top = self._stack[-1]
            if c == ",":
                self._mode = _KEY if type(top) is dict else _VALUE
            elif c == ("}" if type(top) is dict else "]"):
                self._close()
            else:
                self._fail(i, f"expected ',' or '{'}' if type(top) is dict else ']'}'")
            return i + 1
        if mode <= _VALUE_OR_CLOSE:
            return self._begin_value(text, i, c, mode)
        if mode == _COLON:
            if c != ":":
                self._fail(i, "expected ':'")
            self._mode = _VALUE
            return i + 1
        if mode <= _KEY and c == '"':  # _KEY_OR_CLOSE or _KEY
            self._in_key = True
            self._mode = _STRING
            return i + 1
        if mode == _KEY_OR_CLOSE and c == "}":
            self._close()
            return i + 1
        self._fail(
            i, "unexpected text after the JSON value" if mode == _END else f"expected {_EXPECTED[mode]}"
        )
        raise AssertionError("unreachable")  # _fail raises

    def _begin_value(self, text: str, i: int, c: str, mode: int) -> int:
        if c == '"':
            path = self._place("", "string")
            stack = self._stack
            self._holder = stack[-1] if stack else None
            self._slot = path[-1] if stack else 0
            self._string_path = path
            self._parts = []
            self._in_key = False
            self._mode = _STRING
            return i + 1
        if c == "{" or c == "[":
            if len(self._stack) == self._max_depth:
                self._fail(i, f"nesting deeper than {self._max_depth} levels (max_depth)")
            container: Any = {} if c == "{" else []
            self._paths.append(self._place(container, "object" if c == "{" else "array"))
            self._stack.append(container)
            self._mode = _KEY_OR_CLOSE if c == "{" else _VALUE_OR_CLOSE
            return i + 1
        if c in "-0123456789":
            self._mode = _NUMBER
            self._number = ""
            self._start = self._offset + i
            return i
        word = _WORDS.get(c)
        if word is not None:
            self._mode = _WORD
            self._word, self._word_value, _ = word
            self._start = self._offset + i
            return i
        if c == "]" and mode == _VALUE_OR_CLOSE:
            self._close()
            return i + 1
        if c == "\ufeff" and self._offset + i == 0:
            self._fail(i, "a byte-order mark (U+FEFF) is not JSON")
        self._fail(i, f"expected {_EXPECTED[mode]}")
        raise AssertionError("unreachable")

    def _place(self, value: Any, kind: JSONKind) -> JSONPath:
        """Put a value that starts now into the snapshot; its path."""
        stack = self._stack
        if stack:
            top = stack[-1]
            if type(top) is dict:
                key: str | int = self._key
                top[key] = value
            else:
                key = len(top)
                top.append(value)
            path = (*self._paths[-1], key)
        else:
            self._root = value
            self._has_value = True
            path = ()
        self._events.append(ValueStarted(path, kind))
        return path

    def _close(self) -> None:
        container = self._stack.pop()
        self._events.append(ValueCompleted(self._paths.pop(), container))
        self._mode = _AFTER if self._stack else _END

    # -- inside tokens --------------------------------------------------------------------------------------

    def _in_string(self, text: str, i: int, n: int) -> int:
        add = self._key_parts.append if self._in_key else self._fresh.append
        while i < n:
            if self._escape:  # an escape that a cut split: one character at a time
                i = self._continue_escape(text, i, n)
                continue
            j = _PLAIN.match(text, i).end()  # type: ignore[union-attr]
            if j > i:
                if self._high:
                    self._high = 0
                    add("\ufffd")
                add(text[i:j])
                if j == n:
                    return n
            c = text[j]
            if c == '"':
                self._close_string()
                return j + 1
            if c != "\\":
                self._fail(j, f"raw control character U+{ord(c):04X} in a string (escape it)")
            e = text[j + 1 : j + 2]
            if e == "u" and _HEX4.match(text, j + 2):
                self._code_unit(int(text[j + 2 : j + 6], 16))
                i = j + 6
            elif e in _ESCAPES:
                self._code_unit(ord(_ESCAPES[e]))
                i = j + 2
            else:  # cut short, or invalid: the slow path finds which
                self._escape = "\\"
                i = j + 1
        return i

    def _continue_escape(self, text: str, i: int, n: int) -> int:
        escape = self._escape
        while i < n:
            c = text[i]
            if escape == "\\":
                if c == "u":
                    escape = "\\u"
                    i += 1
                    continue
                if c not in _ESCAPES:
                    self._fail(i, f"invalid escape '\\{c}'")
                self._escape = ""
                self._code_unit(ord(_ESCAPES[c]))
                return i + 1
            if c not in _HEX:
                self._fail(i, "expected a hex digit in a \\u escape")
            escape += c
            i += 1
            if len(escape) == 6:
                self._escape = ""
                self._code_unit(int(escape[2:], 16))
                return i
        self._escape = escape
        return i

    def _code_unit(self, code: int) -> None:
        """One escaped UTF-16 code unit: a high surrogate waits for its low half; a lone one is U+FFFD."""
        add = self._key_parts.append if self._in_key else self._fresh.append
        if self._high:
            high = self._high
            self._high = 0
            if 0xDC00 <= code <= 0xDFFF:
                add(chr(0x10000 + ((high - 0xD800) << 10) + (code - 0xDC00)))
                return
            add("\ufffd")
        if 0xD800 <= code <= 0xDBFF:
            self._high = code
        elif 0xDC00 <= code <= 0xDFFF:
            add("\ufffd")
        else:
            add(chr(code))

    def _close_string(self) -> None:
        if self._high:
            self._high = 0
            (self._key_parts if self._in_key else self._fresh).append("\ufffd")
        if self._in_key:
            self._key = "".join(self._key_parts)
            self._key_parts = []
            self._in_key = False
            self._mode = _COLON
            return
        if self._fresh:
            self._grew()
        final = "".join(self._parts)
        self._parts = []
        self._dirty = False
        if self._holder is None:
            self._root = final
        else:
            self._holder[self._slot] = final
        self._holder = None
        self._events.append(ValueCompleted(self._string_path, final))
        self._mode = _AFTER if self._stack else _END

    def _grew(self) -> None:
        """Move this feed's new text of the open value string into its parts: one ``StringGrew``."""
        fresh = self._fresh
        piece = fresh[0] if len(fresh) == 1 else "".join(fresh)
        fresh.clear()
        self._parts.append(piece)
        self._dirty = True
        self._events.append(StringGrew(self._string_path, piece))

    def _sync(self) -> None:
        text = "".join(self._parts)
        self._parts = [text]
        self._dirty = False
        if self._holder is None:
            self._root = text
        else:
            self._holder[self._slot] = text

    def _in_number(self, text: str, i: int, n: int) -> int:
        j = _NUMBER_CHARS.match(text, i).end()  # type: ignore[union-attr]
        number = self._number + text[i:j]
        valid = _NUMBER_PREFIX.match(number).end()  # type: ignore[union-attr]
        if valid < len(number):
            self._fail(self._start + valid - self._offset, f"unexpected {number[valid]!r} in a number")
        self._number = number
        if j == n:
            return n
        if not _WHOLE_NUMBER.fullmatch(number):
            self._fail(j, "expected a digit")
        self._complete_number(self._offset + j)
        return j

    def _complete_number(self, end: int) -> None:
        number = self._number
        try:
            value: JSONValue = float(number) if any(c in number for c in ".eE") else int(number)
        except ValueError:  # more digits than Python's int conversion allows (sys.get_int_max_str_digits)
            self._fail(self._start - self._offset, f"integer of {len(number)} digits is too long to convert")
        self._scalar(value, "number")

    def _scalar(self, value: JSONValue, kind: JSONKind) -> None:
        self._events.append(ValueCompleted(self._place(value, kind), value))
        self._mode = _AFTER if self._stack else _END

    def _in_word(self, text: str, i: int, n: int) -> int:
        word = self._word
        done = self._offset + i - self._start  # letters already matched
        for k in range(done, len(word)):
            if i == n:
                return n
            if text[i] != word[k]:
                self._fail(i, f"expected {word!r}")
            i += 1
        self._scalar(self._word_value, "boolean" if word != "null" else "null")
        return i

    def _where(self) -> str:
        mode = self._mode
        if mode == _STRING:
            return "inside a key" if self._in_key else "inside a string"
        if mode in (_NUMBER, _WORD):
            return "inside a number" if mode == _NUMBER else f"inside {self._word!r}"
        if self._stack:
            return "inside an object" if type(self._stack[-1]) is dict else "inside an array"
        return "before any value"

    # -- errors ---------------------------------------------------------------------------------------------

    def _fail(self, i: int, message: str) -> None:
        """Raise the syntax error at offset ``i`` of the current piece, with the events before it."""
        if self._fresh:
            self._grew()
        self._error = JSONSyntaxError(message, offset=self._offset + i, events=tuple(self._events))
        self._events = []
        raise self._error

    def _again(self) -> JSONSyntaxError:
        error = self._error
        assert error is not None
        return JSONSyntaxError(error.args[0].rpartition(" at offset ")[0], offset=error.offset)

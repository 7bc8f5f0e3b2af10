"""A :class:`~tokenrelay._protocols.ByteTable` compiled for the detokenizer: per-id actions and steady-state text.

The detokenizer's fast path is a lookup per token; this module builds what it looks up, once per table and
``skip_special_tokens`` value (tables hash by identity, so a tokenizer's table is compiled once per process):

* each id's *kind* (ordinary text, raw text, byte-fallback byte, skipped special, flushing special, kept
  special), from the table's sets and the family's rules;
* for ids whose bytes leave nothing pending from a clean start, their text (``whole``); for ids ending inside a
  character, the text and the unfinished tail (``split``); the raw bytes for the incremental UTF-8 decoder;
* a UTF-8 validator as a state table (``UTF8_STEP``), which HF ByteFallback runs step through byte by byte to
  know the moment a run can no longer become valid text;
* the ``"tokenrelay.per_byte"`` codec error handler: SentencePiece's one U+FFFD per invalid byte.

Sans-I/O: standard library only.
"""

from __future__ import annotations

import codecs
import weakref
from dataclasses import dataclass

from ._protocols import ByteTable

__all__ = [
    "BYTE",
    "FLUSH",
    "PER_BYTE_ERRORS",
    "RAW",
    "SKIP",
    "SPECIAL",
    "TEXT",
    "UTF8_BAD",
    "UTF8_STEP",
    "Compiled",
    "Utf8Decoder",
    "compile_table",
    "utf8_decode",
]

PER_BYTE_ERRORS = "tokenrelay.per_byte"


def _per_byte_replace(exc: UnicodeError) -> tuple[str, int]:
    # SentencePiece writes one U+FFFD for every byte that is not part of a complete character, where Python's
    # "replace" writes one per maximal invalid subpart (b"\xf0\x9f\xa6" → 3 vs 1).
    if isinstance(exc, UnicodeDecodeError):
        return "\ufffd" * (exc.end - exc.start), exc.end
    raise exc


codecs.register_error(PER_BYTE_ERRORS, _per_byte_replace)
Utf8Decoder = codecs.getincrementaldecoder("utf-8")
# codecs.utf_8_decode(data, errors, final) -> (text, consumed): the incremental decoder's core without the
# object; holding the unconsumed tail ourselves costs half as much per token (benchmarks/detokenizer.py).
utf8_decode = codecs.utf_8_decode


def _utf8_steps() -> tuple[bytes, ...]:
    """A UTF-8 validator as a table: ``UTF8_STEP[state][byte]`` is the next state. State 0: complete text so far;
    1-3: that many continuation bytes due; 4-7: the same after E0, ED, F0, F4, whose first continuation byte has a
    narrower range (no overlong forms, surrogates or code points past U+10FFFF). Invalid whatever follows:
    ``UTF8_BAD``. It agrees with Python's strict incremental decoder (tested)."""

    def row(spans: dict[int, range]) -> bytes:
        out = [UTF8_BAD] * 256
        for state, span in spans.items():
            for byte in span:
                out[byte] = state
        return bytes(out)

    lead = row({0: range(0x80), 1: range(0xC2, 0xE0), 2: range(0xE1, 0xF0), 3: range(0xF1, 0xF4)})
    lead = lead[:0xE0] + bytes([4]) + lead[0xE1:0xED] + bytes([5]) + lead[0xEE:0xF0] + bytes([6])
    lead += bytes([3, 3, 3, 7]) + bytes([UTF8_BAD] * 11)
    cont = range(0x80, 0xC0)
    return (
        lead,
        row({0: cont}),
        row({1: cont}),
        row({2: cont}),
        row({1: range(0xA0, 0xC0)}),
        row({1: range(0x80, 0xA0)}),
        row({2: range(0x90, 0xC0)}),
        row({2: range(0x80, 0x90)}),
    )


UTF8_BAD = 255
UTF8_STEP = _utf8_steps()

# What a token id does, for one value of skip_special_tokens.
TEXT = 0  # an ordinary piece: may lose its leading space at the start of a segment
RAW = 1  # text that is never space-stripped (unknown surface, a special kept as text)
BYTE = 2  # a byte-fallback token
SKIP = 3  # dropped, invisible to everything around it
FLUSH = 4  # dropped, but ends pending bytes (the family decodes the text between specials separately)
SPECIAL = 5  # kept special: ends pending bytes, then its text, then maybe a new segment


@dataclass(frozen=True, slots=True)
class Compiled:
    kinds: list[int]
    whole: list[str | None]  # text per id from a clean start, for ids that leave nothing pending
    split: list[tuple[str, bytes] | None]  # the same for ids that end inside a character: (text, tail)
    plain: list[bytes | None]  # bytes for the incremental decoder, when the id needs no other rule
    plain_by_id: dict[int, bytes]  # the same, for batches


_COMPILED: weakref.WeakKeyDictionary[ByteTable, dict[bool, Compiled]] = weakref.WeakKeyDictionary()


def compile_table(table: ByteTable, skip: bool) -> Compiled:
    """Per-id actions and steady-state text, built once per table and ``skip_special_tokens`` value."""
    per_table = _COMPILED.setdefault(table, {})
    if skip in per_table:
        return per_table[skip]
    n = len(table.pieces)
    kinds = [TEXT] * n
    for i in table.raw_pieces:
        kinds[i] = RAW
    for i in table.byte_tokens:
        kinds[i] = BYTE
    for i in table.special:
        if skip:
            kinds[i] = FLUSH if table.specials_flush else SKIP
        else:
            kinds[i] = SPECIAL if (table.specials_flush or table.kept_special_restarts) else RAW
    errors = PER_BYTE_ERRORS if table.invalid_utf8 == "per_byte" else "replace"
    fast: list[str | None] = [None] * n
    tails: list[bytes] = [b""] * n
    for i, kind in enumerate(kinds):
        if kind in (SKIP, FLUSH):
            fast[i] = ""  # nothing is pending in the steady state, so a flush is a no-op
        elif kind == SPECIAL and table.kept_special_restarts:
            continue
        elif table.invalid_utf8 == "byte_run":
            if kind != BYTE:
                fast[i] = bytes(table.pieces[i]).decode("utf-8", "replace")
        else:
            # What the incremental decoder would return from a clean start, and the unfinished tail it
            # would keep: precomputed, so most tokens cost a lookup even inside long runs of split characters.
            data = bytes(table.pieces[i])
            text, used = utf8_decode(data, errors, False)
            fast[i], tails[i] = text, data[used:]
    plain: list[bytes | None] = [
        (b"" if kind == SKIP else bytes(table.pieces[i])) if kind <= SKIP else None
        for i, kind in enumerate(kinds)
    ]
    by_id = {i: b for i, b in enumerate(plain) if b is not None}
    whole = [t if not tail else None for t, tail in zip(fast, tails, strict=True)]
    split = [(t, tail) if t is not None and tail else None for t, tail in zip(fast, tails, strict=True)]
    per_table[skip] = compiled = Compiled(kinds, whole, split, plain, by_id)
    return compiled

"""What every tokenizer adapter shares: the ``Tokenizer`` protocol's plumbing and byte-table verification.

An adapter subclasses :class:`TokenizerBase`, implements ``encode``/``decode`` with the family's own library
(the reference), derives a :class:`~tokenrelay._protocols.ByteTable` and hands it to ``_install_table``, which
keeps it only if its decode equals the reference on ~600 id sequences (random ids, byte tokens, specials and a
multilingual sample); otherwise the detokenizer uses its window fallback for that tokenizer.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from .._detokenizer import decode_with_table
from .._protocols import ByteTable

__all__ = ["EOS_NAMES", "TokenizerBase"]

# Text for verifying byte tables: scripts, emoji sequences, combining marks, a literal U+FFFD, odd spacing.
_VERIFY_TEXT = (
    "The chai is ready.  Streaming tokens\tcorrectly\n\n आपका चाय ☕ तैयार है। क्षत्रिय 你好，世界。"
    " こんにちは 안녕하세요 สวัสดีครับ مرحبا שלום Привет 🦙 👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈 🇮🇳 café naïve ﷽ � 😀"
    " ∑ x² ≤ ∞ 𝔘𝔫𝔦 €₹ `code` **bold** ```python\nprint(1)\n```\r\n   leading spaces"
)
#: Token texts that end a reply wherever a vocabulary has them (GGUF and HF files rarely mark EOS otherwise).
EOS_NAMES = ("</s>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<eos>", "<|end_of_text|>")


class TokenizerBase:
    """Shared plumbing of every adapter: name, eos ids, chat template, and a byte table verified against the
    reference decode."""

    _name: str
    _eos: frozenset[int]
    _table: ByteTable | None = None
    table_rejected: str | None = None
    #: The Jinja chat template, when the source carried one (GGUF ``tokenizer.chat_template``).
    chat_template: str | None = None

    @property
    def name(self) -> str:
        return self._name

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return self._eos

    def byte_table(self) -> ByteTable | None:
        return self._table

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        raise NotImplementedError

    def _install_table(self, table: ByteTable | None, extra_ids: Sequence[int] = ()) -> None:
        if table is None:
            self._table = None
            return
        problem = _verify_table(self, table, extra_ids)
        self._table = None if problem else table
        self.table_rejected = problem

    def __repr__(self) -> str:
        path = "byte table" if self._table is not None else "window fallback"
        return f"<{type(self).__name__} {self._name!r} ({path})>"


def _verify_table(tok: TokenizerBase, table: ByteTable, extra_ids: Sequence[int]) -> str | None:
    """Compare the table's decode with the reference on many id sequences; describe the first mismatch."""
    n = len(table.pieces)
    rng = random.Random(1234)
    specials = sorted(table.special)
    bytes_ = sorted(table.byte_tokens)
    cases: list[list[int]] = [list(extra_ids)]
    encoded = tok.encode(_VERIFY_TEXT) if hasattr(tok, "encode") else []
    cases.append(encoded)
    for _ in range(150):
        cases.append([rng.randrange(n) for _ in range(rng.randint(1, 12))])
    pools = [p for p in (specials, bytes_, encoded) if p]
    for _ in range(150):
        seq: list[int] = []
        for _ in range(rng.randint(1, 10)):
            pool = rng.choice(pools) if pools else list(range(n))
            seq.append(rng.choice(pool) if rng.random() < 0.7 else rng.randrange(n))
        cases.append(seq)
    for ids in cases:
        for skip in (True, False):
            want = tok.decode(ids, skip_special_tokens=skip)
            got = decode_with_table(table, ids, skip_special_tokens=skip)
            if got != want:
                return f"ids {ids} (skip_special_tokens={skip}): reference {want!r}, table {got!r}"
    return None

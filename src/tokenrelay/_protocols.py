"""The small structural types the sans-I/O core needs from the outside world.

The core never imports a tokenizer library. It asks only for what is written here; ``tokenrelay.tokenizers``
adapts HF tokenizers, SentencePiece, Tekken and GGUF vocabularies to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

__all__ = ["ByteTable", "InvalidUTF8Policy", "LeadingSpaceRule", "Tokenizer"]

#: How a family's reference decode turns bytes that are not valid UTF-8 into text.
#: ``"replace"``: one U+FFFD per maximal invalid subpart (Python's ``errors="replace"``, Rust's
#: ``from_utf8_lossy``; HF ByteLevel, tiktoken/Tekken). ``"per_byte"``: one U+FFFD per byte that is not part of a
#: complete character (SentencePiece). ``"byte_run"``: a run of consecutive byte-fallback tokens is decoded as a
#: whole, and if any of it is invalid every byte of the run becomes U+FFFD (HF ``ByteFallback``, vllm#17448).
InvalidUTF8Policy = Literal["replace", "per_byte", "byte_run"]

#: Which leading space the reference decode drops. ``"keep"``: none. ``"first_piece"``: one space from the first
#: ordinary piece of a segment (SentencePiece's dummy prefix; byte and unknown pieces are never stripped but end
#: the segment's start). ``"first_char"``: one space at the very start of the output (HF ``Strip`` decoder).
#: ``"first_token"``: one space from the first token's bytes, whatever it is; a skipped special first token uses
#: the rule up (llama.cpp's ``llama_detokenize``).
LeadingSpaceRule = Literal["keep", "first_piece", "first_char", "first_token"]


@dataclass(frozen=True, eq=False)
class ByteTable:
    """How a tokenizer's decode can be reproduced from raw bytes, one token at a time.

    ``pieces[i]`` is the exact byte string token ``i`` contributes (byte-level BPE symbols mapped back to bytes,
    SentencePiece ``▁`` turned into a space, ``<0xE2>`` into the byte 0xE2, a special token's own text).

    ``special`` are the ids that ``skip_special_tokens=True`` drops. ``byte_tokens`` are byte-fallback tokens
    (they join runs under the ``"byte_run"`` policy and are never space-stripped). ``raw_pieces`` are other
    pieces that are never space-stripped (SentencePiece's unknown surface). ``specials_flush``: a special
    token, kept or skipped, ends any pending incomplete bytes (they become U+FFFD), as in families that decode
    the text between special tokens separately. ``kept_special_restarts``: a kept special token starts a new
    segment for the leading-space rule. The table is used only after it has been verified against the
    reference decode. Tables compare and hash by identity: the detokenizer compiles each one once.
    """

    pieces: Sequence[bytes]
    special: frozenset[int] = frozenset()
    byte_tokens: frozenset[int] = frozenset()
    raw_pieces: frozenset[int] = frozenset()
    invalid_utf8: InvalidUTF8Policy = "replace"
    leading_space: LeadingSpaceRule = "keep"
    specials_flush: bool = False
    kept_special_restarts: bool = False
    notes: tuple[str, ...] = field(default=(), compare=False)


@runtime_checkable
class Tokenizer(Protocol):
    """What tokenrelay needs from a tokenizer: its own reference encode and decode, and facts about it."""

    @property
    def name(self) -> str: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def eos_token_ids(self) -> frozenset[int]: ...

    def encode(self, text: str) -> list[int]:
        """Token ids for ``text``, with no BOS/EOS or other special tokens added."""
        ...

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        """The family's own reference decode of ``ids``."""
        ...

    def byte_table(self) -> ByteTable | None:
        """The verified fast-path table, or ``None`` when decode is not byte-representable."""
        ...

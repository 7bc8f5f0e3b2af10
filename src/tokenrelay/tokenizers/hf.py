"""HF ``tokenizers`` (a tokenizer.json, a ``tokenizers.Tokenizer``, a transformers fast tokenizer).

The reference decode is the library's own ``decode``. Two decoder chains have byte tables: ``ByteLevel``
(GPT-2-style byte-level BPE, SmolLM2) and ``Replace ▁ → ' ', ByteFallback, Fuse`` with or without a final
``Strip`` (Llama/Mistral SentencePiece converted to tokenizer.json; Gemma, which has no Strip); any other chain
(WordPiece, cleanup rules) has none and streams through the detokenizer's window.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._protocols import ByteTable
from .base import EOS_NAMES, TokenizerBase

if TYPE_CHECKING:
    import tokenizers as hf

__all__ = ["HFTokenizer"]


def _bytes_to_unicode() -> dict[str, int]:
    """The GPT-2 byte-level alphabet: printable bytes stand for themselves, the rest are shifted past 255."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping: dict[str, int] = {chr(b): b for b in keep}
    shift = 0
    for b in range(256):
        if b not in keep:
            mapping[chr(256 + shift)] = b
            shift += 1
    return mapping


def _is_byte_token(piece: str) -> int | None:
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        try:
            return int(piece[3:5], 16)
        except ValueError:
            return None
    return None


# From this many characters on, HF tokenization takes long enough (~1 ms) to release the GIL for it.
_LONG_TEXT = 4096


class HFTokenizer(TokenizerBase):
    """A ``tokenizers.Tokenizer``; reference decode is the library's own ``decode``."""

    def __init__(self, tk: hf.Tokenizer, *, name: str = "hf", eos_ids: Sequence[int] | None = None) -> None:
        self._tk = tk
        self._name = name
        self._vocab_size = tk.get_vocab_size(with_added_tokens=True)
        added = tk.get_added_tokens_decoder()
        self._special = frozenset(i for i, t in added.items() if t.special)
        if eos_ids is None:
            eos_ids = [i for i, t in added.items() if t.content in EOS_NAMES]
        self._eos = frozenset(eos_ids)
        self._install_table(self._derive_table())

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def hf_tokenizer(self) -> hf.Tokenizer:
        return self._tk

    def encode(self, text: str) -> list[int]:
        if len(text) < _LONG_TEXT:
            return list(self._tk.encode(text, add_special_tokens=False).ids)
        # encode() holds the GIL for the whole text; encode_batch() releases it while it works, so a server
        # tokenizing a long prompt in a worker thread keeps its event loop (and its streams) running.
        return list(self._tk.encode_batch([text], add_special_tokens=False)[0].ids)

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        return str(self._tk.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def _derive_table(self) -> ByteTable | None:
        decoder = json.loads(self._tk.to_str()).get("decoder") or {}
        steps = decoder.get("decoders", [decoder]) if decoder.get("type") == "Sequence" else [decoder]
        kinds = [d.get("type") for d in steps]
        pieces_str = [self._tk.id_to_token(i) or "" for i in range(self._vocab_size)]
        if kinds == ["ByteLevel"]:
            alphabet = _bytes_to_unicode()

            def to_bytes(piece: str) -> bytes:
                # Like the ByteLevel decoder: map every symbol back to its byte, or keep the token's own UTF-8
                # when a symbol is outside the alphabet (added tokens).
                try:
                    return bytes(alphabet[c] for c in piece)
                except KeyError:
                    return piece.encode("utf-8")

            return ByteTable(pieces=[to_bytes(p) for p in pieces_str], special=self._special)
        if kinds[:3] == ["Replace", "ByteFallback", "Fuse"] and kinds[3:] in ([], ["Strip"]):
            # Llama/Mistral end with Strip (one leading space); Gemma's chain has none and keeps every space.
            replace = steps[0]
            pattern = replace.get("pattern", {}).get("String")
            strip = steps[3] if len(steps) == 4 else None
            if strip and (strip.get("content") != " " or strip.get("start") != 1 or strip.get("stop") != 0):
                return None
            byte_ids: set[int] = set()
            pieces: list[bytes] = []
            for i, p in enumerate(pieces_str):
                b = _is_byte_token(p)
                if b is not None:
                    byte_ids.add(i)
                    pieces.append(bytes([b]))
                else:
                    pieces.append(
                        (p.replace(pattern, replace.get("content", " ")) if pattern else p).encode()
                    )
            return ByteTable(
                pieces=pieces,
                special=self._special,
                byte_tokens=frozenset(byte_ids),
                invalid_utf8="byte_run",
                leading_space="first_char" if strip else "keep",
            )
        return None

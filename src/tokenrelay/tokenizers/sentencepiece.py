"""SentencePiece ``.model`` files (Mistral v1/v3), decoded by the ``sentencepiece`` library itself."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .._errors import TokenizerError
from .._protocols import ByteTable
from .base import TokenizerBase

__all__ = ["SentencePieceTokenizer"]


class SentencePieceTokenizer(TokenizerBase):
    """A SentencePiece ``.model``; reference decode is ``SentencePieceProcessor.decode``.

    With ``skip_special_tokens=False`` control tokens (``<s>``, ``[INST]``) are written as their own text and the
    text between them is decoded by SentencePiece segment by segment (as mistral-common does with specials).
    """

    def __init__(self, path: Path, *, name: str | None = None) -> None:
        import sentencepiece as spm

        self._path = path
        self._name = name or path.name
        try:
            self._sp = spm.SentencePieceProcessor(model_file=str(path))
        except (RuntimeError, OSError) as exc:
            raise TokenizerError(
                f"{path}: not a readable SentencePiece model (expected a serialized ModelProto .model file): {exc}"
            ) from exc
        sp = self._sp
        self._vocab_size = int(sp.vocab_size())
        self._control = frozenset(i for i in range(self._vocab_size) if sp.is_control(i))
        self._eos = frozenset([int(sp.eos_id())]) if sp.eos_id() >= 0 else frozenset()
        self._install_table(self._derive_table())

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    def encode(self, text: str) -> list[int]:
        return [int(i) for i in self._sp.encode(text)]

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        ids = [int(i) for i in ids]
        if skip_special_tokens:
            return str(self._sp.decode(ids))
        out: list[str] = []
        segment: list[int] = []
        for i in ids:
            if i in self._control:
                if segment:
                    out.append(self._sp.decode(segment))
                    segment = []
                out.append(self._sp.id_to_piece(i))
            else:
                segment.append(i)
        if segment:
            out.append(self._sp.decode(segment))
        return "".join(out)

    def _derive_table(self) -> ByteTable:
        sp = self._sp
        unk_surface = " \u2047 "  # SentencePiece's default surface for <unk>
        pieces: list[bytes] = []
        byte_ids: set[int] = set()
        raw: set[int] = set()
        for i in range(self._vocab_size):
            piece = sp.id_to_piece(i)
            if sp.is_byte(i):
                byte_ids.add(i)
                pieces.append(bytes([int(piece[3:5], 16)]))
            elif sp.is_unknown(i):
                raw.add(i)
                pieces.append(unk_surface.encode())
            elif i in self._control:
                pieces.append(piece.encode())
            else:
                pieces.append(piece.replace("\u2581", " ").encode())
        return ByteTable(
            pieces=pieces,
            special=self._control,
            byte_tokens=frozenset(byte_ids),
            raw_pieces=frozenset(raw),
            invalid_utf8="per_byte",
            leading_space="first_piece",
            specials_flush=True,
            kept_special_restarts=True,
        )

"""Tekken ``.json`` files (tiktoken-style BPE), decoded by mistral-common's ``Tekkenizer``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._errors import TokenizerError
from .._protocols import ByteTable
from .base import TokenizerBase

__all__ = ["TekkenTokenizer"]


class TekkenTokenizer(TokenizerBase):
    """A Tekken ``.json``; reference decode is mistral-common's ``Tekkenizer.decode`` (tiktoken underneath)."""

    def __init__(self, path: Path, *, name: str | None = None) -> None:
        from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy
        from mistral_common.tokens.tokenizers.tekken import Tekkenizer

        self._policy = SpecialTokenPolicy
        self._name = name or path.name
        try:
            self._tk = Tekkenizer.from_file(path)
        except (ValueError, KeyError, AssertionError, json.JSONDecodeError, TypeError) as exc:
            raise TokenizerError(
                f"{path}: not a Tekken tokenizer file (expected JSON with config and vocab): {exc}"
            ) from exc
        self._vocab_size = int(self._tk.n_words)
        self._eos = frozenset([int(self._tk.eos_id)])
        self._install_table(self._derive_table())

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    def encode(self, text: str) -> list[int]:
        return [int(i) for i in self._tk.encode(text, bos=False, eos=False)]

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        policy: Any = self._policy.IGNORE if skip_special_tokens else self._policy.KEEP
        return str(self._tk.decode([int(i) for i in ids], special_token_policy=policy))

    def _derive_table(self) -> ByteTable:
        tk = self._tk
        nspecial = int(tk.num_special_tokens)
        pieces: list[bytes] = [self.decode([i], skip_special_tokens=False).encode() for i in range(nspecial)]
        model = tk._model  # the tiktoken Encoding: bytes of each ordinary token
        pieces += [model.decode_single_token_bytes(i) for i in range(self._vocab_size - nspecial)]
        return ByteTable(pieces=pieces, special=frozenset(range(nspecial)), specials_flush=True)

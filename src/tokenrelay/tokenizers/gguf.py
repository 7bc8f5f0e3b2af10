"""GGUF vocabularies: SmolLM2-style byte-level BPE rebuilt as an HF tokenizer, anything else through llama.cpp.

``load_gguf(path)`` reads the metadata with ``_gguf.read_gguf_metadata``. A ``gpt2`` vocabulary becomes an
:class:`~tokenrelay.tokenizers.hf.HFTokenizer` built from its tokens, merges and token types (it tokenizes exactly as
llama.cpp does; a test checks it). Any other vocabulary (SentencePiece ``llama``, …) is served by
:class:`LlamaCppVocabTokenizer`, whose reference encode and decode are llama.cpp's own, opened ``vocab_only``.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._errors import TokenizerError
from .._gguf import (
    GGUF_HEADER_SIZE,
    GGUFFormatError,
    GGUFTruncatedError,
    check_gguf_header,
    read_gguf_metadata,
)
from .._protocols import ByteTable, Tokenizer
from .base import EOS_NAMES, TokenizerBase
from .hf import HFTokenizer

__all__ = ["LlamaCppVocabTokenizer", "load_gguf"]

# Pre-tokenizer regexes by GGUF `tokenizer.ggml.pre` (they shape encode only; decode does not depend on them).
_DIGITS_THEN_GPT2 = ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva")


def _gguf_fields(path: Path) -> dict[str, Any]:
    # Read only as much of the file as the metadata needs (a model file can be many GB): check the 24-byte
    # header first, so any other file is refused after reading 24 bytes, then start with 8 MB and grow while
    # the metadata runs on past what was read (never past the file's end: a bad length is refused at once).
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            check_gguf_header(f.read(GGUF_HEADER_SIZE))
            want = min(size, 8 << 20)
            while True:
                f.seek(0)
                data = f.read(want)
                try:
                    return dict(read_gguf_metadata(data, file_size=size))
                except GGUFTruncatedError:
                    if want >= size:
                        raise
                    want = min(size, want * 4)
    except (OSError, GGUFFormatError) as exc:
        raise TokenizerError(
            f"{path}: not a readable GGUF file (expected a GGUF model with a vocabulary): {exc}"
        ) from exc


def load_gguf(path: Path, name: str | None) -> Tokenizer:
    meta = _gguf_fields(path)
    model = meta.get("tokenizer.ggml.model")
    tokens = meta.get("tokenizer.ggml.tokens")
    if model is None or tokens is None:
        raise TokenizerError(f"{path}: the GGUF file has no tokenizer (tokenizer.ggml.model/tokens missing)")
    if model != "gpt2":
        tok = LlamaCppVocabTokenizer(path, name=name, model=str(model))
        tok.chat_template = meta.get("tokenizer.chat_template")
        return tok
    from tokenizers import AddedToken, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as HFCore

    types = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
    bpe = models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges)
    tk = HFCore(bpe)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    pre = meta.get("tokenizer.ggml.pre", "default")
    if pre in _DIGITS_THEN_GPT2:
        tk.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level]
        )
    else:
        tk.pre_tokenizer = byte_level
    tk.decoder = decoders.ByteLevel()
    # GGUF token types (llama.cpp): 3 = control (special), 4 = user-defined (added, not special).
    tk.add_special_tokens(
        [AddedToken(tokens[i], special=True, normalized=False) for i, t in enumerate(types) if t == 3]
    )
    tk.add_tokens([AddedToken(tokens[i], normalized=False) for i, t in enumerate(types) if t == 4])
    eos = meta.get("tokenizer.ggml.eos_token_id")
    eos_ids = {int(eos)} if eos is not None else set()
    eos_ids |= {i for i, t in enumerate(tokens) if t in EOS_NAMES and types[i] == 3}
    hft = HFTokenizer(tk, name=name or path.name, eos_ids=sorted(eos_ids))
    hft.chat_template = meta.get("tokenizer.chat_template")
    return hft


# llama.cpp token attributes (llama.h, enum llama_token_attr). Its decode hides UNKNOWN and CONTROL tokens unless
# asked to render special tokens, and renders UNUSED ones as nothing either way (llama-vocab.cpp, token_to_piece).
_ATTR_UNKNOWN, _ATTR_CONTROL, _ATTR_BYTE = 1 << 0, 1 << 3, 1 << 5


class LlamaCppVocabTokenizer(TokenizerBase):
    """A GGUF vocabulary run by llama.cpp (``Llama(vocab_only=True)``): its tokenize is the encode, and its
    ``llama_detokenize`` (bytes, then UTF-8 with ``"replace"``) the reference decode.

    ``skip_special_tokens=True`` hides control and unknown tokens (llama.cpp's ``unparse_special=False``);
    ``False`` writes them as their text. llama.cpp strips one leading space from the *first token* of a decode
    (its ``lstrip``), whatever that token renders: ``[▁The]`` → ``"The"`` but ``[<s>, ▁The]`` → ``" The"`` when
    ``<s>`` is hidden. llama-cpp-python's ``Llama.detokenize`` is not used: it concatenates pieces into a 32-byte
    buffer (longer pieces come out wrong) and strips a space only after a BOS, a Llama-1 convention.
    """

    def __init__(self, path: Path, *, name: str | None = None, model: str = "?") -> None:
        try:
            import llama_cpp
        except ImportError as exc:
            raise TokenizerError(
                f"{path}: GGUF tokenizer model {model!r} is decoded by llama.cpp itself, which is not installed "
                "(pip install 'tokenrelay[llama]'); only 'gpt2' GGUF vocabularies load without it"
            ) from exc
        self._lib: Any = llama_cpp
        self._name = name or path.name
        try:
            self._llama: Any = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
        except (ValueError, RuntimeError, OSError) as exc:
            raise TokenizerError(
                f"{path}: llama.cpp cannot read the GGUF tokenizer model {model!r} (unknown to it, or a "
                f"broken vocabulary): {exc}"
            ) from exc
        self._vocab = llama_cpp.llama_model_get_vocab(self._llama.model)
        self._vocab_size = int(llama_cpp.llama_vocab_n_tokens(self._vocab))
        if self._vocab_size <= 0:
            raise TokenizerError(f"{path}: GGUF tokenizer model {model!r} has no vocabulary for llama.cpp")
        n = self._vocab_size
        attrs = [int(llama_cpp.llama_vocab_get_attr(self._vocab, i)) for i in range(n)]
        self._eos = frozenset(i for i in range(n) if llama_cpp.llama_vocab_is_eog(self._vocab, i))
        self._pieces = [self._piece(i) for i in range(n)]
        self._install_table(self._derive_table(attrs))

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    def encode(self, text: str) -> list[int]:
        return [int(i) for i in self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=False)]

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        ids = [int(i) for i in ids]
        n = self._vocab_size
        bad = next((i for i in ids if not 0 <= i < n), None)
        if bad is not None:  # llama.cpp would abort the process on an id outside its table
            raise TokenizerError(f"token id {bad} is outside the vocabulary (0..{n - 1})")
        lib = self._lib
        arr = (lib.llama_token * max(1, len(ids)))(*ids)
        # The pieces rendered with specials bound the output, so one call is enough; the loop is for safety.
        size = max(1, sum(len(self._pieces[i]) for i in ids))
        while True:
            buf = ctypes.create_string_buffer(size)
            got = int(
                lib.llama_detokenize(self._vocab, arr, len(ids), buf, size, False, not skip_special_tokens)
            )
            if got >= 0:
                return buf.raw[:got].decode("utf-8", "replace")
            size = -got

    def _piece(self, token: int) -> bytes:
        size = 16
        while True:
            buf = ctypes.create_string_buffer(size)
            got = int(self._lib.llama_token_to_piece(self._vocab, token, buf, size, 0, True))
            if got >= 0:
                return buf.raw[:got]
            size = -got

    def _derive_table(self, attrs: Sequence[int]) -> ByteTable:
        hidden = frozenset(i for i, a in enumerate(attrs) if a & (_ATTR_UNKNOWN | _ATTR_CONTROL))
        # Does this vocabulary's decode strip a leading space (SentencePiece's add_space_prefix)? Ask llama.cpp.
        spaced = next((i for i, p in enumerate(self._pieces) if p[:1] == b" " and i not in hidden), None)
        strips = spaced is not None and self.decode([spaced]).encode() == self._pieces[spaced][1:]
        # The nearest rule the byte table has is "first_char": it matches llama.cpp except after a hidden first
        # token ([<s>, ▁The] keeps its space in llama.cpp); verification decides whether the table is used.
        return ByteTable(
            pieces=self._pieces,
            special=hidden,
            byte_tokens=frozenset(i for i, a in enumerate(attrs) if a & _ATTR_BYTE),
            invalid_utf8="replace",
            leading_space="first_token" if strips else "keep",
        )

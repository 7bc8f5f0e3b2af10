"""Shared fixtures: real tokenizers (loaded once per session) and tiny in-memory ones."""

from __future__ import annotations

import gc
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from tiny_tokenizers import hf_gemma_style, hf_llama_style, toy_byte_level, toy_wordpiece
from tokenrelay import ByteTable, Tokenizer, load_tokenizer
from tokenrelay.tokenizers import mistral_data_path

BUILTINS = ("smollm2", "mistral-v1", "mistral-v3", "tekken")


class ChunkTokenizer:
    """A tokenizer whose tokens are arbitrary byte chunks: decode = bytes joined, decoded with "replace".

    Lets a test cut any UTF-8 text into tokens of chosen byte lengths (1 and 5 bytes, say), so characters
    are split exactly where the test wants.
    """

    def __init__(self, chunks: Sequence[bytes]) -> None:
        self.pieces = list(dict.fromkeys(chunks))
        self.index = {p: i for i, p in enumerate(self.pieces)}

    name = "chunks"
    eos_token_ids: frozenset[int] = frozenset()

    @property
    def vocab_size(self) -> int:
        return len(self.pieces)

    def ids_for(self, chunks: Sequence[bytes]) -> list[int]:
        return [self.index[c] for c in chunks]

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError("ChunkTokenizer has no encoder; use ids_for")

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        return b"".join(self.pieces[i] for i in ids).decode("utf-8", "replace")

    def byte_table(self) -> ByteTable:
        return ByteTable(pieces=self.pieces)


@pytest.fixture(scope="session")
def builtin() -> dict[str, Tokenizer]:
    return {name: load_tokenizer(name) for name in BUILTINS}


@pytest.fixture(scope="session")
def all_tokenizers(builtin: dict[str, Tokenizer]) -> dict[str, Tokenizer]:
    """The four built-ins plus in-memory ones: HF ByteFallback (non-monotonic; Llama and Gemma chains), toy BPE,
    WordPiece (window)."""
    extra = {
        "hf-llama-style": load_tokenizer(
            hf_llama_style(mistral_data_path("mistral_instruct_tokenizer_240323.model.v3"))
        ),
        "hf-gemma-style": load_tokenizer(
            hf_gemma_style(mistral_data_path("mistral_instruct_tokenizer_240323.model.v3"))
        ),
        "toy-bpe": load_tokenizer(toy_byte_level()),
        "toy-wordpiece": load_tokenizer(toy_wordpiece()),
    }
    return {**builtin, **extra}


@pytest.fixture(scope="module", autouse=True)
def _collect_what_the_module_dropped() -> Iterator[None]:
    """At the end of each module, collect what its tests dropped: an SDK client made for one call and never
    closed keeps a pooled keep-alive socket, and its ResourceWarning would otherwise come out of whatever
    later test the collector happens to run in (the server's own ``gc.collect()`` at start-up, say), where
    ``filterwarnings = error`` charges it to that innocent test at random. The warnings of this collection
    are dropped: they name a test client's socket, and each module's own tests have passed by then."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()

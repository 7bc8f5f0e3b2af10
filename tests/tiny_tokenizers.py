"""Tokenizers built in memory for tests and benchmarks: toy vocabularies and HF twins of real ones."""

from __future__ import annotations

from pathlib import Path

import sentencepiece as spm
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers

CORPUS = Path(__file__).parent / "data" / "multilingual.txt"


def corpus_text() -> str:
    """The corpus exactly as stored: bytes decoded, so its CRLF line ends survive (text mode would drop them)."""
    return CORPUS.read_bytes().decode("utf-8")


def hf_llama_style(spm_path: Path) -> Tokenizer:
    """An HF tokenizer with the Llama/Mistral decoder chain (Replace ▁, ByteFallback, Fuse, Strip) over a
    SentencePiece vocabulary: the non-monotonic HF ``ByteFallback`` decoder of vllm#17448, on a real vocab."""
    sp = spm.SentencePieceProcessor(model_file=str(spm_path))
    vocab = [(sp.id_to_piece(i), float(sp.get_score(i))) for i in range(sp.vocab_size())]
    tk = Tokenizer(models.Unigram(vocab, unk_id=sp.unk_id(), byte_fallback=True))
    tk.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tk.pre_tokenizer = None
    tk.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    controls = [sp.id_to_piece(i) for i in range(sp.vocab_size()) if sp.is_control(i)]
    tk.add_special_tokens([AddedToken(c, special=True, normalized=False) for c in controls])
    return tk


def hf_gemma_style(spm_path: Path) -> Tokenizer:
    """The Gemma decoder chain (Replace ▁, ByteFallback, Fuse: no Strip, no dummy prefix) over a real
    SentencePiece vocabulary."""
    sp = spm.SentencePieceProcessor(model_file=str(spm_path))
    vocab = [(sp.id_to_piece(i), float(sp.get_score(i))) for i in range(sp.vocab_size())]
    tk = Tokenizer(models.Unigram(vocab, unk_id=sp.unk_id(), byte_fallback=True))
    tk.normalizer = normalizers.Replace(" ", "▁")
    tk.pre_tokenizer = None
    tk.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    controls = [sp.id_to_piece(i) for i in range(sp.vocab_size()) if sp.is_control(i)]
    tk.add_special_tokens([AddedToken(c, special=True, normalized=False) for c in controls])
    return tk


def toy_byte_level() -> Tokenizer:
    """A 300-token GPT-2-style byte-level BPE trained on the corpus (plus all 256 bytes)."""
    from tokenizers import trainers

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tk.train_from_iterator([corpus_text()], trainer=trainer)
    return tk


def toy_wordpiece() -> Tokenizer:
    """A WordPiece tokenizer (BERT-style ``##`` continuations and cleanup): not byte-representable."""
    from tokenizers import trainers

    tk = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tk.normalizer = normalizers.BertNormalizer(lowercase=False)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tk.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    trainer = trainers.WordPieceTrainer(
        vocab_size=400, special_tokens=["[UNK]", "[SEP]"], show_progress=False
    )
    tk.train_from_iterator([corpus_text()], trainer=trainer)
    return tk

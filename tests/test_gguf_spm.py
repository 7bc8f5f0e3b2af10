"""A SentencePiece ("llama") GGUF vocabulary: llama.cpp is its encode and decode, the detokenizer is exact over it.

The GGUF files are written here from mistral-common's ``tokenizer.model.v1`` (pieces, scores, token types and
special ids, as llama.cpp's converter writes them), so sentencepiece itself is the second opinion. llama.cpp
opens such a file ``vocab_only`` with no tensors and no architecture hyperparameters; the engine test adds a
tiny random-weight Llama (16-wide, one layer) so ``LlamaCppEngine`` runs the same vocabulary end to end.
"""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path

import pytest
import sentencepiece as spm

from _steps import generate
from _steps import ids as step_ids
from tiny_tokenizers import corpus_text
from tokenrelay._detokenizer import Detokenizer
from tokenrelay._errors import TokenizerError
from tokenrelay._protocols import Tokenizer
from tokenrelay.tokenizers import LlamaCppVocabTokenizer, load_tokenizer, mistral_data_path, smollm2_gguf_path

gguf = pytest.importorskip("gguf")

SPM_MODEL = mistral_data_path("tokenizer.model.v1")


def write_spm_gguf(path: Path, *, tokenizer_model: str = "llama", weights: bool = False) -> Path:
    """A GGUF holding the SentencePiece vocabulary; with ``weights``, also a tiny random Llama to run."""
    sp = spm.SentencePieceProcessor(model_file=str(SPM_MODEL))
    n = sp.vocab_size()

    def token_type(i: int) -> int:
        for test, kind in (
            (sp.is_unknown, gguf.TokenType.UNKNOWN),
            (sp.is_control, gguf.TokenType.CONTROL),
            (sp.is_byte, gguf.TokenType.BYTE),
            (sp.is_unused, gguf.TokenType.UNUSED),
        ):
            if test(i):
                return int(kind)
        return int(gguf.TokenType.NORMAL)

    writer = gguf.GGUFWriter(str(path), "llama")
    width, ffn, layers = 16, 32, 1
    # Not needed by vocab_only; without it llama.cpp warns that its context exceeds the trained one (0).
    writer.add_context_length(256)
    if weights:
        writer.add_embedding_length(width)
        writer.add_block_count(layers)
        writer.add_feed_forward_length(ffn)
        writer.add_head_count(2)
        writer.add_head_count_kv(2)
        writer.add_layer_norm_rms_eps(1e-5)
        writer.add_rope_dimension_count(width // 2)
    writer.add_tokenizer_model(tokenizer_model)
    writer.add_token_list([sp.id_to_piece(i) for i in range(n)])
    writer.add_token_scores([float(sp.get_score(i)) for i in range(n)])
    writer.add_token_types([token_type(i) for i in range(n)])
    writer.add_bos_token_id(sp.bos_id())
    writer.add_eos_token_id(sp.eos_id())
    writer.add_unk_token_id(sp.unk_id())
    if weights:
        import numpy as np

        rng = np.random.default_rng(0)

        def rand(*shape: int) -> object:
            return rng.standard_normal(shape).astype(np.float32)

        ones = np.ones(width, np.float32)
        writer.add_tensor("token_embd.weight", rand(n, width))
        writer.add_tensor("output_norm.weight", ones)
        writer.add_tensor("output.weight", rand(n, width))
        for b in range(layers):
            writer.add_tensor(f"blk.{b}.attn_norm.weight", ones)
            for part in ("q", "k", "v", "output"):
                writer.add_tensor(f"blk.{b}.attn_{part}.weight", rand(width, width))
            writer.add_tensor(f"blk.{b}.ffn_norm.weight", ones)
            writer.add_tensor(f"blk.{b}.ffn_gate.weight", rand(ffn, width))
            writer.add_tensor(f"blk.{b}.ffn_up.weight", rand(ffn, width))
            writer.add_tensor(f"blk.{b}.ffn_down.weight", rand(width, ffn))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def sp() -> spm.SentencePieceProcessor:
    return spm.SentencePieceProcessor(model_file=str(SPM_MODEL))


@pytest.fixture(scope="module")
def spm_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_spm_gguf(tmp_path_factory.mktemp("gguf") / "mistral-v1-vocab.gguf")


@pytest.fixture(scope="module")
def tok(spm_gguf: Path) -> Tokenizer:
    pytest.importorskip("llama_cpp")
    return load_tokenizer(spm_gguf)


def stream(
    tok: Tokenizer, ids: list[int], *, skip: bool = True, prompt: list[int] | None = None
) -> list[str]:
    detok = Detokenizer(tok, skip_special_tokens=skip, prompt_ids=prompt)
    return [detok.feed(i) for i in ids] + [detok.finish()]


def test_loads_through_llama_cpp(tok: Tokenizer, sp: spm.SentencePieceProcessor) -> None:
    assert isinstance(tok, LlamaCppVocabTokenizer)
    assert isinstance(tok, Tokenizer)
    assert tok.vocab_size == sp.vocab_size()
    assert tok.eos_token_ids == {sp.eos_id()}
    # The byte table (with llama.cpp's "first_token" space rule) passed verification: the fast path is used.
    assert tok.byte_table() is not None, tok.table_rejected
    assert tok.byte_table().leading_space == "first_token"  # type: ignore[union-attr]


def test_encode_equals_sentencepiece(tok: Tokenizer, sp: spm.SentencePieceProcessor) -> None:
    text = corpus_text()
    assert tok.encode(text) == sp.encode(text)
    for line in text.splitlines():
        assert tok.encode(line) == sp.encode(line)
    assert tok.decode(tok.encode(text)) == text


def test_decode_equals_sentencepiece_on_ordinary_pieces(
    tok: Tokenizer, sp: spm.SentencePieceProcessor
) -> None:
    plain = [i for i in range(tok.vocab_size) if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i))]
    rng = random.Random(7)
    for _ in range(300):
        ids = [rng.choice(plain) for _ in range(rng.randint(1, 12))]
        assert tok.decode(ids) == sp.decode(ids)


def test_where_llama_cpp_and_sentencepiece_differ(tok: Tokenizer, sp: spm.SentencePieceProcessor) -> None:
    """The documented differences; each is llama.cpp's own behaviour, which this tokenizer follows."""
    the = sp.piece_to_id("▁The")
    bos, unk = sp.bos_id(), sp.unk_id()
    # llama.cpp strips a space from the first token only, even when that token is a hidden BOS.
    assert tok.decode([the]) == sp.decode([the]) == "The"
    assert tok.decode([bos, the]) == " The"
    assert sp.decode([bos, the]) == "The"
    assert tok.decode([bos, the], skip_special_tokens=False) == "<s> The"
    # <unk> is hidden like a control token; SentencePiece shows " ⁇ ".
    assert tok.decode([unk, the]) == " The"
    assert sp.decode([unk, the]) == " ⁇  The"
    # Invalid UTF-8: one U+FFFD per maximal invalid subpart (Python's "replace"), not one per byte.
    first3 = [sp.piece_to_id(f"<0x{b:02X}>") for b in "🦙".encode()[:3]]
    assert tok.decode(first3) == "\ufffd"
    assert sp.decode(first3) == "\ufffd" * 3


def test_ids_outside_the_vocabulary_are_an_error_not_a_crash(tok: Tokenizer) -> None:
    for bad in (-1, tok.vocab_size, 10**9):
        with pytest.raises(TokenizerError, match="outside the vocabulary"):
            tok.decode([5, bad])


def test_chai_deltas(tok: Tokenizer) -> None:
    ids = tok.encode("The chai is ready")
    assert [d for d in stream(tok, ids) if d] == ["The", " ch", "ai", " is", " ready"]


@pytest.mark.parametrize("skip", [True, False])
def test_detokenizer_exact_on_the_corpus_one_token_at_a_time(tok: Tokenizer, skip: bool) -> None:
    bos, eos = 1, 2
    ids = [bos, *tok.encode(corpus_text()), eos]
    assert "".join(stream(tok, ids, skip=skip)) == tok.decode(ids, skip_special_tokens=skip)
    prompt, rest = ids[:40], ids[40:]
    full = tok.decode(ids, skip_special_tokens=skip)
    assert (
        "".join(stream(tok, rest, skip=skip, prompt=prompt))
        == full[len(tok.decode(prompt, skip_special_tokens=skip)) :]
    )


def test_detokenizer_exact_on_random_ids_with_byte_tokens(
    tok: Tokenizer, sp: spm.SentencePieceProcessor
) -> None:
    byte_ids = [i for i in range(tok.vocab_size) if sp.is_byte(i)]
    utf8_chars = [sp.piece_to_id(f"<0x{b:02X}>") for b in "☕🦙é".encode()]
    rng = random.Random(2024)
    for _ in range(150):
        ids: list[int] = []
        for _ in range(rng.randint(1, 30)):
            pool = rng.choice((byte_ids, utf8_chars, [0, 1, 2], range(tok.vocab_size)))
            ids.append(rng.choice(pool))
        skip = rng.random() < 0.5
        detok = Detokenizer(tok, skip_special_tokens=skip)
        out, pos = [], 0
        while pos < len(ids):  # random batch sizes
            step = rng.randint(1, 5)
            out.append(detok.feed(ids[pos : pos + step]))
            pos += step
        out.append(detok.finish())
        assert "".join(out) == tok.decode(ids, skip_special_tokens=skip), ids


def test_unknown_tokenizer_model_is_a_clear_error(tmp_path: Path) -> None:
    path = write_spm_gguf(tmp_path / "odd.gguf", tokenizer_model="nonesuch")
    with pytest.raises(TokenizerError, match="nonesuch") as err:
        load_tokenizer(path)
    assert str(path) in str(err.value)


def test_without_llama_cpp_the_error_says_what_to_install(
    spm_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # makes `import llama_cpp` fail
    with pytest.raises(TokenizerError, match=r"tokenrelay\[llama\]") as err:
        load_tokenizer(spm_gguf)
    assert "'llama'" in str(err.value) and str(spm_gguf) in str(err.value)
    # A 'gpt2' GGUF still loads without llama.cpp.
    assert load_tokenizer(smollm2_gguf_path()).decode([]) == ""


def test_llamacpp_engine_runs_a_sentencepiece_gguf(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    from llama_cpp import Llama

    from tokenrelay._stream import TextDelta
    from tokenrelay.engines.base import SamplingParams, stream_events
    from tokenrelay.engines.llamacpp import LlamaCppEngine

    path = write_spm_gguf(tmp_path / "tiny-llama.gguf", weights=True)
    engine = LlamaCppEngine.load(str(path), n_ctx=128, n_threads=2)
    params = SamplingParams(max_tokens=32, temperature=0.0)
    prompt = "The chai is"

    async def run() -> tuple[list[int], str, list[int], str]:
        try:
            ids = [i async for step in generate(engine, prompt, params) for i in step_ids(step)]
            events = [e async for e in stream_events(engine, prompt, params)]
            text = "".join(e.text for e in events if isinstance(e, TextDelta))
            # llama-cpp-python's own detokenize; the ids do not start with BOS, so it concatenates pieces.
            oracle = Llama(model_path=str(path), vocab_only=True, verbose=False)
            reference = oracle.detokenize(ids).decode("utf-8", "replace")
            oracle.close()
            return ids, text, engine.prompt_ids(prompt), reference
        finally:
            await engine.aclose()

    ids, text, prompt_ids, reference = asyncio.run(run())
    assert isinstance(engine.tokenizer, LlamaCppVocabTokenizer)
    assert engine.stop_token_ids >= {2}
    assert ids and text
    assert text == reference
    tok = engine.tokenizer
    assert text == tok.decode(prompt_ids + ids)[len(tok.decode(prompt_ids)) :]

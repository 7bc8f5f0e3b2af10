"""load_tokenizer: built-in names, files of every family, tokenizer objects, and clear errors for bad input."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from conftest import BUILTINS
from tiny_tokenizers import corpus_text, hf_gemma_style, hf_llama_style, toy_byte_level, toy_wordpiece
from tokenrelay import ByteTable, Detokenizer, Tokenizer, TokenizerError, load_tokenizer
from tokenrelay.tokenizers import HFTokenizer, mistral_data_path, smollm2_gguf_path

FILES = {
    "smollm2": lambda: smollm2_gguf_path(),
    "mistral-v1": lambda: mistral_data_path("tokenizer.model.v1"),
    "mistral-v3": lambda: mistral_data_path("mistral_instruct_tokenizer_240323.model.v3"),
    "tekken": lambda: mistral_data_path("tekken_240911.json"),
}


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_round_trips_the_corpus(name: str, builtin: dict[str, Tokenizer]) -> None:
    tok = builtin[name]
    assert isinstance(tok, Tokenizer)
    assert tok.name == name
    ids = tok.encode(corpus_text())
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == corpus_text()
    assert tok.eos_token_ids
    assert tok.byte_table() is not None, getattr(tok, "table_rejected", None)


def test_builtins_are_loaded_once() -> None:
    assert load_tokenizer("mistral-v1") is load_tokenizer("mistral-v1")


@pytest.mark.parametrize("name", BUILTINS)
def test_load_from_a_file_path(name: str, builtin: dict[str, Tokenizer], tmp_path: Path) -> None:
    path = FILES[name]()
    for source in (path, str(path)):
        tok = load_tokenizer(source)
        text = "chai ☕ 🦙 आपका"
        assert tok.encode(text) == builtin[name].encode(text)
        assert tok.decode(tok.encode(text)) == text


def test_smollm2_matches_llama_cpp_tokenization(builtin: dict[str, Tokenizer]) -> None:
    """The HF tokenizer built from the GGUF vocabulary tokenizes and detokenizes exactly as llama.cpp does."""
    llama_cpp = pytest.importorskip("llama_cpp")
    llm = llama_cpp.Llama(model_path=str(smollm2_gguf_path()), vocab_only=True, verbose=False)
    tok = builtin["smollm2"]
    text = corpus_text()
    ids = llm.tokenize(text.encode(), add_bos=False, special=False)
    assert ids == tok.encode(text)
    rng = random.Random(5)
    for _ in range(50):
        sample = [rng.randrange(3, tok.vocab_size) for _ in range(rng.randint(1, 12))]
        assert llm.detokenize(sample).decode("utf-8", "replace") == tok.decode(sample)
    assert tok.eos_token_ids >= {llm.token_eos()}


def test_hf_tokenizer_json_file_and_folder(tmp_path: Path) -> None:
    core = toy_byte_level()
    core.save(str(tmp_path / "tokenizer.json"))
    for source in (tmp_path / "tokenizer.json", tmp_path):
        tok = load_tokenizer(source)
        assert tok.decode(tok.encode("tea ☕")) == "tea ☕"
        assert tok.byte_table() is not None


def test_tokenizer_objects() -> None:
    core = hf_llama_style(mistral_data_path("tokenizer.model.v1"))
    tok = load_tokenizer(core)
    assert isinstance(tok, HFTokenizer)
    assert tok.byte_table() is not None
    assert tok.byte_table().invalid_utf8 == "byte_run"  # type: ignore[union-attr]
    transformers = pytest.importorskip("transformers")
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=toy_byte_level(), eos_token="<|im_end|>")
    wrapped = load_tokenizer(fast)
    assert wrapped.decode(wrapped.encode("chai 🦙")) == "chai 🦙"
    assert wrapped.eos_token_ids == {fast.eos_token_id}
    assert load_tokenizer(wrapped) is wrapped  # anything implementing the protocol passes through


def test_the_gemma_chain_has_a_byte_table() -> None:
    """Replace, ByteFallback, Fuse without Strip (Gemma): every space kept, runs as HF ByteFallback has them."""
    tok = load_tokenizer(hf_gemma_style(mistral_data_path("tokenizer.model.v1")))
    table = tok.byte_table()
    assert table is not None, getattr(tok, "table_rejected", None)
    assert (table.invalid_utf8, table.leading_space) == ("byte_run", "keep")
    ids = tok.encode(" two  spaces ☕")
    assert tok.decode(ids) == " two  spaces ☕"
    detok = Detokenizer(tok)
    assert "".join(detok.feed(i) for i in ids) + detok.finish() == tok.decode(ids)


def test_wordpiece_has_no_byte_table_but_still_detokenizes() -> None:
    tok = load_tokenizer(toy_wordpiece())
    assert tok.byte_table() is None
    ids = tok.encode("The chai is ready")
    detok = Detokenizer(tok)
    assert "".join(detok.feed(i) for i in ids) + detok.finish() == tok.decode(ids)


class _LyingTable(HFTokenizer):
    def _derive_table(self) -> ByteTable | None:
        table = super()._derive_table()
        assert table is not None
        pieces = list(table.pieces)
        pieces[pieces.index(b"a")] = b"b"  # one wrong entry
        return ByteTable(pieces=pieces, special=table.special)


def test_a_table_that_disagrees_with_the_reference_is_rejected() -> None:
    tok = _LyingTable(toy_byte_level())
    assert tok.byte_table() is None
    assert tok.table_rejected and "reference" in tok.table_rejected
    ids = tok.encode("a banana")
    detok = Detokenizer(tok)
    assert detok.feed(ids) + detok.finish() == "a banana"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("no-such-tokenizer.json", "no such tokenizer file"),
        ("missing.gguf", "no such tokenizer file"),
        ("plain.txt", "unknown tokenizer file type"),
    ],
)
def test_missing_or_unknown_files(source: str, message: str, tmp_path: Path) -> None:
    if source == "plain.txt":
        (tmp_path / source).write_text("hello")
    with pytest.raises(TokenizerError, match=message) as err:
        load_tokenizer(tmp_path / source)
    assert source in str(err.value)


@pytest.mark.parametrize("name", BUILTINS)
@pytest.mark.parametrize("keep", [0, 3, 100, 5000])
def test_truncated_files_give_one_clear_error(name: str, keep: int, tmp_path: Path) -> None:
    src = FILES[name]()
    dst = tmp_path / src.name
    with src.open("rb") as f:
        dst.write_bytes(f.read(keep))
    with pytest.raises(TokenizerError) as err:
        load_tokenizer(dst)
    assert str(dst) in str(err.value)


def test_json_that_is_not_a_tokenizer(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps({"hello": "world"}))
    with pytest.raises(TokenizerError, match=r"neither an HF tokenizer\.json nor a Tekken"):
        load_tokenizer(path)
    path.write_text(json.dumps({"model": {"type": "Nope"}}))
    with pytest.raises(TokenizerError, match=r"not a valid HF tokenizer\.json"):
        load_tokenizer(path)


def test_garbage_model_file(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.model"
    path.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(TokenizerError, match="SentencePiece"):
        load_tokenizer(path)


def test_gguf_without_a_supported_vocabulary(tmp_path: Path) -> None:
    # A real GGUF header with no tokenizer keys.
    import struct

    path = tmp_path / "empty.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 0))
    with pytest.raises(TokenizerError, match="has no tokenizer"):
        load_tokenizer(path)


def test_unsupported_objects() -> None:
    for bad in (42, None, object(), ["a"]):
        with pytest.raises(TokenizerError, match="cannot load a tokenizer"):
            load_tokenizer(bad)


def test_copied_gguf_elsewhere_loads(tmp_path: Path, builtin: dict[str, Tokenizer]) -> None:
    dst = tmp_path / "model.gguf"
    shutil.copy(smollm2_gguf_path(), dst)
    tok = load_tokenizer(dst)
    assert tok.encode("hello 🦙") == builtin["smollm2"].encode("hello 🦙")
    assert getattr(tok, "chat_template", None) and "im_start" in tok.chat_template  # type: ignore[attr-defined]

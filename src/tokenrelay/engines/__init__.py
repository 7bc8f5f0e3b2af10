"""Engines: token-id generators behind one small async protocol (see ``engines.base``).

Every engine the CLI offers (``--engine NAME``) is declared once, in :data:`ENGINES`:

- ``llamacpp``: :class:`LlamaCppEngine`, a GGUF model in-process with llama-cpp-python (the embedded SmolLM2);
- ``replay``: :class:`ReplayEngine`, a text replayed through a real tokenizer on a schedule (tests, benchmarks);
- ``upstream``: :class:`UpstreamEngine`, relayed from running engine servers (vLLM, SGLang, TGI, llama.cpp's
  server, tokenrelay), replicas of one model;
- ``vllm``: :class:`VLLMEngine`, vLLM's async engine in-process.

The engine classes are imported when first used (``tokenrelay.engines.VLLMEngine``, :func:`engine_class`), so
importing this package loads no engine module; the optional dependencies (llama-cpp-python, vLLM) are imported
only when a model is loaded. ``stream_events`` runs any engine through a ``TextStream`` and is what the CLI and
the server share.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tokenrelay.engines.base import (
    ChatMessage,
    Engine,
    EngineFinished,
    Prompt,
    SamplingParams,
    Step,
    TimedIds,
    render_plain_chat,
    stream_events,
    timed_ids,
)

if TYPE_CHECKING:
    from tokenrelay.engines.llamacpp import DEFAULT_MODEL, LlamaCppEngine, resolve_model_path
    from tokenrelay.engines.replay import ReplayEngine
    from tokenrelay.engines.upstream import UpstreamEngine
    from tokenrelay.engines.vllm import VLLMEngine

__all__ = [
    "DEFAULT_MODEL",
    "ENGINES",
    "ChatMessage",
    "Engine",
    "EngineFinished",
    "LlamaCppEngine",
    "Prompt",
    "ReplayEngine",
    "SamplingParams",
    "Step",
    "TimedIds",
    "UpstreamEngine",
    "VLLMEngine",
    "engine_class",
    "render_plain_chat",
    "resolve_model_path",
    "stream_events",
    "timed_ids",
]

ENGINES: dict[str, tuple[str, str]] = {
    "llamacpp": ("tokenrelay.engines.llamacpp", "LlamaCppEngine"),
    "replay": ("tokenrelay.engines.replay", "ReplayEngine"),
    "upstream": ("tokenrelay.engines.upstream", "UpstreamEngine"),
    "vllm": ("tokenrelay.engines.vllm", "VLLMEngine"),
}
"""``--engine`` name → (module, class); the first is the default."""

# Names this package re-exports from an engine module, loaded on first access (PEP 562).
_LAZY: dict[str, str] = {
    **{cls: module for module, cls in ENGINES.values()},
    "DEFAULT_MODEL": "tokenrelay.engines.llamacpp",
    "resolve_model_path": "tokenrelay.engines.llamacpp",
}


def engine_class(name: str) -> type[Any]:
    """The engine class ``--engine name`` stands for (its module imported now)."""
    try:
        module, cls = ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}: one of {', '.join(ENGINES)}") from None
    return getattr(importlib.import_module(module), cls)  # type: ignore[no-any-return]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this hook
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

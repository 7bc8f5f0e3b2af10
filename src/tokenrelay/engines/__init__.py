"""Engines: token-id generators behind one small async protocol (see ``engines.base``).

``ReplayEngine`` replays a text through a real tokenizer on a schedule; ``LlamaCppEngine`` runs a GGUF model
with llama-cpp-python (imported only when a model is loaded). ``stream_events`` runs any engine through a
``TextStream`` and is what the CLI and the server share.
"""

from __future__ import annotations

from tokenrelay.engines.base import (
    ChatMessage,
    Engine,
    Prompt,
    SamplingParams,
    Step,
    TimedIds,
    render_plain_chat,
    stream_events,
    timed_ids,
)
from tokenrelay.engines.llamacpp import DEFAULT_MODEL, LlamaCppEngine, resolve_model_path
from tokenrelay.engines.replay import ReplayEngine

__all__ = [
    "DEFAULT_MODEL",
    "ChatMessage",
    "Engine",
    "LlamaCppEngine",
    "Prompt",
    "ReplayEngine",
    "SamplingParams",
    "Step",
    "TimedIds",
    "render_plain_chat",
    "resolve_model_path",
    "stream_events",
    "timed_ids",
]

"""``ServerConfig``: the limits and switches of one server (``create_app`` takes one; ``tokenrelay serve`` fills
it from its options)."""

from __future__ import annotations

from dataclasses import dataclass

from .responses_store import DEFAULT_MAX_BYTES, DEFAULT_MAX_RESPONSES

__all__ = ["ServerConfig"]


@dataclass(frozen=True)
class ServerConfig:
    """Limits and switches of one server. The defaults suit one small model on a laptop."""

    api_key: str | None = None
    max_active: int = 64  # generations running at once
    max_queued: int = 256  # generations waiting for a slot; beyond this, 429
    max_body_bytes: int = 1 << 20  # larger request bodies get 413
    body_timeout: float = 30.0  # a request body that takes longer to arrive gets 408
    max_prompt_chars: int = 200_000  # longer prompts get 400 before they are tokenized
    max_tokens_limit: int = 4096  # the largest max_tokens a request may ask for
    default_max_tokens: int = 512  # when a request names none
    keepalive_interval: float = 15.0  # seconds of silence before a keep-alive comment
    send_timeout: float = 30.0  # a client that reads nothing for this long is dropped
    gzip: bool = True  # compress ordinary responses (never event streams)
    model_aliases: tuple[str, ...] = ()
    retry_after: float = 1.0
    diagnostics: bool = True  # the doctor's diagnostic stream under /v1/diagnostics/
    # While the app runs, the cyclic collector skips what existed at startup and makes full passes rarer
    # (collector.tune_collector); False leaves the process's collector alone.
    tune_gc: bool = True
    # How replies are read (issue 31): vLLM's --reasoning-parser and --tool-call-parser names. Reasoning: None
    # detects the format from the model's chat template, "none" splits nothing. Tool calls: None leaves the
    # choice to the engine (generation.call_format). Resolved once, into _Server's reasoning_format and
    # tool_call_format; an unknown name is a ConfigError naming the choices (create_app raises it).
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    # The thinking budget of a request that gives none (llama-server's --reasoning-budget): None is no cap, 0
    # turns thinking off. Enforced by the engines that sample here (the embedded one).
    reasoning_budget: int | None = None
    # The Responses API's stored responses (responses_store.py): in memory, oldest evicted beyond either bound.
    responses_store_count: int = DEFAULT_MAX_RESPONSES
    responses_store_bytes: int = DEFAULT_MAX_BYTES

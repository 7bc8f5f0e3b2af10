"""The request a chat stream sends (``stream_chat``): OpenAI's Chat Completions, or the Anthropic Messages API.

``chat_request`` builds either. For the Messages API (``api="messages"``), a chat's turns as a Messages body: its system turns joined into ``system``, the rest as they are, the key as
``x-api-key`` with ``anthropic-version``; ``max_tokens``, which the API requires, is
:data:`MESSAGES_MAX_TOKENS` unless the caller gives one. The stream is read by
``wire._messages_reader.MessagesStreamDecoder``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

__all__ = ["ANTHROPIC_VERSION", "MESSAGES_MAX_TOKENS", "Api", "chat_request", "messages_request"]

#: Which API a chat stream asks: OpenAI's Chat Completions, or Anthropic's Messages.
Api = Literal["chat", "messages"]
MESSAGES_MAX_TOKENS = 1024
ANTHROPIC_VERSION = "2023-06-01"


def messages_request(
    base_url: str,
    messages: Sequence[Mapping[str, object]],
    model: str,
    api_key: str | None,
    headers: Mapping[str, str] | None,
    params: Mapping[str, object],
) -> tuple[str, dict[str, str], dict[str, object]]:
    """An Anthropic Messages request for the same chat: system turns become ``system``, ``max_tokens`` (which
    the API requires) is ``MESSAGES_MAX_TOKENS`` unless given."""
    system = "\n\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "system")
    turns = [dict(m) for m in messages if m.get("role") != "system"]
    body: dict[str, object] = {"model": model, "messages": turns, "stream": True}
    body["max_tokens"] = MESSAGES_MAX_TOKENS
    if system:
        body["system"] = system
    body.update(params)
    all_headers = {"Accept": "text/event-stream", "anthropic-version": ANTHROPIC_VERSION, **(headers or {})}
    if api_key:
        all_headers["x-api-key"] = api_key
    return base_url.rstrip("/") + "/messages", all_headers, body


def chat_request(
    base_url: str,
    messages: Sequence[Mapping[str, object]],
    model: str,
    include_usage: bool,
    api_key: str | None,
    headers: Mapping[str, str] | None,
    params: Mapping[str, object],
    api: Api = "chat",
) -> tuple[str, dict[str, str], dict[str, object]]:
    if api == "messages":
        return messages_request(base_url, messages, model, api_key, headers, params)
    body: dict[str, object] = {"model": model, "messages": list(messages), "stream": True}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    body.update(params)
    all_headers = {"Accept": "text/event-stream", **(headers or {})}
    if api_key:
        all_headers["Authorization"] = f"Bearer {api_key}"
    return base_url.rstrip("/") + "/chat/completions", all_headers, body

"""The OpenAPI description of the Messages API (``POST /v1/messages``, ``/v1/messages/count_tokens``).

Written against ``messages_request.py``'s rules, with the server's limits, under the rules ``openapi.py``
keeps (schemathesis checks them): every body the description calls valid is served, every body it calls
invalid gets a 4xx, every status the server sends is listed (errors in Anthropic's shape, 529 when shutting
down). Tools, ``tool_choice`` and ``thinking`` are described in words only: their validity depends on more than
a schema can say (a tool's ``input_schema`` must itself be a JSON Schema of an object; a thinking budget must be
below ``max_tokens``), so a fuzzer is not told to send them as always valid.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .requests import MAX_STOPS

__all__ = ["MESSAGES_PATHS", "messages_operations", "messages_schemas"]

JSON = dict[str, Any]

COUNT_TOKENS = "/v1/messages/count_tokens"
MESSAGES_PATHS = ("/v1/messages", COUNT_TOKENS)


def messages_schemas(
    ref: Callable[[str], JSON], *, models: Sequence[str], max_tokens_limit: int, max_prompt_chars: int
) -> dict[str, JSON]:
    text = {"type": "string", "maxLength": max_prompt_chars}
    text_block = {
        "type": "object",
        "required": ["type", "text"],
        "properties": {
            "type": {"const": "text"},
            "text": text,
            "cache_control": {"description": "accepted and ignored (any value)"},
        },
    }
    conversation: JSON = {
        "model": {"type": "string", "enum": list(models)},
        "system": {"anyOf": [{"type": "null"}, text, {"type": "array", "items": ref("AnthropicTextBlock")}]},
        "messages": {
            "type": "array",
            "minItems": 1,
            "items": ref("AnthropicMessage"),
            "description": "text blocks, and tool_use (assistant) / tool_result (user) blocks: a tool_result "
            "must answer a tool_use of an earlier message (400 `unknown_tool_use`), a tool_use id may be given "
            "once (400 `duplicate_tool_use_id`); image and document blocks are refused (400 naming them)",
        },
    }
    return {
        "AnthropicTextBlock": text_block,
        "AnthropicMessage": {
            "type": "object",
            "required": ["role", "content"],
            "properties": {
                "role": {"enum": ["user", "assistant", "system"]},
                "content": {"anyOf": [text, {"type": "array", "items": ref("AnthropicTextBlock")}]},
            },
        },
        "MessagesRequest": {
            "type": "object",
            "required": ["model", "max_tokens", "messages"],
            "description": "Also taken: `tools` (custom tools: `name`, `description`, `input_schema`; server "
            "tools are refused), `tool_choice` (`auto`, `any`, `tool` with `name`, `none`; "
            "`disable_parallel_tool_use`), `thinking` (`enabled` with `budget_tokens` ≥ 1024 and below "
            "`max_tokens`, `adaptive`, `disabled`), `metadata`; `cache_control` anywhere is ignored.",
            "properties": {
                **conversation,
                "max_tokens": {"type": "integer", "minimum": 1, "maximum": max_tokens_limit},
                "stream": {"type": "boolean"},
                "stop_sequences": {
                    "anyOf": [
                        {"type": "null"},
                        {"type": "array", "maxItems": MAX_STOPS, "items": {"type": "string", "minLength": 1}},
                    ]
                },
                "temperature": {"type": "number", "minimum": 0, "maximum": 1},
                "top_p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                "top_k": {
                    "enum": [None, 0, 1],
                    "description": "1 is greedy (temperature 0); the engines take no other top_k",
                },
                "metadata": {"type": ["object", "null"]},
            },
        },
        "CountTokensRequest": {
            "type": "object",
            "required": ["model", "messages"],
            "description": "The same conversation, tools and tool_choice as a Messages request",
            "properties": conversation,
        },
        "AnthropicError": {
            "type": "object",
            "required": ["type", "error"],
            "properties": {
                "type": {"const": "error"},
                "error": {
                    "type": "object",
                    "required": ["type", "message"],
                    "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
                },
            },
        },
        "AnthropicMessageResponse": {
            "type": "object",
            "required": ["id", "type", "role", "model", "content", "stop_reason", "stop_sequence", "usage"],
            "properties": {
                "id": {"type": "string"},
                "type": {"const": "message"},
                "role": {"const": "assistant"},
                "content": {"type": "array"},
                "usage": {"type": "object", "required": ["input_tokens", "output_tokens"]},
            },
        },
        "AnthropicStreamEvent": {
            "type": "object",
            "required": ["event", "data"],
            "properties": {
                "event": {"type": "string", "description": "the `type` of the JSON in `data`"},
                "data": {"type": "string"},
            },
        },
    }


def _error(description: str, ref: Callable[[str], JSON]) -> JSON:
    return {"description": description, "content": {"application/json": {"schema": ref("AnthropicError")}}}


def messages_operations(ref: Callable[[str], JSON]) -> dict[str, JSON]:
    """The request bodies and responses of the two paths."""
    errors = {
        "400": _error("Invalid request (Anthropic's `invalid_request_error`)", ref),
        "401": _error("Missing or wrong API key (`x-api-key` or `Authorization: Bearer`)", ref),
        "404": _error("Unknown model", ref),
        "408": _error("The request body did not arrive in time", ref),
        "413": _error("Request body too large", ref),
    }
    return {
        "/v1/messages": {
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": ref("MessagesRequest")}},
            },
            "responses": {
                "200": {
                    "description": "The message (JSON), or with `stream: true` named server-sent events "
                    "(`message_start` … `message_stop`, `ping` keep-alives, an `error` event on failure)",
                    "content": {
                        "application/json": {"schema": ref("AnthropicMessageResponse")},
                        "text/event-stream": {"schema": ref("AnthropicStreamEvent")},
                    },
                },
                **errors,
                "429": _error("Server busy (`rate_limit_error`, see Retry-After)", ref),
                "529": _error("The server is shutting down (`overloaded_error`)", ref),
            },
        },
        COUNT_TOKENS: {
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": ref("CountTokensRequest")}},
            },
            "responses": {
                "200": {
                    "description": "The prompt's tokens, as a generation of the same request counts them",
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["input_tokens"],
                                "properties": {"input_tokens": {"type": "integer", "minimum": 0}},
                            }
                        }
                    },
                },
                **errors,
            },
        },
    }

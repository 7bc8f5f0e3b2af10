"""The OpenAPI description of the server: what a schema-driven client or fuzzer may send, and what comes back.

The generation endpoints read their bodies themselves (``requests.parse_generation``), so FastAPI cannot derive
their schemas; they are written here, against the same rules, with this server's limits filled in (its model
names, ``max_tokens`` bound and prompt cap). The rules the description must keep (issue 12, checked by
schemathesis in the test suite): every body it calls valid is served (2xx), every body it calls invalid gets a
4xx, every status and content type the server sends is listed, and every ``$ref`` resolves inside the document.
Parameters tokenrelay does not implement are listed with the values that mean "off", the only ones accepted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .generation import ENDPOINTS
from .messages_openapi import messages_operations, messages_schemas
from .requests import MAX_STOPS, ROLES
from .response_format import openapi_schemas
from .responses_request import openapi_schemas as responses_schemas
from .tools import CALL_NEEDS_TOOLS, tool_fields, tool_schemas

__all__ = ["GENERATION_ERRORS", "describe"]

JSON = dict[str, Any]


def _ref(name: str) -> JSON:
    return {"$ref": f"#/components/schemas/{name}"}


def _error(description: str) -> JSON:
    return {"description": description, "content": {"application/json": {"schema": _ref("ErrorResponse")}}}


ERRORS: dict[str, JSON] = {
    "400": _error("Invalid request: the error's `param` names the field"),
    "401": _error("Missing or wrong API key (only when the server has one)"),
    "404": _error("Unknown model or path"),
    "408": _error("The request body did not arrive in time"),
    "413": _error("Request body too large"),
    "429": _error("Server busy: every generation slot and queue place is taken (see Retry-After)"),
    "503": _error("The server is shutting down"),
}
GENERATION_ERRORS = ("400", "401", "404", "408", "413", "429", "503")
INT64 = {"minimum": -(2**63), "maximum": 2**63 - 1}
# Parameters that would change the reply if honoured: the values that mean "off" are the only ones accepted.
_OFF: dict[str, JSON] = {
    "best_of": {"enum": [None, 1]},
    "echo": {"enum": [None, False]},
    "suffix": {"enum": [None, ""]},
    "logprobs": {"enum": [None, False, 0]},
    "top_logprobs": {"enum": [None, 0]},
    "presence_penalty": {"enum": [None, 0]},
    "frequency_penalty": {"enum": [None, 0]},
    "logit_bias": {"anyOf": [{"type": "null"}, {"type": "object", "maxProperties": 0}]},
    "functions": {"anyOf": [{"type": "null"}, {"type": "array", "maxItems": 0}]},
    "function_call": {"enum": [None, "none", "auto"]},
    "prediction": {"type": "null"},
    "modalities": {"anyOf": [{"type": "null"}, {"const": ["text"]}]},
    "audio": {"type": "null"},
}


# Legacy completions take no tools: they are refused unless off.
_OFF_COMPLETIONS: dict[str, JSON] = {
    "tools": {"anyOf": [{"type": "null"}, {"type": "array", "maxItems": 0}]},
    "tool_choice": {"enum": [None, "none", "auto"]},
}


def _schemas(models: Sequence[str], max_tokens_limit: int, max_prompt_chars: int) -> dict[str, JSON]:
    text = {"type": "string", "maxLength": max_prompt_chars}
    max_tokens = {"type": ["integer", "null"], "minimum": 1, "maximum": max_tokens_limit}
    common: dict[str, JSON] = {
        "model": {"type": "string", "enum": ["", *models], "description": "empty: the served model"},
        "stream": {"type": "boolean"},
        "stream_options": {"anyOf": [{"type": "null"}, _ref("StreamOptions")]},
        "max_tokens": max_tokens,
        "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        "top_p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "seed": {"type": ["integer", "null"], **INT64},
        "stop": {
            "anyOf": [
                {"type": "null"},
                {"type": "string", "minLength": 1},
                {"type": "array", "maxItems": MAX_STOPS, "items": {"type": "string", "minLength": 1}},
            ]
        },
        "n": {"type": "integer", "enum": [1]},
        "response_format": {"anyOf": [{"type": "null"}, _ref("ResponseFormat")]},
        **_OFF,
    }
    return {
        "ErrorResponse": {
            "type": "object",
            "required": ["error"],
            "properties": {
                "error": {
                    "type": "object",
                    "required": ["message", "type", "param", "code"],
                    "properties": {
                        "message": {"type": "string"},
                        "type": {"type": "string"},
                        "param": {"type": ["string", "null"]},
                        "code": {"type": ["string", "null"]},
                    },
                }
            },
        },
        "StreamEvent": {
            "type": "object",
            "required": ["data"],
            "properties": {
                "data": {
                    "type": "string",
                    "description": "a chunk (JSON), an in-stream error (JSON), or the final `[DONE]`",
                },
                "event": {"type": "string"},
            },
        },
        "StreamOptions": {
            "type": "object",
            "properties": {
                "include_usage": {"type": "boolean"},
                "include_step_times": {
                    "type": "boolean",
                    "description": (
                        "tokenrelay extension, streams only: every chunk gets a top-level `tokenrelay` object, "
                        '`{"sent_ms": S, "steps_ms": [[START, END], ...], "source": "engine" | "arrival"}`: ms '
                        "since the request, when the chunk was sent and when the model step of each token it "
                        "carries started and ended (`arrival`: the engine does not time its steps, and both "
                        "are the step's arrival at the server)"
                    ),
                },
            },
        },
        **openapi_schemas(_ref),
        "TextPart": {
            "type": "object",
            "required": ["type", "text"],
            "properties": {"type": {"const": "text"}, "text": text},
        },
        "ChatMessage": {
            "type": "object",
            "required": ["role"],
            "properties": {
                "role": {"enum": [r for r in ROLES if r != "tool"]},
                "content": {"anyOf": [{"type": "null"}, text, {"type": "array", "items": _ref("TextPart")}]},
                "tool_calls": {
                    "anyOf": [{"type": "null"}, {"type": "array", "items": _ref("ToolCall")}],
                    "description": "assistant turns only",
                },
            },
            # Only an assistant turn makes calls (written without if/then: a fuzzer cannot negate those).
            "anyOf": [
                {"properties": {"role": {"const": "assistant"}}},
                {
                    "properties": {
                        "tool_calls": {"anyOf": [{"type": "null"}, {"type": "array", "maxItems": 0}]}
                    }
                },
            ],
        },
        **tool_schemas(text, _ref),
        "ChatCompletionRequest": {
            "type": "object",
            "required": ["messages"],
            "properties": {
                "messages": {
                    "type": "array",
                    "minItems": 1,
                    "items": {"anyOf": [_ref("ChatMessage"), _ref("ToolMessage")]},
                },
                "max_completion_tokens": max_tokens,
                **common,
                **tool_fields(_ref),
            },
            **CALL_NEEDS_TOOLS,
        },
        **responses_schemas(text, common, _ref),
        "CompletionRequest": {
            "type": "object",
            "required": ["prompt"],
            "properties": {
                "prompt": {"anyOf": [text, {"type": "array", "minItems": 1, "maxItems": 1, "items": text}]},
                **common,
                **_OFF_COMPLETIONS,
            },
        },
        "Response": {
            "type": "object",
            "required": ["id", "object", "created_at", "status", "model", "output"],
            "properties": {
                "id": {"type": "string"},
                "object": {"const": "response"},
                "status": {"enum": ["completed", "incomplete"]},
                "output": {"type": "array"},
                "usage": {"type": "object"},
            },
        },
        "Completion": {
            "type": "object",
            "required": ["id", "object", "created", "model", "choices", "usage"],
            "properties": {
                "id": {"type": "string"},
                "object": {"enum": ["chat.completion", "text_completion"]},
                "choices": {"type": "array", "minItems": 1, "maxItems": 1},
                "usage": {"type": "object"},
            },
        },
    }


#: Each endpoint kind's request and whole-response schemas (``CompletionRequest``, ``Completion`` otherwise).
REQUESTS = {"chat": "ChatCompletionRequest", "responses": "ResponsesRequest"}
RESPONSES = {"responses": "Response"}


def _generation(request: str, response: str = "Completion") -> JSON:
    return {
        "requestBody": {"required": True, "content": {"application/json": {"schema": _ref(request)}}},
        "responses": {
            "200": {
                "description": "The whole reply (JSON), or with `stream: true` server-sent events ending in "
                "`data: [DONE]`",
                "content": {
                    "application/json": {"schema": _ref(response)},
                    # OpenAPI 3.1: the schema of an event stream describes each event.
                    "text/event-stream": {"schema": _ref("StreamEvent")},
                },
            },
            **{code: ERRORS[code] for code in GENERATION_ERRORS},
        },
    }


def describe(
    spec: JSON,
    *,
    models: Sequence[str],
    max_tokens_limit: int,
    max_prompt_chars: int,
    api_key: bool,
    open_paths: frozenset[str],
) -> JSON:
    """Complete FastAPI's ``spec`` (paths and operation ids) with the schemas, responses and security."""
    components = spec.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    schemas.update(_schemas(models, max_tokens_limit, max_prompt_chars))
    schemas.update(
        messages_schemas(
            _ref, models=models, max_tokens_limit=max_tokens_limit, max_prompt_chars=max_prompt_chars
        )
    )
    paths: dict[str, JSON] = spec.get("paths", {})
    for path, endpoint in ENDPOINTS.items():
        if path in paths and endpoint.kind != "messages":  # the Messages API describes its own operations
            request = REQUESTS.get(endpoint.kind, "CompletionRequest")
            paths[path]["post"].update(_generation(request, RESPONSES.get(endpoint.kind, "Completion")))
    for path, operation in messages_operations(_ref).items():
        if path in paths:
            paths[path]["post"].update(operation)
    if "/metrics" in paths:
        paths["/metrics"]["get"]["responses"]["200"] = {
            "description": "Prometheus text exposition format",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        }
    if "/health" in paths:
        paths["/health"]["get"]["responses"]["503"] = {
            "description": "Shutting down: no new generations are taken",
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    if api_key:
        components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    for path, operations in paths.items():
        for operation in operations.values():
            if api_key and path not in open_paths:
                operation["security"] = [{"bearer": []}]
                operation["responses"].setdefault("401", ERRORS["401"])
    return spec

"""The tools of a chat request (issue 21): ``tools``, ``tool_choice``, ``parallel_tool_calls`` and the calls of
earlier assistant turns, checked into a ``ToolRequest`` (``_tools``).

Every hostile definition is a 400 naming the field: a type other than ``function``, a name outside
``[A-Za-z0-9_-]{1,64}`` or given twice (``duplicate_tool_name``), ``parameters`` that are not the JSON Schema
of an object, more than ``MAX_TOOLS`` tools (OpenAI's own limit) or more than ``MAX_TOOLS_CHARS`` of
definitions (each is part of the prompt), a ``tool_choice`` that asks for a call with no tools or names a
tool not offered (``unknown_tool``). ``requests.py`` checks the turns (a ``tool`` turn must answer a call an
earlier turn made: ``unknown_tool_call``).

The OpenAPI description of these fields (``tool_schemas``, ``tool_fields``) is here too, with these limits.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, cast

from pydantic import BaseModel, ConfigDict

from tokenrelay._errors import InvalidRequestError
from tokenrelay._schema_subset import check_bounds, check_subset
from tokenrelay._tools import Tool, ToolChoice, ToolRequest, tool_grammar

from .response_format import ResponseFormat, check_dialect

__all__ = [
    "CALL_NEEDS_TOOLS",
    "MAX_TOOLS",
    "MAX_TOOLS_CHARS",
    "TOOL_CHOICES",
    "TOOL_NAME",
    "NamedToolChoice",
    "ToolBody",
    "ToolCallBody",
    "grammar_for",
    "history_call",
    "tool_fields",
    "tool_request",
    "tool_schemas",
]

MAX_TOOLS = 128  # OpenAI's own limit
MAX_TOOLS_CHARS = 131_072  # the whole tools array as compact JSON: every definition is part of the prompt
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
TOOL_CHOICES = ("none", "auto", "required")


_STRICT = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


def _check_text(value: str, param: str) -> None:
    # As requests.py does for every text field: a lone surrogate cannot be rendered into a prompt.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRequestError(
            f"{param} holds a lone surrogate; text must be valid Unicode", param=param
        ) from exc


class FunctionCall(BaseModel):
    model_config = _STRICT
    name: str
    arguments: str


class ToolCallBody(BaseModel):
    """A call in an assistant turn (``messages[i].tool_calls[j]``)."""

    model_config = _STRICT
    id: str
    type: str = "function"
    function: FunctionCall


class FunctionBody(BaseModel):
    model_config = _STRICT
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolBody(BaseModel):
    model_config = _STRICT
    type: str
    function: FunctionBody | None = None


class NamedFunction(BaseModel):
    model_config = _STRICT
    name: str


class NamedToolChoice(BaseModel):
    model_config = _STRICT
    type: str
    function: NamedFunction


def history_call(call: ToolCallBody, i: int, j: int) -> dict[str, object]:
    where = f"messages.{i}.tool_calls.{j}"
    if call.type != "function":
        raise InvalidRequestError(f"{where}.type must be 'function'", param=f"{where}.type")
    for value, field in (
        (call.id, "id"),
        (call.function.name, "function.name"),
        (call.function.arguments, "function.arguments"),
    ):
        _check_text(value, f"{where}.{field}")
    # Templates that take tools write the arguments with `tojson`: they expect an object, as vLLM and
    # transformers pass it. Text that is not JSON stays text.
    try:
        arguments: object = json.loads(call.function.arguments) if call.function.arguments.strip() else {}
    except ValueError:
        arguments = call.function.arguments
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.function.name, "arguments": arguments},
    }


def tool_request(
    bodies: list[ToolBody] | None, tool_choice: str | NamedToolChoice | None, parallel_tool_calls: bool | None
) -> ToolRequest | None:
    """The request's tools, every definition checked; ``None`` when it offers none."""
    choice, named = _tool_choice(tool_choice)
    if not bodies:
        if choice in ("required", "function"):
            raise InvalidRequestError(
                "tool_choice asks for a tool call, but the request offers no tools", param="tool_choice"
            )
        return None
    if len(bodies) > MAX_TOOLS:
        raise InvalidRequestError(
            f"{len(bodies)} tools; at most {MAX_TOOLS} are allowed", param="tools", code="too_many_tools"
        )
    tools: list[Tool] = []
    for i, body in enumerate(bodies):
        where = f"tools.{i}"
        if body.type != "function":
            raise InvalidRequestError(
                f"{where}.type {body.type!r} is not supported; only 'function' tools are",
                param=f"{where}.type",
                code="unsupported_parameter",
            )
        if body.function is None:
            raise InvalidRequestError(f"{where}.function is required", param=f"{where}.function")
        f = body.function
        if TOOL_NAME.fullmatch(f.name) is None:
            raise InvalidRequestError(
                f"{where}.function.name {f.name[:80]!r} must be 1 to 64 letters, digits, '_' or '-'",
                param=f"{where}.function.name",
            )
        if any(t.name == f.name for t in tools):
            raise InvalidRequestError(
                f"{where}.function.name {f.name!r} is given twice",
                param=f"{where}.function.name",
                code="duplicate_tool_name",
            )
        if f.description is not None:
            _check_text(f.description, f"{where}.function.description")
        if f.parameters is not None:
            check_parameters(f.parameters, f"{where}.function.parameters", strict=bool(f.strict))
        tools.append(Tool(f.name, f.description, f.parameters, bool(f.strict)))
    size = 0
    for i, tool in enumerate(tools):
        text = json_text(tool.to_openai())
        _check_text(text, f"tools.{i}")  # a lone surrogate anywhere in a definition cannot be rendered
        if len(text) > MAX_TOOLS_CHARS:
            raise InvalidRequestError(
                f"tools[{i}] is {len(text)} characters of JSON; all the tools together may have at most "
                f"{MAX_TOOLS_CHARS}",
                param=f"tools.{i}.function.parameters" if tool.parameters else f"tools.{i}",
                code="tools_too_large",
            )
        size += len(text)
    if size > MAX_TOOLS_CHARS:
        raise InvalidRequestError(
            f"the tool definitions are {size} characters of JSON; at most {MAX_TOOLS_CHARS} are allowed",
            param="tools",
            code="tools_too_large",
        )
    if choice == "function" and not any(t.name == named for t in tools):
        raise InvalidRequestError(
            f"tool_choice names the function {named!r}, which is not among the tools",
            param="tool_choice.function.name",
            code="unknown_tool",
        )
    parallel = True if parallel_tool_calls is None else parallel_tool_calls
    return ToolRequest(tuple(tools), choice, named, parallel)


def _tool_choice(choice: str | NamedToolChoice | None) -> tuple[ToolChoice, str | None]:
    if choice is None:
        return "auto", None
    if isinstance(choice, str):
        if choice not in TOOL_CHOICES:
            raise InvalidRequestError(
                f"tool_choice must be one of {', '.join(TOOL_CHOICES)} or a named function",
                param="tool_choice",
            )
        return cast(ToolChoice, choice), None
    if choice.type != "function":
        raise InvalidRequestError("tool_choice.type must be 'function'", param="tool_choice.type")
    return "function", choice.function.name


def json_text(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def check_parameters(schema: dict[str, Any], param: str, *, strict: bool) -> None:
    """Refuse ``parameters`` that are not the JSON Schema of an arguments object: too large or deep (the
    bounds ``response_format`` has), not a JSON Schema of a known draft (its meta-schema), or of a type other
    than ``object``; for a ``strict`` tool, also a schema the engines cannot enforce (``check_subset``: a
    non-strict tool's call is constrained with such keywords ignored). The checks are ``response_format``'s,
    so both fields refuse the same schemas."""
    size = len(json.dumps(schema, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))
    check_bounds(schema, size, param=param)
    check_dialect(schema, param)
    kind = schema.get("type", "object")
    if kind != "object":
        raise InvalidRequestError(
            f"{param} must be the JSON Schema of an object (its 'type' is {kind!r})", param=param
        )
    if strict:
        check_subset(schema, param=param)


def grammar_for(tools: ToolRequest | None, response_format: ResponseFormat | None) -> str | None:
    """The grammar a reply that may call tools must match (``SamplingParams.grammar``, for the engines that
    constrain decoding); a 400 when the request also asks for a ``response_format``, which cannot be
    enforced together with it."""
    if tools is None:
        return None
    if response_format is not None and response_format.type != "text":
        raise InvalidRequestError(
            "response_format and tools cannot be used together on this server; send one of them",
            param="response_format",
            code="unsupported_parameter",
        )
    return tool_grammar(tools)


# -- the OpenAPI description ----------------------------------------------------------------------------

JSON = dict[str, Any]


def tool_schemas(text: JSON, ref: Callable[[str], JSON]) -> dict[str, JSON]:
    """The OpenAPI components of tool definitions and tool turns (``openapi.py`` adds them; ``ref`` makes a
    ``$ref`` to one of them, ``text`` is the schema of a prompt text)."""
    return {
        "FunctionDefinition": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "pattern": f"^{TOOL_NAME.pattern}$"},
                "description": {"type": ["string", "null"]},
                "parameters": {
                    "type": ["object", "null"],
                    "description": "the JSON Schema of the arguments object, checked against its draft's "
                    "meta-schema with response_format's bounds (a 400 naming the field otherwise)",
                },
                "strict": {"type": ["boolean", "null"]},
            },
        },
        "Tool": {
            "type": "object",
            "required": ["type", "function"],
            "properties": {"type": {"const": "function"}, "function": ref("FunctionDefinition")},
        },
        "ToolCall": {
            "type": "object",
            "required": ["id", "function"],
            "properties": {
                "id": {"type": "string"},
                "type": {"const": "function"},
                "function": {
                    "type": "object",
                    "required": ["name", "arguments"],
                    "properties": {
                        "name": {"type": "string"},
                        "arguments": {"type": "string", "description": "JSON text"},
                    },
                },
            },
        },
        "ToolMessage": {
            "type": "object",
            "description": "A tool's result; its tool_call_id must be the id of a call an earlier assistant "
            "turn of the same request made (a 400 `unknown_tool_call` otherwise)",
            "required": ["role", "tool_call_id"],
            "properties": {
                "role": {"const": "tool"},
                "tool_call_id": {"type": "string"},
                "content": {"anyOf": [{"type": "null"}, text, {"type": "array", "items": ref("TextPart")}]},
            },
        },
    }


def tool_fields(ref: Callable[[str], JSON]) -> dict[str, JSON]:
    """The OpenAPI description of the chat request's tool fields, with this module's limits."""
    return {
        "tools": {
            "anyOf": [
                {"type": "null"},
                {"type": "array", "maxItems": MAX_TOOLS, "uniqueItems": True, "items": ref("Tool")},
            ],
            "description": f"function tools, their names unique (a 400 `duplicate_tool_name` otherwise), at "
            f"most {MAX_TOOLS_CHARS} characters of JSON in all",
        },
        "tool_choice": {
            "anyOf": [
                {"type": "null"},
                {"enum": list(TOOL_CHOICES)},
                {
                    "type": "object",
                    "required": ["type", "function"],
                    "properties": {
                        "type": {"const": "function"},
                        "function": {
                            "type": "object",
                            "required": ["name"],
                            "properties": {"name": {"type": "string"}},
                        },
                    },
                    "description": "this function must be called: it must be one of `tools` (a 400 "
                    "`unknown_tool` otherwise)",
                },
            ]
        },
        "parallel_tool_calls": {"type": ["boolean", "null"]},
    }


# "required" or a named function asks for a call: the request must offer tools.
CALL_NEEDS_TOOLS: JSON = {
    "anyOf": [
        {"properties": {"tool_choice": {"enum": [None, "none", "auto"]}}},
        {"required": ["tools"], "properties": {"tools": {"type": "array", "minItems": 1}}},
    ]
}

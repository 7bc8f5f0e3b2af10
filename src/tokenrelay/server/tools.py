"""The tools of a chat request (issue 21): ``tools``, ``tool_choice``, ``parallel_tool_calls`` and the calls of
earlier assistant turns, checked into a ``ToolRequest`` (``_tools``).

Every hostile definition is a 400 naming the field: a type other than ``function``, a name outside
``[A-Za-z0-9_-]{1,64}`` or given twice (``duplicate_tool_name``), ``parameters`` that are not the JSON Schema
of an object, more than ``MAX_TOOLS`` tools (OpenAI's own limit) or more than ``MAX_TOOLS_CHARS`` of
definitions (each is part of the prompt), a ``tool_choice`` that asks for a call with no tools or names a
tool not offered (``unknown_tool``). ``requests.py`` checks the turns (a ``tool`` turn must answer a call an
earlier turn made: ``unknown_tool_call``).

``openapi.py`` describes the same fields with these limits.
"""

from __future__ import annotations

import json
import re
from typing import Any, cast

from pydantic import BaseModel, ConfigDict

from tokenrelay._errors import InvalidRequestError
from tokenrelay._tools import Tool, ToolChoice, ToolRequest

__all__ = [
    "MAX_TOOLS",
    "MAX_TOOLS_CHARS",
    "TOOL_CHOICES",
    "TOOL_NAME",
    "NamedToolChoice",
    "ToolBody",
    "ToolCallBody",
    "history_call",
    "tool_request",
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
            check_parameters(f.parameters, f"{where}.function.parameters")
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


def check_parameters(schema: dict[str, Any], param: str) -> None:
    """Refuse ``parameters`` that are not the JSON Schema of an arguments object."""
    kind = schema.get("type", "object")
    if kind != "object":
        raise InvalidRequestError(
            f"{param} must be the JSON Schema of an object (its 'type' is {kind!r})", param=param
        )
    check_schema(schema, param)


SCHEMA_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
SCHEMA_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames")
SCHEMA_NUMBERS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
SCHEMA_COUNTS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")
SCHEMA_STRINGS = ("description", "title", "$ref", "pattern", "format")
MAX_SCHEMA_DEPTH = 64


def check_schema(schema: object, param: str) -> None:
    """Refuse a value that is not a JSON Schema: the types of the keywords that hold schemas, types, counts
    and lists, checked over the whole schema (iteratively: it may nest deeply), at most ``MAX_SCHEMA_DEPTH``
    levels. (Until response_format's schema check lands, the one both fields will share.)"""
    todo: list[tuple[object, str, int]] = [(schema, param, 0)]
    while todo:
        node, where, depth = todo.pop()
        if isinstance(node, bool):
            continue  # true and false are schemas
        if not isinstance(node, dict):
            raise InvalidRequestError(f"{where} is not a JSON Schema (an object or a boolean)", param=param)
        if depth > MAX_SCHEMA_DEPTH:
            raise InvalidRequestError(f"{param} nests more than {MAX_SCHEMA_DEPTH} levels", param=param)

        def bad(keyword: str, what: str) -> InvalidRequestError:
            return InvalidRequestError(f"{where}.{keyword} must be {what}", param=param)  # noqa: B023

        kind = node.get("type")
        if kind is not None:
            kinds = kind if isinstance(kind, list) else [kind]
            if not kinds or not all(isinstance(k, str) and k in SCHEMA_TYPES for k in kinds):
                raise bad("type", f"one of {', '.join(sorted(SCHEMA_TYPES))}, or a list of them")
        for keyword in SCHEMA_MAPS:
            value = node.get(keyword)
            if value is not None:
                if not isinstance(value, dict):
                    raise bad(keyword, "an object of schemas")
                todo.extend((v, f"{where}.{keyword}.{k}", depth + 1) for k, v in value.items())
        for keyword in SCHEMA_LISTS:
            value = node.get(keyword)
            if value is not None:
                if not isinstance(value, list) or not value:
                    raise bad(keyword, "a non-empty list of schemas")
                todo.extend((v, f"{where}.{keyword}.{k}", depth + 1) for k, v in enumerate(value))
        for keyword in SCHEMA_ONE:
            if keyword in node:
                todo.append((node[keyword], f"{where}.{keyword}", depth + 1))
        required = node.get("required")
        if required is not None and (
            not isinstance(required, list) or not all(isinstance(r, str) for r in required)
        ):
            raise bad("required", "a list of property names")
        enum = node.get("enum")
        if enum is not None and not isinstance(enum, list):
            raise bad("enum", "a list")
        for keyword in SCHEMA_NUMBERS:
            value = node.get(keyword)
            if value is not None and (not isinstance(value, int | float) or isinstance(value, bool)):
                raise bad(keyword, "a number")
        for keyword in SCHEMA_COUNTS:
            value = node.get(keyword)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise bad(keyword, "a non-negative integer")
        for keyword in SCHEMA_STRINGS:
            value = node.get(keyword)
            if value is not None and not isinstance(value, str):
                raise bad(keyword, "a string")

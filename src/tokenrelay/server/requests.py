"""Request bodies for /v1/chat/completions and /v1/completions: bytes in, a validated ``Generation`` out.

Every way a body can be wrong ends in one ``InvalidRequestError`` whose ``param`` names the field, so the
server answers with an OpenAI-shaped 400 and keeps serving: invalid UTF-8, malformed JSON (``NaN`` and
``Infinity`` are not JSON, and nesting deep enough to exhaust the parser is refused, issue 12), a body that is
not an object, missing or mistyped fields, values out of range, text holding a lone surrogate (``"\ud800"``
is valid JSON but not Unicode text), a prompt over ``max_prompt_chars``, and fields we do not implement that
would change the result (``n`` ≠ 1, penalties, logprobs, legacy ``functions``, …) — those are refused, never
silently ignored. Fields that do not change the result (``user``, ``metadata``, ``store``, …) are accepted and
ignored.

Tools (issue 21, chat only): ``tools``, ``tool_choice``, ``parallel_tool_calls``, assistant turns with
``tool_calls`` and ``tool`` turns become a ``ToolRequest`` and a ``ChatWithTools`` prompt (``_tools``). Each
hostile definition is a 400 naming the field: a type other than ``function``, a name outside
``[A-Za-z0-9_-]{1,64}`` or given twice, ``parameters`` that are not a JSON Schema object, more than
``MAX_TOOLS`` tools or ``MAX_TOOLS_CHARS`` of definitions, a ``tool_choice`` naming a tool not offered, a
``tool`` turn whose ``tool_call_id`` answers no earlier call.

Types are strict, as OpenAI's are: ``"stream": "yes"``, ``"max_tokens": "5"`` or ``true`` are 400s naming the
field, not coerced (an integer is accepted where a number is expected, and a number with no fraction where
an integer is).

The pydantic models double as the OpenAPI schema of the two endpoints.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from tokenrelay._errors import InvalidRequestError
from tokenrelay._tools import Tool, ToolChoice, ToolRequest, chat_with_tools
from tokenrelay.engines.base import ChatMessage, Prompt, SamplingParams

__all__ = ["ChatCompletionBody", "CompletionBody", "Generation", "parse_generation"]

MAX_STOPS = 16
ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_TOOLS = 128  # OpenAI's own limit
MAX_TOOLS_CHARS = 131_072  # the whole tools array as compact JSON: every definition is part of the prompt
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
TOOL_CHOICES = ("none", "auto", "required")


# strict: no coercion from strings or booleans; allow_inf_nan: a non-finite number is refused by name.
_STRICT = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


class StreamOptions(BaseModel):
    model_config = _STRICT
    include_usage: bool = False
    # tokenrelay's extension (issue 13): each chunk says when the model step of each of its tokens ran and
    # when the chunk was sent (``_openai.timed_frame``). Like include_usage, it only applies to a stream.
    include_step_times: bool = False


class TextPart(BaseModel):
    model_config = _STRICT
    type: str
    text: str | None = None


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


class Message(BaseModel):
    model_config = _STRICT
    role: str
    content: str | list[TextPart] | None = None
    tool_calls: list[ToolCallBody] | None = None  # assistant turns
    tool_call_id: str | None = None  # tool turns: the call this result answers


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


def _integral(value: object) -> object:
    # JSON has one number type: 5.0 is the integer 5 (JSON Schema agrees); 5.5, "5" and true are not.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Integer = Annotated[int, BeforeValidator(_integral)]


class _Common(BaseModel):
    model_config = _STRICT
    model: str = ""  # empty or omitted: the model this server serves
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: Integer | None = None
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: Integer | None = Field(None, ge=-(2**63), le=2**63 - 1)
    stop: str | list[str] | None = None
    n: Integer = 1
    return_token_ids: bool = False  # vLLM's extension: token ids in every chunk, prompt ids in the first


class ChatCompletionBody(_Common):
    messages: list[Message]
    max_completion_tokens: Integer | None = None
    tools: list[ToolBody] | None = None
    tool_choice: str | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None


class CompletionBody(_Common):
    prompt: str | list[str]


# Fields that would change the reply if honoured. Each maps to the value that means "off".
_UNSUPPORTED: dict[str, tuple[object, ...]] = {
    "best_of": (None, 1),
    "echo": (None, False),
    "suffix": (None, ""),
    "logprobs": (None, False, 0),
    "top_logprobs": (None, 0),
    "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
    "logit_bias": (None, {}),
    "tools": (None, []),  # /v1/completions: chat declares them (ChatCompletionBody)
    "tool_choice": (None, "none", "auto"),
    "parallel_tool_calls": (None, True, False),
    "functions": (None, []),
    "function_call": (None, "none", "auto"),
    "response_format": (None, {"type": "text"}),
    "prediction": (None,),
    "modalities": (None, ["text"]),
    "audio": (None,),
}


@dataclass(frozen=True)
class Generation:
    """A validated request, in the terms the engine and the stream need."""

    kind: Literal["chat", "completion"]
    model: str
    prompt: Prompt
    params: SamplingParams
    stops: tuple[str, ...]
    stream: bool
    include_usage: bool
    return_token_ids: bool = False
    step_times: bool = False
    tools: ToolRequest | None = (
        None  # chat requests whose reply may call tools (tool_choice other than "none")
    )


def _loads(body: bytes) -> dict[str, Any]:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequestError(f"the request body is not valid UTF-8 (byte {exc.start})") from exc
    non_finite: list[str] = []

    def constant(name: str) -> float:  # NaN, Infinity, -Infinity: Python's json takes them, JSON does not
        non_finite.append(name)
        return math.nan

    try:
        data = json.loads(text, parse_constant=constant)
    except json.JSONDecodeError as exc:
        raise InvalidRequestError(f"the request body is not valid JSON: {exc}") from exc
    except (
        ValueError
    ) as exc:  # Python's limit on integer digits (4,300), not a JSON rule: no such number is sane
        raise InvalidRequestError("the request body holds an integer with too many digits") from exc
    except RecursionError as exc:  # ~1,000 nested arrays or objects (a 2 KB body) exhaust the parser
        raise InvalidRequestError("the request body is not valid JSON: nested too deeply") from exc
    if not isinstance(data, dict):
        raise InvalidRequestError("the request body must be a JSON object")
    if non_finite:
        param = _path_of_non_finite(data)
        where = f" (in {param})" if param else ""
        raise InvalidRequestError(
            f"the request body is not valid JSON: {non_finite[0]} is not a JSON number{where}", param=param
        )
    return data


def _path_of_non_finite(data: dict[str, Any]) -> str | None:
    """The dotted path of the first non-finite number in ``data`` (iterative: the data may nest deeply)."""
    todo: list[tuple[str, object]] = [(str(k), v) for k, v in data.items()]
    while todo:
        path, value = todo.pop(0)
        if isinstance(value, float) and not math.isfinite(value):
            return path
        if isinstance(value, dict):
            todo.extend((f"{path}.{k}", v) for k, v in value.items())
        elif isinstance(value, list):
            todo.extend((f"{path}.{i}", v) for i, v in enumerate(value))
    return None


def _check_text(value: str, param: str) -> None:
    """Refuse a string that is not Unicode text: a lone surrogate cannot be tokenized, written or logged."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRequestError(
            f"{param} holds a lone surrogate (U+{ord(value[exc.start]):04X} at index {exc.start}); "
            "text must be valid Unicode",
            param=param,
        ) from exc


def _step_into(node: object, step: int | str) -> tuple[bool, object]:
    if isinstance(node, dict) and step in node:
        return True, node[step]
    if isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node):
        return True, node[step]
    return False, node


def _from_validation(exc: ValidationError, data: dict[str, Any]) -> InvalidRequestError:
    err = exc.errors()[0]
    # pydantic's location also names the union member it tried ("stop.str", "content.list[TextPart].0"):
    # keep only the steps that are keys and indices of the request itself, and the name of a missing field.
    loc = err["loc"]
    path: list[str] = []
    node: object = data
    for i, step in enumerate(loc):
        found, node = _step_into(node, step)
        if found or (err["type"] == "missing" and i == len(loc) - 1):
            path.append(str(step))
    param = ".".join(path) or None
    message = f"{param}: {err['msg']}" if param else err["msg"]
    return InvalidRequestError(message, param=param)


def _is_off(value: object, off: tuple[object, ...]) -> bool:
    # As JSON compares: true is not 1, false is not 0 (Python's == says they are).
    return any(value == o and isinstance(value, bool) == isinstance(o, bool) for o in off)


def _refuse_unsupported(data: dict[str, Any], n: int) -> None:
    for field, off in _UNSUPPORTED.items():
        if field in data and not _is_off(data[field], off):
            raise InvalidRequestError(
                f"'{field}' is not supported by this server (it would change the reply); remove it",
                param=field,
                code="unsupported_parameter",
            )
    if n != 1:
        raise InvalidRequestError("only n=1 is supported", param="n", code="unsupported_parameter")


def _stops(stop: str | list[str] | None) -> tuple[str, ...]:
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if len(stops) > MAX_STOPS:
        raise InvalidRequestError(f"at most {MAX_STOPS} stop strings are allowed", param="stop")
    if any(s == "" for s in stops):
        raise InvalidRequestError("stop strings must not be empty", param="stop")
    for s in stops:
        _check_text(s, "stop")
    return tuple(stops)


def _content(m: Message, i: int) -> str:
    if isinstance(m.content, list):
        texts = []
        for j, part in enumerate(m.content):
            if part.type != "text" or part.text is None:
                raise InvalidRequestError(
                    f"messages[{i}].content[{j}]: only text parts are supported",
                    param=f"messages.{i}.content.{j}",
                    code="unsupported_parameter",
                )
            _check_text(part.text, f"messages.{i}.content.{j}.text")
            texts.append(part.text)
        return "".join(texts)
    content = m.content or ""
    _check_text(content, f"messages.{i}.content")
    return content


def _messages(messages: list[Message], tools: ToolRequest | None) -> Sequence[ChatMessage]:
    """Plain turns, or a ``ChatWithTools`` when the request has tools or the conversation tool calls."""
    if not messages:
        raise InvalidRequestError("messages must not be empty", param="messages")
    out: list[ChatMessage] = []
    turns: list[dict[str, object]] = []  # OpenAI-shaped, for templates that take tools
    calls: set[str] = set()  # ids of the calls made so far: a tool turn answers one of them
    with_tools = tools is not None
    for i, m in enumerate(messages):
        if m.role not in ROLES:
            raise InvalidRequestError(
                f"messages[{i}].role must be one of {', '.join(ROLES)}", param=f"messages.{i}.role"
            )
        content = _content(m, i)
        role = "system" if m.role == "developer" else m.role
        out.append({"role": role, "content": content})
        turn: dict[str, object] = {"role": role, "content": content}
        if m.tool_calls is not None and m.tool_calls:
            if role != "assistant":
                raise InvalidRequestError(
                    f"messages[{i}].tool_calls: only assistant turns make tool calls",
                    param=f"messages.{i}.tool_calls",
                )
            turn["content"] = content or None
            turn["tool_calls"] = [_history_call(c, i, j) for j, c in enumerate(m.tool_calls)]
            calls.update(c.id for c in m.tool_calls)
            with_tools = True
        if role == "tool":
            param = f"messages.{i}.tool_call_id"
            if m.tool_call_id is None:
                raise InvalidRequestError(f"messages[{i}]: a tool turn needs its tool_call_id", param=param)
            if m.tool_call_id not in calls:
                raise InvalidRequestError(
                    f"messages[{i}].tool_call_id {m.tool_call_id!r} answers no tool call of an earlier "
                    "assistant turn",
                    param=param,
                    code="unknown_tool_call",
                )
            turn["tool_call_id"] = m.tool_call_id
            with_tools = True
        turns.append(turn)
    return chat_with_tools(turns, tools) if with_tools else out


def _history_call(call: ToolCallBody, i: int, j: int) -> dict[str, object]:
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


def _tool_request(req: ChatCompletionBody) -> ToolRequest | None:
    """The request's tools, every definition checked; ``None`` when it offers none."""
    choice, named = _tool_choice(req.tool_choice)
    if not req.tools:
        if choice in ("required", "function"):
            raise InvalidRequestError(
                "tool_choice asks for a tool call, but the request offers no tools", param="tool_choice"
            )
        return None
    if len(req.tools) > MAX_TOOLS:
        raise InvalidRequestError(
            f"{len(req.tools)} tools; at most {MAX_TOOLS} are allowed", param="tools", code="too_many_tools"
        )
    tools: list[Tool] = []
    for i, body in enumerate(req.tools):
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
    parallel = True if req.parallel_tool_calls is None else req.parallel_tool_calls
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


def _validate(body: bytes, model: type[_Common]) -> _Common:
    """The body as ``model`` (its undeclared fields in ``model_extra``), refused as the long way refuses."""
    # One pass from bytes to the model (pydantic's JSON parser), not json.loads and then a walk of the dicts:
    # this is on every request's path. A body it refuses, or one that may hold a non-finite number (which it
    # would take in an ignored field), goes the long way, whose errors name the field. Its parser refuses
    # what json.loads lets through only to be refused later (a lone surrogate's escape, an integer of
    # thousands of digits), so both ways accept the same bodies (tests/test_server_requests.py).
    if b"NaN" not in body and b"Infinity" not in body:
        try:
            req = model.model_validate_json(body)
        except (ValueError, RecursionError):  # ValidationError is a ValueError
            pass
        else:
            return req
    return _validate_loaded(body, model)


def _validate_loaded(body: bytes, model: type[_Common]) -> _Common:
    """The long way: ``json.loads``, then the model; every refusal names what is wrong."""
    data = _loads(body)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _from_validation(exc, data) from exc
    except RecursionError as exc:  # deep nesting in a field the validator walks
        raise InvalidRequestError("the request body is nested too deeply") from exc


def parse_generation(
    body: bytes,
    kind: Literal["chat", "completion"],
    *,
    max_tokens_limit: int,
    default_max_tokens: int,
    max_prompt_chars: int | None = None,
) -> Generation:
    """Validate a request body; raise ``InvalidRequestError`` (400) naming the field that is wrong."""
    req = _validate(body, ChatCompletionBody if kind == "chat" else CompletionBody)
    _check_text(req.model, "model")
    _refuse_unsupported(req.model_extra or {}, req.n)
    limits = {"max_tokens": req.max_tokens}
    if isinstance(req, ChatCompletionBody):  # the newer name wins when both are given
        limits["max_completion_tokens"] = req.max_completion_tokens
    for param, value in limits.items():  # each is checked, used or not
        if value is not None and value < 1:
            raise InvalidRequestError(f"{param} must be at least 1", param=param)
        if value is not None and value > max_tokens_limit:
            raise InvalidRequestError(f"{param} must be at most {max_tokens_limit}", param=param)
    max_tokens = limits.get("max_completion_tokens") or req.max_tokens
    if max_tokens is None:
        max_tokens = min(default_max_tokens, max_tokens_limit)
    prompt: Prompt
    tools: ToolRequest | None = None
    if isinstance(req, ChatCompletionBody):
        tools = _tool_request(req)
        turns = _messages(req.messages, tools)
        prompt = turns
        size, prompt_param = sum(len(m["content"]) for m in turns), "messages"
        if tools is not None and tools.choice == "none":
            tools = None  # the reply calls nothing: no extraction, no constraint
    else:
        assert isinstance(req, CompletionBody)
        if isinstance(req.prompt, list):
            if len(req.prompt) != 1:
                raise InvalidRequestError(
                    "prompt must be one string (batches of prompts are not supported)", param="prompt"
                )
            prompt = req.prompt[0]
        else:
            prompt = req.prompt
        _check_text(prompt, "prompt")
        size, prompt_param = len(prompt), "prompt"
    if max_prompt_chars is not None and size > max_prompt_chars:
        # Checked before tokenizing: the cap bounds the CPU one request can cost (issue 12).
        raise InvalidRequestError(
            f"the prompt is {size} characters; this server accepts at most {max_prompt_chars} "
            "(max_prompt_chars)",
            param=prompt_param,
            code="prompt_too_long",
        )
    params = SamplingParams(
        max_tokens=max_tokens, temperature=req.temperature, top_p=req.top_p, seed=req.seed
    )
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    step_times = bool(req.stream and req.stream_options and req.stream_options.include_step_times)
    return Generation(
        kind,
        req.model,
        prompt,
        params,
        _stops(req.stop),
        req.stream,
        include_usage,
        req.return_token_ids,
        step_times,
        tools,
    )

"""Request bodies for ``POST /v1/responses`` (the OpenAI Responses API): bytes in, a validated ``Generation`` out.

The body is read as chat's is (``requests.py``: strict types, every refusal a 400 whose ``param`` names the
field, ``NaN`` and lone surrogates refused), and turned into the same prompt, tools and constraint (the input
items and tools by ``responses_input.py``):

- ``input``: a string (one user turn) or a list of items: ``message`` (``type`` may be left out; roles
  ``user``, ``assistant``, ``system``, ``developer``; ``content`` a string or ``input_text`` / ``output_text``
  parts), ``function_call`` (an assistant turn's call) and ``function_call_output`` (its result, whose
  ``call_id`` must answer an earlier call: ``unknown_tool_call``); ``reasoning`` items passed back are taken
  and not shown to the model (templates drop earlier reasoning too). ``instructions`` is the system turn.
- ``tools`` in the Responses API's flat shape (``{"type": "function", "name", "description", "parameters",
  "strict"}``), checked as chat's are (``tools.py``); OpenAI's built-in tools that this server cannot run
  (``BUILT_IN_TOOLS``: ``web_search``, ``file_search``, ``mcp``, Codex's ``namespace`` and ``custom`` tools, …)
  are left out of what the model sees, and the response names them (``tokenrelay.tools_left_out``); a type
  OpenAI does not define is a 400. ``tool_choice``: ``auto``, ``none``, ``required`` or
  ``{"type": "function", "name"}``.
- ``text.format``: ``text``, ``json_object`` or ``json_schema`` (``name``, ``schema``, ``strict``), the same
  constraint as chat's ``response_format``.
- ``max_output_tokens``, ``temperature``, ``top_p``, ``parallel_tool_calls``; ``reasoning``, ``metadata``,
  ``user``, ``store``, ``include``, ``truncation: "disabled"``, ``prompt_cache_key``, ``safety_identifier``,
  ``service_tier`` and ``stream_options`` are taken without changing the reply (``reasoning``, ``metadata``,
  ``user`` and ``store`` are echoed in the response, as OpenAI echoes them).
- Refused by name (``UNSUPPORTED``): ``background: true``, ``conversation``, ``prompt`` templates,
  ``top_logprobs``, ``truncation: "auto"``, ``max_tool_calls`` and input items or parts of another type.

``previous_response_id`` is resolved by the store (``responses_store.py``), which puts the stored conversation
before this request's input; :func:`assemble` builds the prompt either way. The ``Generation``'s ``extra`` is a
:class:`ResponsesRequest`: what the writer echoes, and what the store keeps.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, Field

from tokenrelay._errors import InvalidRequestError
from tokenrelay._reply import ReplyWriter
from tokenrelay._tools import ToolRequest
from tokenrelay.engines.base import Prompt, SamplingParams
from tokenrelay.wire._responses import ResponsesReplyWriter

from .bodies import STRICT as _STRICT
from .bodies import Integer
from .bodies import check_text as _check_text
from .bodies import is_off as _is_off
from .bodies import validate as _validate
from .requests import Generation
from .response_format import JSONSchemaFormat, ResponseFormat, constraint_from
from .responses_input import BUILT_IN_TOOLS, ROLES, build_prompt, tools_of, turns_of
from .tools import CALL_NEEDS_TOOLS, MAX_TOOLS, TOOL_NAME, grammar_for

__all__ = [
    "UNSUPPORTED",
    "ResponsesBody",
    "ResponsesRequest",
    "assemble",
    "parse_responses",
    "responses_writer",
]

#: Fields that would change the reply if honoured, and the values that mean "off".
UNSUPPORTED: dict[str, tuple[object, ...]] = {
    "background": (None, False),
    "conversation": (None,),
    "prompt": (None,),
    "top_logprobs": (None, 0),
    "truncation": (None, "disabled"),
    "max_tool_calls": (None,),
    "seed": (None,),
}


class TextFormat(BaseModel):
    model_config = _STRICT
    type: str
    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] | bool | None = Field(None, alias="schema")
    strict: bool | None = None


class TextConfig(BaseModel):
    model_config = _STRICT
    format: TextFormat | None = None
    verbosity: str | None = None


class ResponsesBody(BaseModel):
    model_config = _STRICT
    model: str = ""
    input: str | list[Any]
    instructions: str | None = None
    max_output_tokens: Integer | None = None
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: dict[str, Any] | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    store: bool | None = None
    previous_response_id: str | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    include: list[str] | None = None


@dataclass
class ResponsesRequest:
    """What the Responses API's writer and store need of a request (``Generation.extra``)."""

    echo: dict[str, object]  # the response object's fields that restate the request
    instructions: str | None
    turns: list[dict[str, object]]  # this request's input, OpenAI chat-shaped (tool_calls, tool turns)
    calls: list[tuple[str, str]]  # (call_id, param) of each function_call_output, checked against history
    tools: ToolRequest | None
    store: bool
    previous_response_id: str | None
    history: Sequence[Mapping[str, object]] = ()  # the stored conversation before ``turns``
    #: Called with the final response object (set by the store when ``store`` is true).
    keep: Callable[[dict[str, Any]], None] | None = None
    left_out: list[str] = field(default_factory=list)


def _as_text_format(exc: InvalidRequestError) -> InvalidRequestError:
    """``exc``, raised by ``response_format``'s checks, with the field named as the Responses API names it."""

    def renamed(text: str) -> str:
        return text.replace("response_format.json_schema", "text.format").replace(
            "response_format", "text.format"
        )

    param = renamed(exc.param) if exc.param else "text.format"
    return InvalidRequestError(renamed(exc.message), param=param, code=exc.code)


def assemble(request: ResponsesRequest) -> Prompt:
    """The request's prompt, its stored conversation (``history``) first."""
    return build_prompt(request.instructions, request.history, request.turns, request.calls, request.tools)


def parse_responses(
    body: bytes,
    kind: str,
    /,
    *,
    max_tokens_limit: int,
    default_max_tokens: int,
    max_prompt_chars: int | None = None,
) -> Generation:
    """Validate a Responses API body; raise ``InvalidRequestError`` (400) naming the field that is wrong."""
    req = _validate(body, ResponsesBody)
    _check_text(req.model, "model")
    extra = req.model_extra or {}
    for name, off in UNSUPPORTED.items():
        if name in extra and not _is_off(extra[name], off):
            raise InvalidRequestError(
                f"{name}={json.dumps(extra[name])[:200]} is not supported by this server; remove it",
                param=name,
                code="unsupported_parameter",
            )
    max_tokens = req.max_output_tokens
    if max_tokens is not None and not 1 <= max_tokens <= max_tokens_limit:
        raise InvalidRequestError(
            f"max_output_tokens must be between 1 and {max_tokens_limit}", param="max_output_tokens"
        )
    if req.instructions is not None:
        _check_text(req.instructions, "instructions")
    tools, tool_echo, left_out = tools_of(req.tools, req.tool_choice, req.parallel_tool_calls)
    turns, outputs = turns_of(req.input)
    fmt = req.text.format if req.text is not None else None
    response_format: ResponseFormat | None = None
    if fmt is not None:
        if fmt.type not in ("text", "json_object", "json_schema"):
            raise InvalidRequestError(
                f"text.format.type {fmt.type!r} must be one of text, json_object, json_schema",
                param="text.format.type",
            )
        spec = None
        if fmt.type == "json_schema":
            if fmt.name is None:
                raise InvalidRequestError(
                    "text.format.name is required for json_schema", param="text.format.name"
                )
            spec = JSONSchemaFormat(
                name=fmt.name, description=fmt.description, schema=fmt.schema_, strict=fmt.strict
            )
        response_format = ResponseFormat(type=fmt.type, json_schema=spec)  # type: ignore[arg-type]  # (checked above)
    try:
        constraint = constraint_from(response_format)
        grammar = grammar_for(
            tools if tools is not None and tools.choice != "none" else None, response_format
        )
    except InvalidRequestError as exc:
        raise _as_text_format(exc) from exc
    store = True if req.store is None else req.store
    echo: dict[str, object] = {
        "instructions": req.instructions,
        "max_output_tokens": req.max_output_tokens,
        "metadata": req.metadata or {},
        "parallel_tool_calls": True if req.parallel_tool_calls is None else req.parallel_tool_calls,
        "previous_response_id": req.previous_response_id,
        "reasoning": {"effort": None, "summary": None, **(req.reasoning or {})},
        "store": store,
        "temperature": 1.0 if req.temperature is None else req.temperature,
        "text": {
            "format": fmt.model_dump(by_alias=True, exclude_none=True)
            if fmt is not None
            else {"type": "text"}
        },
        "tool_choice": req.tool_choice if req.tool_choice is not None else "auto",
        "tools": tool_echo,
        "top_p": 1.0 if req.top_p is None else req.top_p,
        "user": req.user,
    }
    if left_out:
        echo["tokenrelay"] = {"tools_left_out": left_out}
    request = ResponsesRequest(
        echo, req.instructions, turns, outputs, tools, store, req.previous_response_id, left_out=left_out
    )
    # With previous_response_id the store puts the conversation first (responses_store.resolve) and builds
    # the prompt then; call outputs are checked there, against it.
    prompt: Prompt = [] if req.previous_response_id is not None else assemble(request)
    size = sum(len(str(t.get("content") or "")) for t in turns) + len(req.instructions or "")
    if max_prompt_chars is not None and size > max_prompt_chars:
        raise InvalidRequestError(
            f"the prompt is {size} characters; this server accepts at most {max_prompt_chars} (max_prompt_chars)",
            param="input",
            code="prompt_too_long",
        )
    params = SamplingParams(
        max_tokens=max_tokens if max_tokens is not None else min(default_max_tokens, max_tokens_limit),
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        constraint=constraint,
        grammar=grammar,
    )
    return Generation(
        kind,
        req.model,
        prompt,
        params,
        (),
        req.stream,
        False,
        tools=tools if tools is not None and tools.choice != "none" else None,
        extra=request,
        thinking_budget=0 if (req.reasoning or {}).get("effort") == "none" else None,
        wants_thinking=(req.reasoning or {}).get("effort") not in (None, "none"),
    )


class _Run(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def gen(self) -> Generation: ...
    @property
    def created(self) -> int: ...


def responses_writer(run: _Run) -> ReplyWriter:
    """The writer of a ``/v1/responses`` reply (``generation.WRITERS``)."""
    gen = run.gen
    request = gen.extra
    assert isinstance(request, ResponsesRequest)
    return ResponsesReplyWriter(
        id=run.id, model=gen.model, created_at=run.created, echo=request.echo, on_end=request.keep
    )


def openapi_schemas(
    text: dict[str, Any], common: dict[str, Any], ref: Callable[[str], Any]
) -> dict[str, Any]:
    """The OpenAPI components of a ``/v1/responses`` body (``openapi.py`` adds them): ``text`` is the schema of
    a prompt text, ``common`` the schemas of the fields shared with chat (``model``, ``stream``, ...)."""
    nullable_text = {"anyOf": [{"type": "null"}, text]}
    return {
        "ResponsesTextPart": {
            "type": "object",
            "required": ["type", "text"],
            "properties": {"type": {"enum": ["input_text", "output_text"]}, "text": text},
        },
        "ResponsesMessage": {
            "type": "object",
            "required": ["role", "content"],
            "properties": {
                "type": {"const": "message"},
                "role": {"enum": list(ROLES)},
                "content": {"anyOf": [text, {"type": "array", "items": ref("ResponsesTextPart")}]},
            },
        },
        "ResponsesTool": {
            "type": "object",
            "required": ["type", "name"],
            "description": "a function tool in the Responses API's flat shape; OpenAI's built-in tool types "
            f"({', '.join(sorted(BUILT_IN_TOOLS))}) are also taken, left out of the prompt and named in the "
            "response's `tokenrelay.tools_left_out`",
            "properties": {
                "type": {"const": "function"},
                "name": {"type": "string", "pattern": f"^{TOOL_NAME.pattern}$"},
                "description": nullable_text,
                "parameters": {
                    "type": ["object", "null"],
                    "description": "the JSON Schema of the arguments object, checked as chat's tools' are",
                },
                "strict": {"type": ["boolean", "null"]},
            },
        },
        "ResponsesRequest": {
            "type": "object",
            "required": ["input"],
            "properties": {
                "model": common["model"],
                "stream": common["stream"],
                "input": {
                    "anyOf": [text, {"type": "array", "minItems": 1, "items": ref("ResponsesMessage")}],
                    "description": "a user turn, or input items: messages, and `function_call`, "
                    "`function_call_output` and `reasoning` items",
                },
                "instructions": nullable_text,
                "max_output_tokens": common["max_tokens"],
                "temperature": {"type": ["number", "null"], "minimum": 0, "maximum": 2},
                "top_p": {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 1},
                "tools": {
                    "anyOf": [
                        {"type": "null"},
                        {"type": "array", "maxItems": MAX_TOOLS, "items": ref("ResponsesTool")},
                    ],
                    "description": "function tools, their names unique (a 400 `duplicate_tool_name` otherwise)",
                },
                "tool_choice": {
                    "anyOf": [
                        {"enum": [None, "none", "auto", "required"]},
                        {
                            "type": "object",
                            "required": ["type", "name"],
                            "properties": {"type": {"const": "function"}, "name": {"type": "string"}},
                            "description": "this function must be called: it must be one of `tools` (a 400 "
                            "`unknown_tool` otherwise)",
                        },
                    ]
                },
                "parallel_tool_calls": {"type": ["boolean", "null"]},
                "text": {
                    "anyOf": [
                        {"type": "null"},
                        {
                            "type": "object",
                            "properties": {
                                "format": {
                                    "anyOf": [
                                        {"type": "null"},
                                        {
                                            "type": "object",
                                            "required": ["type"],
                                            "properties": {"type": {"enum": ["text", "json_object"]}},
                                        },
                                    ],
                                    "description": "also `json_schema` with `name`, `schema` and `strict`: "
                                    "the reply is constrained as chat's `response_format` is",
                                }
                            },
                        },
                    ]
                },
                "store": {"type": ["boolean", "null"]},
                "previous_response_id": {
                    "type": "null",
                    "description": "the id of a stored response to continue (a 404 when it is not stored)",
                },
                "metadata": {"type": ["object", "null"], "additionalProperties": {"type": "string"}},
                "user": {"type": ["string", "null"]},
                "reasoning": {"type": ["object", "null"]},
                "include": {"type": ["array", "null"], "items": {"type": "string"}},
                "stream_options": {"type": ["object", "null"]},
                "background": {"enum": [None, False]},
                "truncation": {"enum": [None, "disabled"]},
                "top_logprobs": {"enum": [None, 0]},
                **{name: {"type": "null"} for name in ("conversation", "prompt", "max_tool_calls", "seed")},
            },
            **CALL_NEEDS_TOOLS,
        },
    }

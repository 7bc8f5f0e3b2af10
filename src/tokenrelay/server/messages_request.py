"""Request bodies of the Anthropic Messages API (``POST /v1/messages`` and ``/v1/messages/count_tokens``):
bytes in, a validated ``Generation`` out, in the same terms as a chat request's (``requests.py``).

A conversation becomes the chat endpoint's turns, so one chat template and one tool machinery serve both
dialects: ``system`` (a string or text blocks) is the system turn; a user message's ``text`` blocks are a user
turn and each ``tool_result`` block a ``tool`` turn answering its ``tool_use_id`` (its content a string or text
blocks; with ``is_error`` the text is prefixed ``"Error: "``); an assistant message's ``text`` blocks are its
content and its ``tool_use`` blocks its calls (``input`` as the arguments). ``thinking`` and
``redacted_thinking`` blocks of earlier assistant turns are dropped, as Anthropic drops them from the context.
A ``system`` message inside ``messages`` (a beta Claude Code uses, ``mid-conversation-system``) is a system
turn where it stands. The blocks are read in ``messages_turns.py``.
``tools`` (``name``, ``description``, ``input_schema``) and ``tool_choice`` (``auto``, ``any``, ``tool`` with
``name``, ``none``; ``disable_parallel_tool_use``) go through ``tools.tool_request``, so every definition is
checked as a chat request's is (errors name the Messages field: ``tools.0.input_schema``).

Every way a body can be wrong is one ``InvalidRequestError`` (an Anthropic-shaped 400) naming the field:
``max_tokens`` missing (Anthropic requires it), an empty ``messages``, a role other than ``user`` and
``assistant``, a block type this server cannot take (``image``, ``document``: named; any other unknown type),
a ``tool_result`` for no earlier ``tool_use``, a ``tool_use`` id given twice, a server tool (``type``
``web_search_20250305`` and the like: it cannot run here), ``thinking`` of the wrong shape (``budget_tokens``
an integer of at least 1024 and below ``max_tokens``, as Anthropic requires), ``temperature`` outside 0..1
(Anthropic's range), ``top_k`` other than 0 and 1 (the engines take no ``top_k``; ``1`` is greedy and becomes
``temperature: 0``). ``cache_control``, ``metadata``, ``service_tier``, ``context_management``, ``output_config.effort`` and the
headers
``anthropic-version`` / ``anthropic-beta`` do not change a reply here and are ignored; ``thinking`` is checked
and otherwise left to the reasoning parser (a model that thinks streams ``thinking`` blocks either way).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from tokenrelay._errors import InvalidRequestError
from tokenrelay._tools import ToolRequest, chat_with_tools
from tokenrelay.engines.base import ChatMessage, SamplingParams

from .bodies import STRICT as _STRICT
from .bodies import Integer
from .bodies import check_text as _check_text
from .bodies import validate as _validate
from .messages_turns import MessageParam, conversation_turns
from .requests import Generation, _stops
from .tools import FunctionBody, NamedFunction, NamedToolChoice, ToolBody, grammar_for, tool_request

__all__ = ["CountTokensBody", "MessagesBody", "parse_count_tokens", "parse_messages"]


#: Top-level fields that would change the reply: refused when set.
_UNSUPPORTED = ("mcp_servers", "container")
MIN_THINKING_BUDGET = 1024  # Anthropic's own minimum


class ToolParam(BaseModel):
    model_config = _STRICT
    name: str
    type: str | None = None
    description: str | None = None
    input_schema: dict[str, Any] | None = None


class ToolChoiceParam(BaseModel):
    model_config = _STRICT
    type: str
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class ThinkingParam(BaseModel):
    model_config = _STRICT
    type: str
    budget_tokens: Integer | None = None


class CountTokensBody(BaseModel):
    model_config = _STRICT
    model: str
    messages: list[MessageParam]
    system: str | list[dict[str, Any]] | None = None
    tools: list[ToolParam] | None = None
    tool_choice: ToolChoiceParam | None = None
    thinking: ThinkingParam | None = None


class MessagesBody(CountTokensBody):
    max_tokens: Integer
    stream: bool = False
    stop_sequences: list[str] | None = None
    temperature: float = Field(1.0, ge=0.0, le=1.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: Integer | None = Field(None, ge=0)
    metadata: dict[str, Any] | None = None


@dataclass(frozen=True)
class MessagesExtra:
    """What the Messages writer needs of the request (``Generation.extra``): nothing yet beyond the
    ``Generation``; kept so the parser and writer can grow without touching the shared types."""

    thinking: bool = False


def _tools(body: CountTokensBody) -> ToolRequest | None:
    bodies: list[ToolBody] = []
    for i, tool in enumerate(body.tools or ()):
        if tool.type not in (None, "custom"):
            raise InvalidRequestError(
                f"tools.{i}: the server tool {tool.type[:80]!r} ({tool.name[:80]!r}) cannot run on this server; "
                "offer it as a custom tool with an input_schema",
                param=f"tools.{i}.type",
                code="unsupported_tool",
            )
        if tool.input_schema is None:
            raise InvalidRequestError(f"tools.{i}.input_schema is required", param=f"tools.{i}.input_schema")
        function = FunctionBody(name=tool.name, description=tool.description, parameters=tool.input_schema)
        bodies.append(ToolBody(type="function", function=function))
    choice: str | NamedToolChoice | None = None
    parallel: bool | None = None
    tc = body.tool_choice
    if tc is not None:
        if tc.type == "tool":
            if tc.name is None:
                raise InvalidRequestError(
                    "tool_choice.name is required for type 'tool'", param="tool_choice.name"
                )
            choice = NamedToolChoice(type="function", function=NamedFunction(name=tc.name))
        elif tc.type in ("auto", "any", "none"):
            choice = {"auto": "auto", "any": "required", "none": "none"}[tc.type]
        else:
            raise InvalidRequestError(
                "tool_choice.type must be one of auto, any, tool, none", param="tool_choice.type"
            )
        if tc.disable_parallel_tool_use:
            parallel = False
    try:
        return tool_request(bodies or None, choice, parallel)
    except InvalidRequestError as exc:
        raise _messages_names(exc) from None


def _messages_names(exc: InvalidRequestError) -> InvalidRequestError:
    """An error of the chat tool machinery with the Messages API's field names."""

    def rename(text: str) -> str:
        for old, new in (
            (".function.parameters", ".input_schema"),
            (".function.description", ".description"),
            (".function.name", ".name"),
            ("tool_choice.function.name", "tool_choice.name"),
            ("'required'", "'any'"),
        ):
            text = text.replace(old, new)
        return text

    return InvalidRequestError(
        rename(exc.message), param=rename(exc.param) if exc.param else None, code=exc.code
    )


def _check_thinking(thinking: ThinkingParam | None, max_tokens: int | None) -> bool:
    if thinking is None or thinking.type == "disabled":
        return False
    if thinking.type not in ("enabled", "adaptive", "between_tools"):
        raise InvalidRequestError(
            "thinking.type must be 'enabled', 'adaptive', 'between_tools' or 'disabled'",
            param="thinking.type",
        )
    if thinking.type == "enabled":
        budget = thinking.budget_tokens
        if budget is None or budget < MIN_THINKING_BUDGET:
            raise InvalidRequestError(
                f"thinking.budget_tokens: an integer of at least {MIN_THINKING_BUDGET} is required",
                param="thinking.budget_tokens",
            )
        if max_tokens is not None and budget >= max_tokens:
            raise InvalidRequestError(
                "thinking.budget_tokens must be less than max_tokens", param="thinking.budget_tokens"
            )
    return True


def _thinking_budget(thinking: ThinkingParam | None) -> int | None:
    """The reply's thinking budget (issue 31: the embedded engine writes the closing tag past it): the given
    ``budget_tokens``, none when thinking is off (``0``), else the server's default."""
    if thinking is None:
        return None
    if thinking.type == "disabled":
        return 0
    return thinking.budget_tokens if thinking.type == "enabled" else None


def _prompt(
    body: CountTokensBody, tools: ToolRequest | None, max_prompt_chars: int | None
) -> Sequence[ChatMessage]:
    turns, history = conversation_turns(body.system, body.messages)
    if max_prompt_chars is not None:
        size = sum(len(t["content"] or "") for t in turns)
        if size > max_prompt_chars:
            raise InvalidRequestError(
                f"the prompt is {size} characters; this server accepts at most {max_prompt_chars} "
                "(max_prompt_chars)",
                param="messages",
                code="prompt_too_long",
            )
    if tools is not None or history:
        return chat_with_tools(turns, tools)
    return [{"role": t["role"], "content": t["content"]} for t in turns]


def _refuse_unsupported(extra: dict[str, Any]) -> None:
    output = extra.get("output_config")
    if isinstance(output, dict) and output.get("format") is not None:
        raise InvalidRequestError(
            "output_config.format is not supported by this server's Messages API (use response_format on "
            "/v1/chat/completions); remove it",
            param="output_config.format",
            code="unsupported_parameter",
        )
    for name in _UNSUPPORTED:
        if extra.get(name):
            raise InvalidRequestError(
                f"'{name}' is not supported by this server (it would change the reply); remove it",
                param=name,
                code="unsupported_parameter",
            )


def parse_messages(
    body: bytes,
    kind: str,
    /,
    *,
    max_tokens_limit: int,
    default_max_tokens: int,
    max_prompt_chars: int | None = None,
) -> Generation:
    """A ``/v1/messages`` body as a ``Generation``; ``InvalidRequestError`` (400) naming the field otherwise."""
    req = _validate(body, MessagesBody)
    _check_text(req.model, "model")
    _refuse_unsupported(req.model_extra or {})
    if req.max_tokens < 1:
        raise InvalidRequestError("max_tokens must be at least 1", param="max_tokens")
    if req.max_tokens > max_tokens_limit:
        raise InvalidRequestError(f"max_tokens must be at most {max_tokens_limit}", param="max_tokens")
    thinking = _check_thinking(req.thinking, req.max_tokens)
    temperature = req.temperature
    if req.top_k == 1:
        temperature = 0.0  # the most likely token only: greedy
    elif req.top_k is not None and req.top_k != 0:
        raise InvalidRequestError(
            "top_k is not supported by this server's engines (only 1: greedy)",
            param="top_k",
            code="unsupported_parameter",
        )
    tools = _tools(req)
    prompt = _prompt(req, tools, max_prompt_chars)
    if tools is not None and tools.choice == "none":
        tools = None  # the reply calls nothing: no extraction, no constraint
    params = SamplingParams(
        max_tokens=req.max_tokens,
        temperature=temperature,
        top_p=req.top_p,
        grammar=grammar_for(tools, None),
    )
    stops = _stops(req.stop_sequences)
    return Generation(
        kind,
        req.model,
        prompt,
        params,
        stops,
        req.stream,
        True,
        tools=tools,
        extra=MessagesExtra(thinking),
        thinking_budget=_thinking_budget(req.thinking),
        wants_thinking=thinking,
    )


def parse_count_tokens(
    body: bytes, *, max_prompt_chars: int | None = None
) -> tuple[str, Sequence[ChatMessage]]:
    """A ``/v1/messages/count_tokens`` body: its model, and the prompt a generation of it would render
    (the same turns and tools as :func:`parse_messages`, so the same tokens)."""
    req = _validate(body, CountTokensBody)
    _check_text(req.model, "model")
    _refuse_unsupported(req.model_extra or {})
    _check_thinking(req.thinking, None)
    return req.model, _prompt(req, _tools(req), max_prompt_chars)

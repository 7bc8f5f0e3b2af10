"""Request bodies for /v1/chat/completions and /v1/completions: bytes in, a validated ``Generation`` out.

Every way a body can be wrong ends in one ``InvalidRequestError`` whose ``param`` names the field, so the
server answers with an OpenAI-shaped 400 and keeps serving: invalid UTF-8, malformed JSON (``NaN`` and
``Infinity`` are not JSON, and nesting deep enough to exhaust the parser is refused, issue 12), a body that is
not an object, missing or mistyped fields, values out of range, text holding a lone surrogate (``"\ud800"``
is valid JSON but not Unicode text), a prompt over ``max_prompt_chars``, and fields we do not implement that
would change the result (``n`` ≠ 1, penalties, logprobs, legacy ``functions``, …) — those are refused, never
silently ignored. ``response_format`` is read by ``response_format.py`` (both endpoints), tools by
``tools.py`` (chat; here, a ``tool`` turn must answer an earlier call: ``unknown_tool_call``). Fields that do
not change the result (``user``, ``metadata``, ``store``, …) are accepted and ignored.

Types are strict, as OpenAI's are: ``"stream": "yes"``, ``"max_tokens": "5"`` or ``true`` are 400s naming the
field, not coerced (an integer is accepted where a number is expected, and a number with no fraction where
an integer is).

The pydantic models double as the OpenAPI schema of the two endpoints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field

from tokenrelay._errors import InvalidRequestError
from tokenrelay._tools import ToolRequest, chat_with_tools
from tokenrelay.engines.base import ChatMessage, Prompt, SamplingParams

from .bodies import STRICT, Integer, check_text, is_off, validate
from .response_format import ResponseFormat, constraint_from
from .tools import NamedToolChoice, ToolBody, ToolCallBody, grammar_for, history_call, tool_request

__all__ = ["ChatCompletionBody", "CompletionBody", "Generation", "parse_generation"]

# The names other parsers imported from here before bodies.py held them.
_STRICT, _check_text, _validate = STRICT, check_text, validate

MAX_STOPS = 16
ROLES = ("system", "developer", "user", "assistant", "tool")


class StreamOptions(BaseModel):
    model_config = STRICT
    include_usage: bool = False
    # tokenrelay's extension (issue 13): each chunk says when the model step of each of its tokens ran and
    # when the chunk was sent (``wire._chat.timed_frame``). Like include_usage, it only applies to a stream.
    include_step_times: bool = False


class TextPart(BaseModel):
    model_config = STRICT
    type: str
    text: str | None = None


class Message(BaseModel):
    model_config = STRICT
    role: str
    content: str | list[TextPart] | None = None
    tool_calls: list[ToolCallBody] | None = None  # assistant turns
    tool_call_id: str | None = None  # tool turns: the call this result answers


class _Common(BaseModel):
    model_config = STRICT
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
    # Issue 20: on the legacy endpoint too, as vLLM and llama-server take it there.
    response_format: ResponseFormat | None = None


class ChatTemplateKwargs(BaseModel):
    model_config = STRICT
    enable_thinking: bool | None = None  # Qwen3's, as vLLM, SGLang and llama-server take it


class ChatCompletionBody(_Common):
    messages: list[Message]
    max_completion_tokens: Integer | None = None
    # Issue 31: "none" (or enable_thinking: false) is a reply without thinking; the other efforts leave the
    # budget to the server's --reasoning-budget and the model.
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    chat_template_kwargs: ChatTemplateKwargs | None = None
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
    "prediction": (None,),
    "modalities": (None, ["text"]),
    "audio": (None,),
}


@dataclass(frozen=True)
class Generation:
    """A validated request, in the terms the engine and the stream need."""

    kind: str  # the endpoint's (``generation.ENDPOINTS``): "chat", "completion", ...
    model: str
    prompt: Prompt
    params: SamplingParams
    stops: tuple[str, ...]
    stream: bool
    include_usage: bool
    return_token_ids: bool = False
    step_times: bool = False
    tools: ToolRequest | None = None  # chat requests whose reply may call tools (tool_choice not "none")
    #: What a dialect's writer needs of the request beyond the above (the Responses API's echo of it, ...).
    extra: Any = None
    #: The reply's thinking budget in tokens (issue 31): ``0`` turns thinking off, ``None`` leaves it to the
    #: server's default (``--reasoning-budget``) and the model.
    thinking_budget: int | None = None
    #: The request asked for thinking (a reasoning effort, ``enable_thinking``, Anthropic's ``thinking``): a
    #: server that reads no reasoning format answers without and says so (``THINKING_UNAVAILABLE``).
    wants_thinking: bool = False


def _refuse_unsupported(data: dict[str, Any], n: int) -> None:
    for field, off in _UNSUPPORTED.items():
        if field in data and not is_off(data[field], off):
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
        check_text(s, "stop")
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
            check_text(part.text, f"messages.{i}.content.{j}.text")
            texts.append(part.text)
        return "".join(texts)
    content = m.content or ""
    check_text(content, f"messages.{i}.content")
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
            turn["tool_calls"] = [history_call(c, i, j) for j, c in enumerate(m.tool_calls)]
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


def parse_generation(
    body: bytes,
    kind: str,
    /,
    *,
    max_tokens_limit: int,
    default_max_tokens: int,
    max_prompt_chars: int | None = None,
) -> Generation:
    """Validate a request body; raise ``InvalidRequestError`` (400) naming the field that is wrong."""
    req = validate(body, ChatCompletionBody if kind == "chat" else CompletionBody)
    check_text(req.model, "model")
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
        tools = tool_request(req.tools, req.tool_choice, req.parallel_tool_calls)
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
        check_text(prompt, "prompt")
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
        max_tokens=max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        seed=req.seed,
        constraint=constraint_from(req.response_format),
        grammar=grammar_for(tools, req.response_format),
    )
    thinking_budget: int | None = None
    wants_thinking = False
    if isinstance(req, ChatCompletionBody):
        kwargs = req.chat_template_kwargs
        if req.reasoning_effort == "none" or (kwargs is not None and kwargs.enable_thinking is False):
            thinking_budget = 0
        wants_thinking = req.reasoning_effort not in (None, "none") or (
            kwargs is not None and kwargs.enable_thinking is True
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
        thinking_budget=thinking_budget,
        wants_thinking=wants_thinking,
    )

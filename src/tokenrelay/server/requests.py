"""Request bodies for /v1/chat/completions and /v1/completions: bytes in, a validated ``Generation`` out.

Every way a body can be wrong ends in one ``InvalidRequestError`` whose ``param`` names the field, so the
server answers with an OpenAI-shaped 400 and keeps serving: invalid UTF-8, malformed JSON, a body that is not
an object, missing or mistyped fields, values out of range, and fields we do not implement that would change
the result (``n`` ≠ 1, penalties, logprobs, tools, …) — those are refused, never silently ignored. Fields that
do not change the result (``user``, ``metadata``, ``store``, …) are accepted and ignored.

The pydantic models double as the OpenAPI schema of the two endpoints.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tokenrelay._errors import InvalidRequestError
from tokenrelay.engines.base import ChatMessage, Prompt, SamplingParams

__all__ = ["ChatCompletionBody", "CompletionBody", "Generation", "parse_generation"]

MAX_STOPS = 16
ROLES = ("system", "developer", "user", "assistant")


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: bool = False


class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[TextPart] | None = None


class _Common(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str = ""  # empty or omitted: the model this server serves
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = None
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int = 1
    return_token_ids: bool = False  # vLLM's extension: token ids in every chunk, prompt ids in the first


class ChatCompletionBody(_Common):
    messages: list[Message]
    max_completion_tokens: int | None = None


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
    "tools": (None, []),
    "tool_choice": (None, "none", "auto"),
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


def _loads(body: bytes) -> dict[str, Any]:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequestError(f"the request body is not valid UTF-8 (byte {exc.start})") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidRequestError(f"the request body is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise InvalidRequestError("the request body must be a JSON object")
    return data


def _from_validation(exc: ValidationError) -> InvalidRequestError:
    err = exc.errors()[0]
    param = ".".join(str(p) for p in err["loc"]) or None
    message = f"{param}: {err['msg']}" if param else err["msg"]
    return InvalidRequestError(message, param=param)


def _refuse_unsupported(data: dict[str, Any]) -> None:
    for field, off in _UNSUPPORTED.items():
        if field in data and data[field] not in off:
            raise InvalidRequestError(
                f"'{field}' is not supported by this server (it would change the reply); remove it",
                param=field,
                code="unsupported_parameter",
            )
    if data.get("n", 1) != 1:
        raise InvalidRequestError("only n=1 is supported", param="n", code="unsupported_parameter")


def _stops(stop: str | list[str] | None) -> tuple[str, ...]:
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if len(stops) > MAX_STOPS:
        raise InvalidRequestError(f"at most {MAX_STOPS} stop strings are allowed", param="stop")
    if any(s == "" for s in stops):
        raise InvalidRequestError("stop strings must not be empty", param="stop")
    return tuple(stops)


def _messages(messages: list[Message]) -> list[ChatMessage]:
    if not messages:
        raise InvalidRequestError("messages must not be empty", param="messages")
    out: list[ChatMessage] = []
    for i, m in enumerate(messages):
        if m.role not in ROLES:
            raise InvalidRequestError(
                f"messages[{i}].role must be one of {', '.join(ROLES)}", param=f"messages.{i}.role"
            )
        if isinstance(m.content, list):
            texts = []
            for j, part in enumerate(m.content):
                if part.type != "text" or part.text is None:
                    raise InvalidRequestError(
                        f"messages[{i}].content[{j}]: only text parts are supported",
                        param=f"messages.{i}.content.{j}",
                        code="unsupported_parameter",
                    )
                texts.append(part.text)
            content = "".join(texts)
        else:
            content = m.content or ""
        role = "system" if m.role == "developer" else m.role
        out.append({"role": role, "content": content})
    return out


def parse_generation(
    body: bytes, kind: Literal["chat", "completion"], *, max_tokens_limit: int, default_max_tokens: int
) -> Generation:
    """Validate a request body; raise ``InvalidRequestError`` (400) naming the field that is wrong."""
    data = _loads(body)
    try:
        req: _Common = (ChatCompletionBody if kind == "chat" else CompletionBody).model_validate(data)
    except ValidationError as exc:
        raise _from_validation(exc) from exc
    _refuse_unsupported(data)
    max_tokens = req.max_tokens
    if isinstance(req, ChatCompletionBody) and req.max_completion_tokens is not None:
        max_tokens = req.max_completion_tokens
    param = (
        "max_completion_tokens"
        if isinstance(req, ChatCompletionBody) and req.max_completion_tokens
        else "max_tokens"
    )
    if max_tokens is None:
        max_tokens = min(default_max_tokens, max_tokens_limit)
    elif max_tokens < 1:
        raise InvalidRequestError(f"{param} must be at least 1", param=param)
    elif max_tokens > max_tokens_limit:
        raise InvalidRequestError(f"{param} must be at most {max_tokens_limit}", param=param)
    prompt: Prompt
    if isinstance(req, ChatCompletionBody):
        prompt = _messages(req.messages)
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
    params = SamplingParams(
        max_tokens=max_tokens, temperature=req.temperature, top_p=req.top_p, seed=req.seed
    )
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    return Generation(
        kind, req.model, prompt, params, _stops(req.stop), req.stream, include_usage, req.return_token_ids
    )

"""The input of a Responses API request: its items and tools, as the chat-shaped turns and ``ToolRequest`` that
every engine's prompt is made of (``responses_request.py`` reads the rest of the body).

- ``input`` items: ``message`` (``type`` may be left out; roles ``user``, ``assistant``, ``system``,
  ``developer``; ``content`` a string or ``input_text`` / ``output_text`` parts), ``function_call`` (an
  assistant turn's call; consecutive calls join one turn) and ``function_call_output`` (a ``tool`` turn, whose
  ``call_id`` must answer an earlier call: ``unknown_tool_call``, checked by :func:`build_prompt` once the
  stored conversation is known); ``reasoning`` items passed back are taken and not shown to the model. Any
  other item or part type is a 400 naming it.
- ``tools``: the flat function shape, checked by chat's rules (``tools.tool_request``, whose error names are
  rewritten to this shape's fields); OpenAI's built-in tool types (``BUILT_IN_TOOLS``) are left out and named.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from tokenrelay._errors import InvalidRequestError
from tokenrelay._tools import ToolRequest, chat_with_tools
from tokenrelay.engines.base import ChatMessage, Prompt

from .requests import _check_text
from .tools import FunctionBody, NamedFunction, NamedToolChoice, ToolBody, tool_request

__all__ = ["BUILT_IN_TOOLS", "ROLES", "build_prompt", "tools_of", "turns_of"]

#: OpenAI's tool types that run on OpenAI's side (or the client's, in a shape this server cannot write):
#: left out of the prompt and named in the response, never refused (Codex sends some with every request).
BUILT_IN_TOOLS = frozenset(
    {
        "web_search", "web_search_2025_08_26", "web_search_preview", "web_search_preview_2025_03_11",
        "file_search", "computer", "computer_use_preview", "code_interpreter", "image_generation", "mcp",
        "local_shell", "shell", "custom", "namespace", "tool_search", "apply_patch", "programmatic_tool_calling",
    }
)  # fmt: skip

ROLES = ("user", "assistant", "system", "developer")
TEXT_PARTS = ("input_text", "output_text", "text")


def tools_of(
    bodies: list[dict[str, Any]] | None, choice: str | dict[str, Any] | None, parallel: bool | None
) -> tuple[ToolRequest | None, list[dict[str, object]], list[str]]:
    """The function tools (checked by ``tools.tool_request``), their echo, and the built-in types left out."""
    kept: list[ToolBody] = []
    where: list[int] = []  # each kept tool's index in the request
    echo: list[dict[str, object]] = []
    left_out: list[str] = []
    for i, tool in enumerate(bodies or []):
        if not isinstance(tool, dict):
            raise InvalidRequestError(f"tools[{i}] must be an object", param=f"tools.{i}")
        kind = tool.get("type")
        if isinstance(kind, str) and kind in BUILT_IN_TOOLS:
            left_out.append(str(kind))
            continue
        if kind != "function":
            raise InvalidRequestError(
                f"tools[{i}].type {kind!r} is not a tool type this server knows; it serves 'function' tools "
                "(and leaves OpenAI's built-in tools out)",
                param=f"tools.{i}.type",
                code="unsupported_parameter",
            )
        name = tool.get("name")
        if not isinstance(name, str):
            raise InvalidRequestError(f"tools[{i}].name must be a string", param=f"tools.{i}.name")
        fields = {k: tool.get(k) for k in ("name", "description", "parameters", "strict") if k in tool}
        try:
            function = FunctionBody.model_validate(fields)
        except ValueError as exc:
            raise InvalidRequestError(
                f"tools[{i}] is not a function tool: {exc}", param=f"tools.{i}"
            ) from exc
        kept.append(ToolBody(type="function", function=function))
        where.append(i)
        echo.append(
            {
                "type": "function",
                "name": function.name,
                "description": function.description,
                "parameters": function.parameters,
                "strict": function.strict,
            }
        )
    named: str | NamedToolChoice | None
    if isinstance(choice, dict):
        if choice.get("type") != "function" or not isinstance(choice.get("name"), str):
            raise InvalidRequestError(
                f"tool_choice {json.dumps(choice)[:200]} is not served; use 'auto', 'none', 'required' or "
                '{"type": "function", "name": ...}',
                param="tool_choice",
                code="unsupported_parameter",
            )
        named = NamedToolChoice(type="function", function=NamedFunction(name=choice["name"]))
    else:
        named = choice
    try:
        tools = tool_request(kept, named, parallel)
    except InvalidRequestError as exc:
        param = exc.param or ""
        message = exc.message.replace(".function.", ".").replace(
            "tool_choice.function.name", "tool_choice.name"
        )
        if param.startswith("tools."):
            head, _, rest = param[len("tools.") :].partition(".")
            if head.isdigit():
                original = where[int(head)]
                param = f"tools.{original}" + (f".{rest}" if rest else "")
                message = message.replace(f"tools[{head}]", f"tools[{original}]").replace(
                    f"tools.{head}.", f"tools.{original}."
                )
            param = param.replace(".function.", ".")
        elif param == "tool_choice.function.name":
            param = "tool_choice.name"
        raise InvalidRequestError(message, param=param or None, code=exc.code) from exc
    return tools, echo, left_out


def _text(content: object, param: str) -> str:
    if isinstance(content, str):
        _check_text(content, param)
        return content
    if not isinstance(content, list):
        raise InvalidRequestError(f"{param} must be a string or a list of text parts", param=param)
    texts = []
    for j, part in enumerate(content):
        where = f"{param}.{j}"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in TEXT_PARTS:
            raise InvalidRequestError(
                f"{where}.type {kind!r} is not served: only text parts ({', '.join(TEXT_PARTS[:2])}) are",
                param=f"{where}.type",
                code="unsupported_parameter",
            )
        assert isinstance(part, dict)
        text = part.get("text")
        if not isinstance(text, str):
            raise InvalidRequestError(f"{where}.text must be a string", param=f"{where}.text")
        _check_text(text, f"{where}.text")
        texts.append(text)
    return "".join(texts)


def _string(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise InvalidRequestError(f"{where}.{key} must be a string", param=f"{where}.{key}")
    _check_text(value, f"{where}.{key}")
    return value


def _arguments(text: str) -> object:
    # As tools.history_call: templates that take tools expect the arguments as an object.
    try:
        return json.loads(text) if text.strip() else {}
    except ValueError:
        return text


def turns_of(input: str | list[Any]) -> tuple[list[dict[str, object]], list[tuple[str, str]]]:
    """``input`` as OpenAI chat-shaped turns, and the ``call_id`` (with its param) of every call output."""
    if isinstance(input, str):
        _check_text(input, "input")
        return [{"role": "user", "content": input}], []
    if not input:
        raise InvalidRequestError("input must not be empty", param="input")
    turns: list[dict[str, object]] = []
    outputs: list[tuple[str, str]] = []
    for i, item in enumerate(input):
        where = f"input.{i}"
        if not isinstance(item, dict):
            raise InvalidRequestError(f"input[{i}] must be an object (an input item)", param=where)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ROLES:
                raise InvalidRequestError(
                    f"input[{i}].role {role!r} must be one of {', '.join(ROLES)}", param=f"{where}.role"
                )
            assert isinstance(role, str)
            if "content" not in item:
                raise InvalidRequestError(f"input[{i}].content is required", param=f"{where}.content")
            content = _text(item["content"], f"{where}.content")
            turns.append({"role": "system" if role == "developer" else role, "content": content})
        elif kind == "function_call":
            call_id, name = _string(item, "call_id", where), _string(item, "name", where)
            arguments = _string(item, "arguments", where)
            call = {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": _arguments(arguments)},
            }
            last = turns[-1] if turns else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)  # type: ignore[attr-defined]
            elif last is not None and last["role"] == "assistant":
                last["tool_calls"] = [call]
                last["content"] = last["content"] or None
            else:
                turns.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            call_id = _string(item, "call_id", where)
            output = item.get("output")
            content = _text(output, f"{where}.output")
            turns.append({"role": "tool", "tool_call_id": call_id, "content": content})
            outputs.append((call_id, f"{where}.call_id"))
        elif kind == "reasoning":
            continue  # passed back: the model does not see its earlier reasoning (templates drop it too)
        else:
            raise InvalidRequestError(
                f"input[{i}].type {kind!r} is not an input item this server serves (message, function_call, "
                "function_call_output, reasoning)",
                param=f"{where}.type",
                code="unsupported_parameter",
            )
    return turns, outputs


def build_prompt(
    instructions: str | None,
    history: Sequence[Mapping[str, object]],
    turns: Sequence[dict[str, object]],
    answers: Sequence[tuple[str, str]],
    tools: ToolRequest | None,
) -> Prompt:
    """The prompt: ``instructions``, the stored conversation, then this request's input (each call output,
    ``answers``' ``(call_id, param)`` in order, checked against the calls before it)."""
    calls: set[str] = set()
    with_tools = tools is not None
    for turn in history:
        for call in turn.get("tool_calls") or ():  # type: ignore[attr-defined]
            calls.add(call["id"])
            with_tools = True
    answered = iter(answers)
    for turn in turns:
        for call in turn.get("tool_calls") or ():  # type: ignore[attr-defined]
            calls.add(call["id"])
            with_tools = True
        if turn["role"] == "tool":
            call_id, param = next(answered)
            if call_id not in calls:
                raise InvalidRequestError(
                    f"{param.replace('.call_id', '')} answers call_id {call_id!r}, which no earlier "
                    "function_call made",
                    param=param,
                    code="unknown_tool_call",
                )
            with_tools = True
    head = [{"role": "system", "content": instructions}] if instructions else []
    all_turns = [*head, *history, *turns]
    if with_tools:
        return chat_with_tools(all_turns, tools)
    plain: list[ChatMessage] = [
        {"role": str(t["role"]), "content": str(t["content"] or "")} for t in all_turns
    ]
    return plain

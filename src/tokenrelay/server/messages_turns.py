"""A Messages request's conversation (``system`` and ``messages``, block by block) as the chat endpoint's turns.

``conversation_turns`` gives OpenAI-shaped turns, so one chat template and one tool machinery serve both
dialects (``messages_request.py`` has the rules): ``text`` blocks are a turn's content, an assistant's
``tool_use`` blocks its calls (``input`` as the arguments), each ``tool_result`` block a ``tool`` turn
answering its ``tool_use_id``; ``thinking`` blocks of earlier turns are dropped; ``image``, ``document`` and any
block type it does not know are a 400 naming the block, a ``tool_result`` for no earlier ``tool_use`` is
``unknown_tool_use``, a ``tool_use`` id given twice ``duplicate_tool_use_id``.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from tokenrelay._errors import InvalidRequestError

from .bodies import STRICT as _STRICT
from .bodies import check_text as _check_text

__all__ = ["UNSUPPORTED_BLOCKS", "MessageParam", "conversation_turns"]


#: Block types a request may hold that this server cannot take: named in the 400.
UNSUPPORTED_BLOCKS = ("image", "document", "search_result", "container_upload")


class MessageParam(BaseModel):
    model_config = _STRICT
    role: str
    content: str | list[dict[str, Any]]


def _text_of(blocks: str | list[dict[str, Any]], where: str, *, allow: tuple[str, ...] = ()) -> str:
    """The text of a string or of text blocks (``allow``: other types skipped without a word)."""
    if isinstance(blocks, str):
        _check_text(blocks, where)
        return blocks
    texts: list[str] = []
    for j, block in enumerate(blocks):
        kind = block.get("type")
        here = f"{where}.{j}"
        if kind == "text":
            text = block.get("text")
            if not isinstance(text, str):
                raise InvalidRequestError(
                    f"{here}.text: a text block needs a string text", param=f"{here}.text"
                )
            _check_text(text, f"{here}.text")
            texts.append(text)
        elif kind in allow:
            continue
        else:
            raise _bad_block(kind, here, "text")
    return "".join(texts)


def _bad_block(kind: object, where: str, expected: str) -> InvalidRequestError:
    if kind in UNSUPPORTED_BLOCKS:
        return InvalidRequestError(
            f"{where}: content of type {kind!r} is not supported by this server (text only)",
            param=f"{where}.type",
            code="unsupported_content",
        )
    return InvalidRequestError(
        f"{where}.type: {str(kind)[:80]!r} is not a block type this server takes here ({expected})",
        param=f"{where}.type",
    )


def conversation_turns(
    system: str | list[dict[str, Any]] | None, messages: list[MessageParam]
) -> tuple[list[dict[str, Any]], bool]:
    """OpenAI-shaped turns (``tool_calls`` parsed, ``tool`` turns) and whether any call or result is in them."""
    if not messages:
        raise InvalidRequestError("messages: at least one message is required", param="messages")
    turns: list[dict[str, Any]] = []
    if system is not None:
        text = _text_of(system, "system")
        if text:
            turns.append({"role": "system", "content": text})
    calls: set[str] = set()
    with_tools = False
    for i, m in enumerate(messages):
        where = f"messages.{i}.content"
        if m.role not in ("user", "assistant", "system"):
            raise InvalidRequestError(
                f"messages.{i}.role: {m.role[:40]!r} must be 'user', 'assistant' or 'system'",
                param=f"messages.{i}.role",
            )
        if m.role == "system":  # a system message inside the conversation (Claude Code sends them)
            turns.append({"role": "system", "content": _text_of(m.content, where)})
            continue
        if isinstance(m.content, str):
            _check_text(m.content, where)
            turns.append({"role": m.role, "content": m.content})
            continue
        if m.role == "assistant":
            texts: list[str] = []
            made: list[dict[str, Any]] = []
            for j, block in enumerate(m.content):
                kind, here = block.get("type"), f"{where}.{j}"
                if kind == "text":
                    texts.append(_text_of([block], where))
                elif kind == "tool_use":
                    made.append(_tool_use(block, here, calls))
                elif kind in ("thinking", "redacted_thinking"):
                    continue  # earlier turns' thinking is not part of the context (Anthropic drops it too)
                else:
                    raise _bad_block(kind, here, "text, tool_use, thinking")
            turn: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
            if made:
                turn["content"] = turn["content"] or None
                turn["tool_calls"] = made
                with_tools = True
            turns.append(turn)
            continue
        pending: list[str] = []  # the user's text blocks since the last tool result
        for j, block in enumerate(m.content):
            kind, here = block.get("type"), f"{where}.{j}"
            if kind == "text":
                pending.append(_text_of([block], where))
            elif kind == "tool_result":
                if pending:
                    turns.append({"role": "user", "content": "".join(pending)})
                    pending = []
                turns.append(_tool_result(block, here, calls))
                with_tools = True
            else:
                raise _bad_block(kind, here, "text, tool_result")
        if pending or not m.content:
            turns.append({"role": "user", "content": "".join(pending)})
    return turns, with_tools


def _tool_use(block: dict[str, Any], here: str, calls: set[str]) -> dict[str, Any]:
    id, name, arguments = block.get("id"), block.get("name"), block.get("input", {})
    if not isinstance(id, str) or not id:
        raise InvalidRequestError(f"{here}.id: a tool_use block needs its id", param=f"{here}.id")
    if not isinstance(name, str) or not name:
        raise InvalidRequestError(f"{here}.name: a tool_use block needs its name", param=f"{here}.name")
    if not isinstance(arguments, dict):
        raise InvalidRequestError(f"{here}.input must be an object", param=f"{here}.input")
    if id in calls:
        raise InvalidRequestError(
            f"{here}.id: tool_use id {id[:80]!r} is given twice",
            param=f"{here}.id",
            code="duplicate_tool_use_id",
        )
    _check_text(id, f"{here}.id")
    _check_text(name, f"{here}.name")
    _check_text(json.dumps(arguments, ensure_ascii=False), f"{here}.input")
    calls.add(id)
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _tool_result(block: dict[str, Any], here: str, calls: set[str]) -> dict[str, Any]:
    id = block.get("tool_use_id")
    if not isinstance(id, str) or id not in calls:
        raise InvalidRequestError(
            f"{here}.tool_use_id {str(id)[:80]!r} answers no tool_use block of an earlier assistant message",
            param=f"{here}.tool_use_id",
            code="unknown_tool_use",
        )
    content = block.get("content", "")
    if content is None:
        content = ""
    if not isinstance(content, (str, list)) or (
        isinstance(content, list) and not all(isinstance(b, dict) for b in content)
    ):
        raise InvalidRequestError(f"{here}.content must be a string or text blocks", param=f"{here}.content")
    text = _text_of(content, f"{here}.content")
    is_error = block.get("is_error", False)
    if not isinstance(is_error, bool):
        raise InvalidRequestError(f"{here}.is_error must be a boolean", param=f"{here}.is_error")
    return {"role": "tool", "tool_call_id": id, "content": f"Error: {text}" if is_error else text}

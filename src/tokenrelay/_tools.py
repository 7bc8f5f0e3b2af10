"""Tools a request offers the model, and a conversation that holds tool calls, in the terms a prompt needs.

A request's ``tools`` (OpenAI's ``{"type": "function", "function": {name, description, parameters, strict}}``),
``tool_choice`` and ``parallel_tool_calls`` become a :class:`ToolRequest`; an assistant turn's ``tool_calls``
become :class:`ToolCall` values, and a ``tool`` turn answers one of them by ``tool_call_id``.

A model reads all of this through its chat template. A template that takes tools (a Jinja template that
reads ``tools`` and ``message.tool_calls``, as Qwen's, Hermes', Llama 3.1's and Mistral's do) could render
:attr:`ChatWithTools.turns` and :attr:`ChatWithTools.tools` itself, for an engine that says so
(``renders_tool_templates``; none of the in-process engines does yet: the constrained grammar is the generic
format's). Everywhere else (SmolLM2's ChatML template knows only ``role`` and ``content``), tokenrelay writes
the *generic format* itself, as plain turns every template reads (:func:`render_generic`): ``ChatWithTools``
*is* that tuple of plain turns, so an engine that knows nothing of tools renders the generic format without a
change.

The generic format (documented in the README) is Hermes' markup, the most widely trained tool format, so the
same extractor reads both and vLLM's ``hermes`` parser agrees with it:

- the tools are described in the system turn, one JSON object per line between ``<tools>`` and ``</tools>``,
  with the instruction to answer a call as ``<tool_call>`` + one JSON object
  ``{"name": ..., "arguments": {...}}`` + ``</tool_call>``;
- an assistant turn's calls are written that way after its content (the arguments text verbatim);
- ``tool`` turns become a ``user`` turn holding one ``<tool_response>`` block per result, in order.

With ``tool_choice: "none"`` the tools are not described (the model is not to call any); earlier calls and
results are still rendered.

:func:`tool_grammar` is the generic format's calls as a grammar (llguidance's Lark dialect, each call's JSON an
inline ``%json`` schema: its name a ``const``, its ``arguments`` the tool's ``parameters``), for engines that
constrain decoding: ``"required"`` and a named tool allow only calls; ``"auto"`` allows any text, or text up
to ``<tool_call>`` and from there only calls (a lazy lexeme: the grammar applies once the marker is written).
A replica that renders its own tool template and parses its own calls (llama.cpp's server, ``--jinja``) is
sent the OpenAI-shaped request instead: :func:`wire_chat`.
Standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from tokenrelay._json_grammar import TOOL_LAYOUT, bounded, layout_options

__all__ = [
    "MAX_CALLS",
    "ChatWithTools",
    "Tool",
    "ToolCall",
    "ToolChoice",
    "ToolRequest",
    "render_generic",
    "tool_grammar",
    "wire_chat",
]

ToolChoice: TypeAlias = Literal["none", "auto", "required", "function"]
"""``"function"``: the one tool :attr:`ToolRequest.function` names must be called."""

PlainTurn: TypeAlias = Mapping[str, str]


@dataclass(frozen=True)
class Tool:
    """One function the model may call. ``parameters`` is the JSON Schema of its arguments (an object)."""

    name: str
    description: str | None = None
    parameters: Mapping[str, object] | None = None
    strict: bool = False

    def to_openai(self) -> dict[str, object]:
        """The request's shape: ``{"type": "function", "function": {...}}`` (what chat templates read)."""
        function: dict[str, object] = {"name": self.name}
        if self.description is not None:
            function["description"] = self.description
        function["parameters"] = dict(self.parameters) if self.parameters is not None else {"type": "object"}
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class ToolRequest:
    """The tools of one request and how the model may use them."""

    tools: tuple[Tool, ...]
    choice: ToolChoice = "auto"
    function: str | None = None  # the tool that must be called when ``choice == "function"``
    parallel: bool = True  # ``parallel_tool_calls``: more than one call in a reply

    @property
    def callable(self) -> tuple[Tool, ...]:
        """The tools a reply may call under ``choice`` (none for ``"none"``, the named one for a name)."""
        if self.choice == "none":
            return ()
        if self.choice == "function":
            return tuple(t for t in self.tools if t.name == self.function)
        return self.tools

    @property
    def must_call(self) -> bool:
        """The reply must be a call (``"required"`` or a named tool), not text."""
        return self.choice in ("required", "function")


@dataclass(frozen=True)
class ToolCall:
    """A call an assistant turn made: its id (which a ``tool`` turn's ``tool_call_id`` answers), the function's
    name and its arguments, the JSON text exactly as the model wrote it."""

    id: str
    name: str
    arguments: str

    def to_openai(self) -> dict[str, object]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


class ChatWithTools(tuple[PlainTurn, ...]):
    """Chat turns with tools: the tuple is their generic rendering (plain ``role``/``content`` turns, what any
    template reads); :attr:`turns` are the OpenAI-shaped turns (``tool_calls`` on assistant turns, ``tool``
    turns with ``tool_call_id``; arguments parsed into objects where they are JSON, as templates expect) and
    :attr:`tools` the request's tools, for a template that takes them. Make one with :func:`chat_with_tools`."""

    turns: tuple[Mapping[str, object], ...]
    tools: ToolRequest | None


def chat_with_tools(turns: Sequence[Mapping[str, object]], tools: ToolRequest | None) -> ChatWithTools:
    """``turns`` (OpenAI-shaped, validated by the caller) with their generic rendering."""
    # Attributes set after construction, as engines.base.timed_ids does: no Python-level __new__.
    chat = ChatWithTools(render_generic(turns, tools))
    chat.turns = tuple(turns)
    chat.tools = tools
    return chat


def wire_chat(chat: ChatWithTools) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The OpenAI-shaped ``messages`` and tool fields of ``chat``, for a replica that takes tools itself.

    Each call's ``arguments`` are JSON text again (the turns hold them parsed, for templates). A named
    ``tool_choice`` is sent as ``"required"`` with only that tool: llama.cpp's server takes no named choice
    (it reads the object as ``"auto"``), and "call this one" is "call one of these" over the one tool."""
    messages: list[dict[str, Any]] = []
    for turn in chat.turns:
        out = dict(turn)
        calls = turn.get("tool_calls")
        if isinstance(calls, Sequence) and calls:
            wired = []
            for call in calls:
                if not isinstance(call, Mapping):
                    continue
                function = call.get("function")
                function = dict(function) if isinstance(function, Mapping) else {}
                raw = function.get("arguments", "")
                if not isinstance(raw, str):
                    function["arguments"] = json.dumps(raw, ensure_ascii=False)
                wired.append({**call, "function": function})
            out["tool_calls"] = wired
        messages.append(out)
    tools = chat.tools
    if tools is None:
        return messages, {}
    offered = tools.callable if tools.choice == "function" else tools.tools
    choice = "required" if tools.choice == "function" else tools.choice
    fields: dict[str, Any] = {"tools": [t.to_openai() for t in offered], "tool_choice": choice}
    fields["parallel_tool_calls"] = tools.parallel
    return messages, fields


def _call_text(call: Mapping[str, object]) -> str:
    function = call.get("function")
    name, arguments = "", ""
    if isinstance(function, Mapping):
        name = str(function.get("name", ""))
        raw = function.get("arguments", "")
        arguments = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
    if not arguments.strip():  # a call without arguments: an empty object, so the markup stays JSON
        arguments = "{}"
    return f'<tool_call>\n{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": {arguments}}}\n</tool_call>'


def describe_tools(tools: ToolRequest) -> str:
    """The system prompt's part that offers the tools (the generic format)."""
    offered = tools.callable
    lines = [
        "You can call functions to help answer. Each function, with the JSON Schema of its arguments:",
        "<tools>",
        *(json.dumps(t.to_openai()["function"], ensure_ascii=False) for t in offered),
        "</tools>",
        # The markers only in the example: prose that names them would read as a (broken) call if echoed.
        "To call a function, answer with its name and arguments as one JSON object in a tool_call block, "
        "like this:",
        "<tool_call>",
        json.dumps({"name": offered[0].name, "arguments": {}}, ensure_ascii=False),
        "</tool_call>",
    ]
    if tools.choice == "function":
        lines.append(f"Call the function {offered[0].name} now.")
    elif tools.choice == "required":
        lines.append("Answer with a function call.")
    if not tools.parallel:
        lines.append("Call at most one function.")
    return "\n".join(lines)


def render_generic(turns: Iterable[Mapping[str, object]], tools: ToolRequest | None) -> list[PlainTurn]:
    """Plain ``role``/``content`` turns for a template that knows nothing of tools (the module docstring)."""
    out: list[dict[str, str]] = []
    results: list[str] = []  # consecutive tool turns become one user turn

    def flush_results() -> None:
        if results:
            out.append({"role": "user", "content": "\n".join(results)})
            results.clear()

    for turn in turns:
        role = str(turn.get("role", "user"))
        content = turn.get("content")
        text = content if isinstance(content, str) else ""
        if role == "tool":
            results.append(f"<tool_response>\n{text}\n</tool_response>")
            continue
        flush_results()
        calls = turn.get("tool_calls")
        if role == "assistant" and isinstance(calls, Sequence) and calls:
            written = [_call_text(c) for c in calls if isinstance(c, Mapping)]
            text = "\n".join([text, *written] if text else written)
        out.append({"role": role, "content": text})
    flush_results()
    if tools is not None and tools.callable:
        offer = describe_tools(tools)
        if out and out[0]["role"] == "system":
            out[0] = {
                "role": "system",
                "content": f"{out[0]['content']}\n\n{offer}" if out[0]["content"] else offer,
            }
        else:
            out.insert(0, {"role": "system", "content": offer})
    return list(out)


MAX_CALLS = 16
"""The most calls one constrained reply may make (a small model may otherwise repeat calls to max_tokens)."""


def _call_schema(tool: Tool) -> dict[str, object]:
    """One call's JSON: ``{"name": NAME, "arguments": {...}}``, its name first so that it streams first."""
    parameters: dict[str, object] = (
        bounded(tool.parameters) if tool.parameters is not None else {"type": "object"}
    )
    parameters.pop("x-guidance", None)  # the engine's options, not the client's
    return {
        "type": "object",
        "properties": {"name": {"const": tool.name}, "arguments": parameters},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def tool_grammar(tools: ToolRequest) -> str | None:
    """The generic format's calls as a grammar (the module docstring); ``None`` when no call may be made.

    Each call's JSON has the tool-call layout (``_json_grammar.TOOL_LAYOUT``) and its numbers
    llama.cpp's bounds (``_json_grammar.bounded``). A tool's schema
    keywords the engine cannot enforce are ignored unless the tool is ``strict`` (``lenient``): the request
    then fails to compile, a 400, as a ``response_format`` schema does."""
    offered = tools.callable
    if not offered:
        return None
    options = {**layout_options(TOOL_LAYOUT), "lenient": not any(t.strict for t in offered)}
    schema = {"anyOf": [_call_schema(t) for t in offered], "x-guidance": options}
    body = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    # After every </tool_call> the reply may end, or another call follows at once; nothing else. SmolLM2-135M
    # puts 0.83 on a newline there and 0.14 on its end of turn; after that newline it wants prose, and a
    # newline that may only lead to another call (the Hermes separator) made it repeat its call to max_tokens.
    # Without it the end of turn is the likeliest allowed token (issue 33: benchmarks/constrained_finish.py).
    more = f'("<tool_call>\\n" body "\\n</tool_call>"){{0,{MAX_CALLS - 1}}}' if tools.parallel else ""
    calls = f'"\\n" body "\\n</tool_call>" {more}'.rstrip()
    if tools.must_call:
        rules = [f'start: "<tool_call>" {calls}']
    else:
        # Any reply, or one whose text ends at the first <tool_call>: from there, only calls.
        rules = [f"start: TEXT | head {calls}", "TEXT: /(.|\\n)*/", 'head[lazy]: TEXT "<tool_call>"']
    return "\n".join([*rules, f"body: %json {body}"]) + "\n"

"""Which reasoning and tool-call parsers read a model's replies: by name, as vLLM's ``--reasoning-parser`` and
``--tool-call-parser`` take them, or detected from the model's chat template (issue 31 §1, §3).

Sans-I/O and standard library only: names and templates in, formats out. An unknown name is a
:class:`~tokenrelay._errors.ConfigError` that lists the choices, so ``tokenrelay serve`` refuses it at start.

- Reasoning: a name of :data:`REASONING_PARSERS` (``none``: no splitting, the reply is all answer); not given,
  the chat template decides (:func:`~tokenrelay._reasoning.reasoning_format_for_template`: a template that
  writes ``<think>`` or ``[THINK]``), and a model whose template has neither gets no splitting.
- Tool calls: a name of :data:`TOOL_CALL_PARSERS`; not given, ``None``: the engine decides as before (its
  template's own format where it renders templates that take tools, else the generic format, ``hermes``,
  which tokenrelay writes into the prompt). The replay engine and the front relay replies whose model's
  template is not read here: the name is how they learn it.
"""

from __future__ import annotations

from ._errors import ConfigError
from ._reasoning import REASONING_FORMATS, ReasoningFormat, reasoning_format_for_template
from ._tool_call_events import TOOL_CALL_PARSERS, ToolCallFormat

__all__ = [
    "REASONING_PARSERS",
    "TOOL_CALL_PARSERS",
    "resolve_reasoning_parser",
    "resolve_tool_call_parser",
]

REASONING_PARSERS: tuple[str, ...] = (*REASONING_FORMATS, "none")
"""What ``--reasoning-parser`` takes: vLLM's names, and ``none``."""


def resolve_reasoning_parser(name: str | None, template: str | None = None) -> ReasoningFormat | None:
    """The reasoning format for ``--reasoning-parser NAME``; ``None`` (no splitting) for ``none``. Not given,
    the one the chat ``template`` writes (``None`` for a template without reasoning tags)."""
    if name is None:
        return reasoning_format_for_template(template)
    if name == "none":
        return None
    fmt = REASONING_FORMATS.get(name)
    if fmt is None:
        raise ConfigError(_unknown("--reasoning-parser", name, REASONING_PARSERS))
    return fmt


def resolve_tool_call_parser(name: str | None) -> ToolCallFormat | None:
    """The tool-call format for ``--tool-call-parser NAME``; ``None`` when not given (the engine decides)."""
    if name is None:
        return None
    fmt = TOOL_CALL_PARSERS.get(name)
    if fmt is None:
        raise ConfigError(_unknown("--tool-call-parser", name, tuple(TOOL_CALL_PARSERS)))
    return fmt


def _unknown(option: str, name: str, choices: tuple[str, ...]) -> str:
    return f"{option} {name!r}: no such parser; choose one of {', '.join(choices)}"

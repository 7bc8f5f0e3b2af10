"""``_parsers``: the reasoning and tool-call parsers by vLLM's names or from a chat template, and the way
``tokenrelay serve`` and ``create_app`` take them (an unknown name is refused at start, naming the choices)."""

from __future__ import annotations

import pytest

from server_helpers import replay_app
from tokenrelay import cli
from tokenrelay._errors import ConfigError
from tokenrelay._parsers import (
    REASONING_PARSERS,
    TOOL_CALL_PARSERS,
    resolve_reasoning_parser,
    resolve_tool_call_parser,
)
from tokenrelay._reasoning import REASONING_FORMATS
from tokenrelay._tool_call_events import FORMATS

QWEN3_TEMPLATE = (
    "{{- '<|im_start|>assistant\\n' }}{%- if enable_thinking is false %}<think>\\n\\n</think>\\n\\n"
)


def test_reasoning_parsers_by_name_or_from_the_template() -> None:
    assert set(REASONING_PARSERS) == {*REASONING_FORMATS, "none"}
    assert resolve_reasoning_parser("deepseek_r1") is REASONING_FORMATS["deepseek_r1"]
    assert resolve_reasoning_parser("none", QWEN3_TEMPLATE) is None  # named: the template is not asked
    assert resolve_reasoning_parser(None, QWEN3_TEMPLATE) is REASONING_FORMATS["qwen3"]
    assert resolve_reasoning_parser(None, "{{ messages }}") is None and resolve_reasoning_parser(None) is None


def test_tool_call_parsers_by_vllms_names() -> None:
    assert TOOL_CALL_PARSERS["hermes"] is FORMATS["hermes"]
    assert TOOL_CALL_PARSERS["llama3_json"] is TOOL_CALL_PARSERS["llama4_json"] is FORMATS["llama3"]
    assert resolve_tool_call_parser("mistral") is FORMATS["mistral"]
    assert resolve_tool_call_parser(None) is None  # not given: the engine decides, as before


@pytest.mark.parametrize(
    ("resolve", "option"),
    [(resolve_reasoning_parser, "--reasoning-parser"), (resolve_tool_call_parser, "--tool-call-parser")],
)
def test_an_unknown_name_is_an_error_naming_the_choices(resolve: object, option: str) -> None:
    with pytest.raises(ConfigError) as raised:
        resolve("deepseek")  # type: ignore[operator]
    message = str(raised.value)
    assert option in message and "'deepseek'" in message
    assert all(
        name in message for name in (REASONING_PARSERS if "reasoning" in option else TOOL_CALL_PARSERS)
    )


def test_the_server_resolves_its_parsers_once_at_creation() -> None:
    app, _ = replay_app("x")
    server = app.state.tokenrelay
    assert server.reasoning_format is None  # SmolLM2's template has no reasoning tags
    assert server.tool_call_format is None
    app, _ = replay_app("x", reasoning_parser="qwen3", tool_call_parser="llama3_json")
    server = app.state.tokenrelay
    assert server.reasoning_format is REASONING_FORMATS["qwen3"]
    assert server.tool_call_format is FORMATS["llama3"]
    with pytest.raises(ConfigError, match="choose one of"):
        replay_app("x", reasoning_parser="r1")


@pytest.mark.parametrize("option", ["--reasoning-parser", "--tool-call-parser"])
def test_serve_refuses_an_unknown_parser_at_start(option: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:  # argparse: before any socket or model
        cli.main(["serve", "--engine", "replay", option, "deepseek"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    choices = REASONING_PARSERS if option == "--reasoning-parser" else tuple(TOOL_CALL_PARSERS)
    assert f"argument {option}: invalid choice: 'deepseek'" in err and all(f"'{c}'" in err for c in choices)


def test_serve_help_names_the_parsers_and_what_a_template_decides(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--reasoning-parser NAME" in out and "--tool-call-parser NAME" in out
    assert "detected from the model's chat template" in out and "not detected from a template" in out
    assert all(name in out for name in (*REASONING_PARSERS, *TOOL_CALL_PARSERS))

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


async def test_markers_that_are_special_tokens_reach_the_parser() -> None:
    """Mistral's ``[TOOL_CALLS]`` is a special token of the real Tekken vocabulary (id 9), which the text
    leaves out by default: a reply whose format reads such markers (``mistral`` calls, Magistral's
    ``[THINK]``) is decoded with special tokens kept, so the call is found; without tools it stays out."""
    from server_helpers import asgi_client
    from tokenrelay import load_tokenizer
    from tokenrelay.engines.replay import ReplayEngine
    from tokenrelay.server import ServerConfig, create_app

    tok = load_tokenizer("tekken")
    assert tok.decode([9], skip_special_tokens=False) == "[TOOL_CALLS]"
    args = '[{"name": "get_weather", "arguments": {"city": "Zürich 🌦"}}]'
    engine = ReplayEngine(tok, args, rate=None)
    engine._ids = [9, *tok.encode(args), *sorted(tok.eos_token_ids)]  # the marker as the model writes it
    app = create_app(engine, ServerConfig(tool_call_parser="mistral"))
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    body = {"model": "replay", "messages": [{"role": "user", "content": "Weather?"}]}
    async with asgi_client(app) as client:
        called = (await client.post("/v1/chat/completions", json={**body, "tools": [tool]})).json()
        plain = (await client.post("/v1/chat/completions", json=body)).json()
    choice = called["choices"][0]
    assert choice["finish_reason"] == "tool_calls", choice
    [call] = choice["message"]["tool_calls"]
    assert (call["function"]["name"], call["function"]["arguments"]) == (
        "get_weather",
        '{"city": "Zürich 🌦"}',
    )
    assert plain["choices"][0]["message"]["content"] == args  # no parser asked: the special token is skipped

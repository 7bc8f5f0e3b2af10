"""``_tools``: the generic format, in which a template that knows nothing of tools still reads them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tokenrelay import load_tokenizer
from tokenrelay._tools import (
    ChatWithTools,
    Tool,
    ToolRequest,
    chat_with_tools,
    describe_tools,
    render_generic,
    tool_grammar,
)

WEATHER = Tool(
    "get_weather",
    "The weather in a city",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
TIME = Tool("get_time")
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}


def test_the_tools_are_offered_in_a_system_turn_one_json_line_each() -> None:
    turns = render_generic([{"role": "user", "content": "Weather?"}], ToolRequest((WEATHER, TIME)))
    assert [t["role"] for t in turns] == ["system", "user"]
    system = turns[0]["content"]
    listed = system.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0].splitlines()
    assert [json.loads(line) for line in listed] == [
        {"name": "get_weather", "description": "The weather in a city", "parameters": WEATHER.parameters},
        {"name": "get_time", "parameters": {"type": "object"}},  # no schema: any arguments object
    ]
    assert '<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call>' in system


def test_a_system_turn_of_the_request_keeps_its_text_first() -> None:
    turns = render_generic(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "x"}],
        ToolRequest((WEATHER,)),
    )
    assert len(turns) == 2 and turns[0]["content"].startswith("Be brief.\n\nYou can call functions")


def test_the_choice_shapes_the_offer() -> None:
    named = describe_tools(ToolRequest((WEATHER, TIME), "function", "get_time"))
    assert "get_weather" not in named and named.endswith("Call the function get_time now.")
    assert describe_tools(ToolRequest((WEATHER,), "required")).endswith("Answer with a function call.")
    assert describe_tools(ToolRequest((WEATHER,), parallel=False)).endswith("Call at most one function.")
    # "none": the model is not to call anything, so nothing is offered.
    assert render_generic([{"role": "user", "content": "x"}], ToolRequest((WEATHER,), "none")) == [
        {"role": "user", "content": "x"}
    ]


def test_calls_and_results_in_the_history_are_written_in_the_same_markup() -> None:
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "Paris and Oslo?"},
        {
            "role": "assistant",
            "content": "Checking both.",
            "tool_calls": [CALL, {**CALL, "id": "call_2", "function": {"name": "get_time", "arguments": ""}}],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "22 °C"},
        {"role": "tool", "tool_call_id": "call_2", "content": "14:00"},
        {"role": "assistant", "content": "22 °C at 14:00."},
    ]
    turns = render_generic(history, None)
    assert turns == [
        {"role": "user", "content": "Paris and Oslo?"},
        {
            "role": "assistant",
            "content": "Checking both.\n"
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
            # a call without arguments is written with an empty object, so the markup stays JSON
            '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',
        },
        # consecutive results: one user turn, a block each, in order
        {
            "role": "user",
            "content": "<tool_response>\n22 °C\n</tool_response>\n<tool_response>\n14:00\n</tool_response>",
        },
        {"role": "assistant", "content": "22 °C at 14:00."},
    ]


def test_a_chat_with_tools_is_its_generic_rendering_and_keeps_the_originals() -> None:
    turns: list[dict[str, Any]] = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
    ]
    tools = ToolRequest((WEATHER,))
    chat = chat_with_tools(turns, tools)
    assert isinstance(chat, ChatWithTools) and isinstance(chat, tuple)
    assert list(chat) == render_generic(turns, tools)
    assert chat.turns == tuple(turns) and chat.tools is tools


def test_smollm2s_template_renders_the_generic_format() -> None:
    # SmolLM2's ChatML template reads role and content only: the generic turns are what it needs.
    import jinja2

    template = getattr(load_tokenizer("smollm2"), "chat_template", None)
    assert template is not None and "tools" not in template
    chat = chat_with_tools(
        [{"role": "user", "content": "Weather in Paris?"}], ToolRequest((WEATHER,), "required")
    )
    text = jinja2.Environment().from_string(template).render(messages=list(chat), add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nYou can call functions")
    assert text.endswith("<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n")


# -- the grammar of the generic format's calls (for engines that constrain decoding) ---------------------------


def accepts(grammar: str, text: str) -> bool:
    """Whether llguidance, with SmolLM2's vocabulary, lets a model write exactly ``text`` and stop there."""
    llguidance = pytest.importorskip("llguidance")
    tok = load_tokenizer("smollm2")
    hf = getattr(tok, "hf_tokenizer")  # noqa: B009 (the HF adapter's own, not on the Tokenizer protocol)
    llt = llguidance.LLTokenizer(hf.to_str(), n_vocab=tok.vocab_size, eos_token=2)
    matcher = llguidance.LLMatcher(llt, llguidance.LLMatcher.grammar_from_lark(grammar), log_level=0)
    ids = tok.encode(text)
    return bool(
        matcher.validate_tokens(ids) == len(ids) and matcher.consume_tokens(ids) and matcher.is_accepting()
    )


CALL_W = '<tool_call>\n{"name":"get_weather","arguments":{"city":"Paris"}}\n</tool_call>'
CALL_T = '<tool_call>\n{"name":"get_time","arguments":{}}\n</tool_call>'


def test_required_allows_only_calls_valid_against_their_tools_schemas() -> None:
    grammar = tool_grammar(ToolRequest((WEATHER, TIME), "required"))
    assert grammar is not None
    assert accepts(grammar, CALL_W) and accepts(grammar, CALL_W + CALL_T)
    assert not accepts(grammar, "Sure. " + CALL_W)  # no text
    assert not accepts(grammar, CALL_W.replace('"city"', '"town"'))  # required property missing
    assert not accepts(grammar, CALL_W.replace("get_weather", "get_wether"))  # not a tool
    assert not accepts(
        grammar, '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
    )  # compact only


@pytest.mark.parametrize("parallel", [True, False])
def test_the_end_of_turn_stays_reachable_after_every_call(parallel: bool) -> None:
    """Issue 33: after ``</tool_call>`` the reply ends or the next call begins; no newline that could only
    lead to another call."""
    grammar = tool_grammar(ToolRequest((WEATHER, TIME), "required", parallel=parallel))
    assert grammar is not None
    assert accepts(grammar, CALL_W)
    assert not accepts(grammar, CALL_W + "\n") and not accepts(grammar, CALL_W + "\nThanks")
    assert accepts(grammar, CALL_W + CALL_T) is parallel
    assert accepts(grammar, CALL_W + CALL_T + CALL_W) is parallel  # the grammar does not forbid a repeat


def test_numbers_in_arguments_are_bounded_as_llama_cpp_bounds_them() -> None:
    count = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    grammar = tool_grammar(ToolRequest((Tool("count", None, count),), "required"))
    assert grammar is not None
    call = '<tool_call>\n{"name":"count","arguments":{"n":%s}}\n</tool_call>'
    assert accepts(grammar, call % (2**53 - 1)) and accepts(grammar, call % -(2**53 - 1))
    assert not accepts(grammar, call % 2**53) and not accepts(grammar, call % ("1" + "0" * 16))


def test_a_named_tool_or_one_call_only() -> None:
    named = tool_grammar(ToolRequest((WEATHER, TIME), "function", "get_time"))
    assert named is not None and accepts(named, CALL_T) and not accepts(named, CALL_W)
    single = tool_grammar(ToolRequest((WEATHER, TIME), "required", parallel=False))
    assert single is not None and accepts(single, CALL_W) and not accepts(single, CALL_W + CALL_T)


def test_auto_allows_prose_or_text_then_calls_but_nothing_malformed_after_the_marker() -> None:
    grammar = tool_grammar(ToolRequest((WEATHER, TIME)))
    assert grammar is not None
    assert accepts(grammar, "Just prose, no call.") and accepts(grammar, CALL_W)
    assert accepts(grammar, "Let me check. " + CALL_W + CALL_T)
    assert not accepts(grammar, "Let me check. <tool_call> whatever")
    assert tool_grammar(ToolRequest((WEATHER,), "none")) is None


def test_a_non_strict_tools_unenforceable_keywords_are_ignored_a_strict_ones_are_not() -> None:
    unique = {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}
    lenient = tool_grammar(ToolRequest((Tool("tag", None, unique),), "required"))
    assert lenient is not None and '"lenient":true' in lenient
    assert accepts(lenient, '<tool_call>\n{"name":"tag","arguments":{"tags":["a"]}}\n</tool_call>')
    strict = tool_grammar(ToolRequest((Tool("tag", None, unique, strict=True),), "required"))
    assert strict is not None and '"lenient":false' in strict

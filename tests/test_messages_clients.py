"""Issue 30 §2: real Anthropic clients against ``tokenrelay serve`` on the embedded model (one server for the
module): the anthropic Python SDK with ``_strict_response_validation=True``, the anthropic TypeScript SDK and
the AI SDK's ``@ai-sdk/anthropic`` provider (``tests/e2e/anthropic_clients.js``, run with node).

The model is SmolLM2-135M: it calls a tool because the first step asks for one (``tool_choice: any``, which
the embedded engine enforces) and answers the tool's result in prose when the next step lets it (``auto``);
one call per step (``disable_parallel_tool_use``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from server_helpers import ServerProcess, serve_process

anthropic = pytest.importorskip("anthropic")
pytest.importorskip("llama_cpp")
pytest.importorskip("llguidance")

ROOT = Path(__file__).resolve().parents[1]
MODEL = "SmolLM2-135M-Instruct"
ALIAS = "claude-sonnet-4-5"
GREEDY = {"temperature": 0}  # the SDK no longer offers sampling parameters; the API still takes them
WEATHER = {
    "name": "get_weather",
    "description": "The current weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with serve_process(
        "--parallel", "2", "--n-ctx", "2048", "--max-tokens", "256", "--api-key", "sk-test",
        "--served-model-name", ALIAS, "claude-haiku-4-5",
        timeout=180,
    ) as running:  # fmt: skip
        yield running


@pytest.fixture
def client(server: ServerProcess) -> Iterator[Any]:
    with anthropic.Anthropic(
        base_url=server.url, api_key="sk-test", max_retries=0, timeout=600, _strict_response_validation=True
    ) as sdk:
        yield sdk


def test_create_and_count_tokens_agree_with_the_stream(client: Any) -> None:
    messages: list[Any] = [{"role": "user", "content": "Say hello in French."}]
    system = [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}]
    made = client.messages.create(
        model=MODEL, max_tokens=24, system=system, messages=messages, extra_body=GREEDY
    )
    assert made.type == "message" and made.role == "assistant" and made.model == MODEL
    assert made.stop_reason in ("end_turn", "max_tokens") and made.content[0].type == "text"
    with client.messages.stream(
        model=MODEL, max_tokens=24, system=system, messages=messages, extra_body=GREEDY
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) > 1 and "".join(pieces) == final.content[0].text == made.content[0].text
    counted = client.messages.count_tokens(model=MODEL, system=system, messages=messages)
    assert counted.input_tokens == final.usage.input_tokens == made.usage.input_tokens > 0
    assert final.usage.output_tokens == made.usage.output_tokens > 0


def test_stop_reasons_max_tokens_and_stop_sequence(client: Any) -> None:
    messages: list[Any] = [{"role": "user", "content": "Count from 1 to 20, separated by commas."}]
    cut = client.messages.create(model=MODEL, max_tokens=3, messages=messages, extra_body=GREEDY)
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 3
    whole = client.messages.create(model=MODEL, max_tokens=60, messages=messages, extra_body=GREEDY)
    text = whole.content[0].text
    stop = text[len(text) // 2 :].strip()[:2]  # a stop sequence the reply is known to reach
    with client.messages.stream(
        model=MODEL, max_tokens=60, messages=messages, extra_body=GREEDY, stop_sequences=[stop]
    ) as stream:
        final = stream.get_final_message()
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", stop)
    assert stop not in final.content[0].text and text.startswith(final.content[0].text)


def test_a_tool_loop_with_tool_choice_any_then_a_tool_result(client: Any) -> None:
    messages: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
    with client.messages.stream(
        model=ALIAS,  # an alias the server was given: the reply echoes it
        max_tokens=128,
        messages=messages,
        tools=[WEATHER],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        extra_body=GREEDY,
    ) as stream:
        fragments = [e.partial_json for e in stream if e.type == "input_json"]
        first = stream.get_final_message()
    assert first.model == ALIAS and first.stop_reason == "tool_use"
    [call] = [b for b in first.content if b.type == "tool_use"]
    assert call.name == "get_weather" and isinstance(call.input["city"], str)
    assert call.id.startswith("toolu_")
    assert len(fragments) > 1 and json.loads("".join(fragments)) == call.input
    messages += [
        {"role": "assistant", "content": first.content},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "22 °C and sunny"}],
        },
    ]
    answer = client.messages.create(
        model=MODEL, max_tokens=48, messages=messages, tools=[WEATHER], extra_body=GREEDY
    )
    assert answer.stop_reason in ("end_turn", "max_tokens", "tool_use")
    counted = client.messages.count_tokens(model=MODEL, messages=messages, tools=[WEATHER])
    assert counted.input_tokens == answer.usage.input_tokens


def test_errors_are_anthropic_errors(server: ServerProcess, client: Any) -> None:
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.create(model="nope", max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    assert missing.value.body["error"]["type"] == "not_found_error"
    with (
        anthropic.Anthropic(base_url=server.url, api_key="wrong", max_retries=0) as bad_key,
        pytest.raises(anthropic.AuthenticationError),
    ):
        bad_key.messages.create(model=MODEL, max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(anthropic.BadRequestError) as image:
        client.messages.create(
            model=MODEL,
            max_tokens=4,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "AA=="},
                        }
                    ],
                }
            ],
        )
    assert "'image'" in image.value.message


def test_the_typescript_sdk_and_the_ai_sdk(server: ServerProcess) -> None:
    node = shutil.which("node")
    if node is None or not (ROOT / "node_modules" / "@anthropic-ai" / "sdk").is_dir():
        pytest.skip("node and the npm devDependencies (npm ci) are needed")
    run = subprocess.run(
        [node, str(ROOT / "tests" / "e2e" / "anthropic_clients.js"), server.url, MODEL, "sk-test"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr + run.stdout
    out = json.loads(run.stdout.strip().splitlines()[-1])
    sdk_result = out["sdk"]
    assert sdk_result["streamed"] == sdk_result["final"] and sdk_result["deltas"] > 1
    assert sdk_result["stopReason"] in ("end_turn", "max_tokens")
    assert sdk_result["toolStop"] == "tool_use" and sdk_result["toolName"] == "get_weather"
    ai = out["ai"]
    assert ai["steps"][0]["finishReason"] == "tool-calls"
    assert ai["steps"][0]["toolCalls"][0]["toolName"] == "get_weather"
    assert ai["steps"][0]["toolResults"][0]["output"].startswith("22 °C")
    assert len(ai["steps"]) >= 2 and ai["steps"][1]["finishReason"] in ("stop", "length", "tool-calls")

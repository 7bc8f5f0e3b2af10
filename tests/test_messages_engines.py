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

"""``POST /v1/responses`` on the upstream front (``--engine upstream``): the front reads its replicas' token ids
(chat completions with ``return_token_ids``) whatever dialect its own client speaks, so the Responses stream says
what the chat stream says for the same request; a replica's tool-call markup becomes ``function_call`` items.
The replicas are tokenrelay servers on the replay engine, over real uvicorn sockets; the client is the SDK,
strict."""

from __future__ import annotations

import json

import openai

from _uvicorn import serve
from server_helpers import replay_app
from test_upstream import TEXT, chat_text, front

CALL = 'Checking. <tool_call>\n{"name": "get_weather", "arguments": {"city": "नमस्ते 🦙"}}\n</tool_call>'
TOOL: dict[str, object] = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def strict(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, _strict_response_validation=True)


def test_the_front_streams_responses_with_the_chat_endpoint_s_text() -> None:
    app, _ = replay_app(TEXT, rate=None)
    with serve(app) as upstream, front([upstream]) as (url, _engine), strict(url) as client:
        events = list(client.responses.create(model="replay", input="hi", stream=True, temperature=0))
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert text == chat_text(url, temperature=0) == TEXT
        assert events[-1].type == "response.completed"
        cut = client.responses.create(model="replay", input="hi", max_output_tokens=4)
        assert cut.status == "incomplete" and cut.usage is not None and cut.usage.output_tokens == 4


def test_a_replica_s_call_becomes_a_function_call_item_through_the_front() -> None:
    app, _ = replay_app(CALL, rate=None)
    with serve(app) as upstream, front([upstream]) as (url, _engine), strict(url) as client:
        response = client.responses.create(model="replay", input="weather?", tools=[TOOL])  # type: ignore[list-item]
    assert response.output_text == "Checking. "
    [call] = [item for item in response.output if item.type == "function_call"]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "नमस्ते 🦙"}

"""Reading Responses API streams (``wire/_responses_reader``), ``tokenrelay.client`` on ``api="responses"`` and
``tokenrelay generate --url`` against a server that speaks only the Responses API.

The reader reads the writer's frames cut at every byte (through the SSE parser): the text, the calls, the end
and the usage are the same for any cut. The client and the CLI read a real server (uvicorn, the replay engine,
SmolLM2's tokenizer), the CLI as a real subprocess.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.types import ASGIApp, Receive, Scope, Send

from _cuts import cuttings
from _terminal import tokenrelay
from _uvicorn import serve
from server_helpers import replay_app
from test_responses_writer import _ids, events_of, write
from tokenrelay._errors import EngineError, ToolCallError
from tokenrelay._reply import ReplyFailed
from tokenrelay._stream import Usage
from tokenrelay.client import ChatResult, stream_chat
from tokenrelay.wire._responses_reader import ResponsesStreamDecoder
from tokenrelay.wire._sse import SSEParser

CORPUS = "नमस्ते 👩‍💻 你好，世界! Zürich\r\nend"


def read(stream: bytes, pieces: list[bytes] | None = None) -> tuple[str, ResponsesStreamDecoder]:
    decoder, parser, text = ResponsesStreamDecoder(), SSEParser(), ""
    for piece in pieces if pieces is not None else [stream]:
        for event in parser.feed(piece):
            text += decoder.feed(event)
    return text, decoder


def test_every_cut_of_the_frames_reads_the_same_reply() -> None:
    stream, writer = write(events_of([_ids()]))
    text, whole = read(stream)
    assert text == "Let me look: 🌦 विश्व.\n" and whole.finished and whole.finish_reason == "tool_calls"
    assert whole.reasoning == "हम्म 🤔 <tool_call>x</tool_call>"
    [call] = whole.tool_calls
    assert (call.index, call.name, call.arguments) == (0, "get_weather", '{"city": "Zürich", "unit": "°C"}')
    assert whole.usage == Usage(0, len(_ids())) and whole.response == writer.final
    for pieces in cuttings(stream, every=7, random_cuts=10):
        again, decoder = read(stream, pieces)
        assert again == text and decoder.finish_reason == "tool_calls" and decoder.usage == whole.usage
        assert [(c.name, c.arguments) for c in decoder.tool_calls] == [(call.name, call.arguments)]


def test_a_cut_reply_reads_as_length_and_a_failure_raises() -> None:
    _, cut = read(write(events_of([_ids("a long reply that goes on")], max_tokens=3, reasoning=False))[0])
    assert cut.finish_reason == "length" and cut.usage == Usage(0, 3)
    failed = [*events_of([_ids("Hi")], reasoning=False)[:-1], ReplyFailed(EngineError("boom"))]
    with pytest.raises(Exception, match="boom"):
        read(write(failed)[0])
    broken = [ReplyFailed(ToolCallError("bad call", code="invalid_tool_call"))]
    with pytest.raises(Exception, match="bad call") as caught:
        read(write(broken)[0])
    assert getattr(caught.value, "code", None) == "invalid_tool_call"


def test_a_stream_without_its_end_is_not_finished() -> None:
    stream, _ = write(events_of([_ids("Hi there")], reasoning=False))
    text, decoder = read(stream[: stream.index(b"event: response.completed")])
    assert text == "Hi there" and not decoder.finished and decoder.finish_reason is None


class _ResponsesOnly:
    """An app that answers ``/v1/chat/completions`` with a 404, as a server that speaks only Responses."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].endswith("/chat/completions"):
            body = b'{"error":{"message":"Not Found","type":"not_found_error","param":null,"code":null}}'
            await send(
                {
                    "type": "http.response.start",
                    "status": 404,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    app, _ = replay_app(CORPUS, rate=None)
    with serve(_ResponsesOnly(app)) as running:
        yield running


def test_the_client_reads_a_responses_stream_into_chat_results(url: str) -> None:
    items: list[Any] = list(
        stream_chat(url + "/v1", [{"role": "user", "content": "hi"}], api="responses", max_tokens=1000)
    )
    *deltas, result = items
    assert isinstance(result, ChatResult) and result.finished and result.finish_reason == "stop"
    assert "".join(d.text for d in deltas) == result.text == CORPUS
    assert result.usage is not None and result.usage.completion_tokens > 0
    assert result.timings.time_to_first_token is not None and len(result.timings.inter_token_gaps) > 1
    cut = list(stream_chat(url + "/v1", [{"role": "user", "content": "hi"}], api="responses", max_tokens=3))[
        -1
    ]
    assert isinstance(cut, ChatResult) and cut.finish_reason == "length"


def test_generate_url_falls_back_to_the_responses_api_and_api_picks_it(url: str) -> None:
    auto = tokenrelay("generate", "--url", url, "--json", "hello")
    chosen = tokenrelay("generate", "--url", url, "--api", "responses", "--max-tokens", "3", "hello")
    chat = tokenrelay("generate", "--url", url, "--api", "chat", "hello")
    assert auto.returncode == 0, auto.stderr
    *deltas, summary = [json.loads(line) for line in auto.stdout.decode().splitlines()]
    assert "".join(d["delta"] for d in deltas) == CORPUS and summary["finish_reason"] == "stop"
    assert chosen.returncode == 0 and "finish: length" in chosen.stderr.decode()
    assert chat.returncode == 2 and "Not Found" in chat.stderr.decode()  # asked for chat: chat's 404

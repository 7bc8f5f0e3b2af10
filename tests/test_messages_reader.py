"""The Messages stream reader (``wire/_messages_reader``) and the clients over it: ``stream_chat(api="messages")``
and ``tokenrelay generate --url … --api messages`` read a Messages stream into the chat result types.

The reader reads what the writer writes at every byte cut of the stream (the SSE parser in between), the calls'
``partial_json`` joined to the model's arguments; it refuses a frame whose name and type differ, a delta for
a block never started, and raises the error an ``error`` event names.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import httpx
import pytest

from _terminal import tokenrelay
from _uvicorn import serve
from server_helpers import replay_app
from test_messages import REPLY, THOUGHT, _ids, reply_events, written
from tokenrelay._errors import ProtocolError, UnavailableError
from tokenrelay.client import ChatResult, stream_chat
from tokenrelay.wire._messages import MessagesReplyWriter
from tokenrelay.wire._messages_reader import MessagesStreamDecoder
from tokenrelay.wire._sse import ServerSentEvent, SSEParser

CORPUS = (Path(__file__).parent / "data" / "multilingual.txt").read_bytes().decode("utf-8")


def read(stream: bytes, cuts: list[int]) -> tuple[str, MessagesStreamDecoder]:
    parser, decoder, text = SSEParser(), MessagesStreamDecoder(), ""
    bounds = [0, *sorted(cuts), len(stream)]
    for a, b in itertools.pairwise(bounds):
        for event in parser.feed(stream[a:b]):
            text += decoder.feed(event)
    parser.close()
    return text, decoder


def frames(reasoning: bool) -> bytes:
    sse, _ = written(reply_events([_ids(THOUGHT + REPLY if reasoning else REPLY)], reasoning=reasoning))
    out = b""
    for e in sse:
        out += f"event: {e.event}\ndata: {e.data}\n\n".encode()
    return out


@pytest.mark.parametrize("reasoning", [False, True])
def test_the_reader_reads_what_the_writer_wrote_at_every_cut(reasoning: bool) -> None:
    stream = frames(reasoning)
    text, whole = read(stream, [])
    assert text == "Let me look: 🌦 विश्व.\n"
    [call] = whole.tool_calls
    assert (call.index, call.id, call.name) == (0, "toolu_0", "get_weather")
    assert call.arguments == '{"city": "Zürich", "unit": "°C"}'
    assert whole.done and whole.finish_reason == "tool_calls" and whole.stop_reason == "tool_use"
    assert whole.usage is not None and whole.usage.completion_tokens > 0
    assert whole.reasoning == ('हम्म 🤔 a "quote"\nand a line' if reasoning else "")
    rng = random.Random(3)
    for cuts in [[c] for c in range(0, len(stream), 7)] + [
        rng.sample(range(len(stream)), 20) for _ in range(20)
    ]:
        cut_text, decoder = read(stream, cuts)
        assert cut_text == text
        assert decoder.tool_calls == whole.tool_calls and decoder.usage == whole.usage


def test_the_reader_refuses_broken_streams_and_raises_in_stream_errors() -> None:
    def event(name: str, data: object) -> ServerSentEvent:
        return ServerSentEvent(name, json.dumps(data))

    decoder = MessagesStreamDecoder()
    assert decoder.feed(ServerSentEvent("ping", '{"type": "ping"}')) == ""
    with pytest.raises(ProtocolError, match="carries data of type"):
        decoder.feed(event("content_block_delta", {"type": "message_stop"}))
    with pytest.raises(ProtocolError, match="not started"):
        decoder.feed(event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {}}))
    with pytest.raises(ProtocolError, match="out of order"):
        decoder.feed(
            event("content_block_start", {"type": "content_block_start", "index": 1, "content_block": {}})
        )
    with pytest.raises(ProtocolError, match="not JSON"):
        decoder.feed(ServerSentEvent("message_start", "{"))
    writer = MessagesReplyWriter(id="m", model="m", input_tokens=1)
    from tokenrelay._reply import ReplyFailed

    [frame] = writer.write(ReplyFailed(UnavailableError("the server is shutting down")))
    [failed] = SSEParser().feed(frame)
    with pytest.raises(UnavailableError, match="shutting down"):
        MessagesStreamDecoder().feed(failed)


def test_stream_chat_reads_a_messages_stream_into_the_chat_result() -> None:
    app, _ = replay_app(CORPUS, rate=None, max_tokens_limit=100_000, api_key="k-1")
    with serve(app) as url:
        items = list(
            stream_chat(url + "/v1", [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
                        model="replay", api_key="k-1", api="messages", max_tokens=100_000)
        )  # fmt: skip
        result = items[-1]
        assert isinstance(result, ChatResult)
        assert "".join(i.text for i in items[:-1]) == result.text == CORPUS  # CRLF, emoji, CJK: exact
        assert result.finish_reason == "stop" and result.finished
        assert result.usage is not None and result.usage.prompt_tokens > 0
        cut = list(stream_chat(url + "/v1", [{"role": "user", "content": "hi"}], model="replay", api_key="k-1",
                               api="messages", max_tokens=3))[-1]  # fmt: skip
        assert isinstance(cut, ChatResult) and cut.finish_reason == "length" and cut.usage is not None
        assert cut.usage.completion_tokens == 3
        with pytest.raises(Exception, match="does not exist"):
            list(stream_chat(url + "/v1", [{"role": "user", "content": "hi"}], model="nope", api_key="k-1",
                             api="messages"))  # fmt: skip
        assert httpx.get(url + "/health").json()["active"] == 0


def test_generate_through_the_messages_api() -> None:
    app, _ = replay_app(None, rate=None)  # replays the prompt: what the server received comes back
    with serve(app) as url:
        proc = tokenrelay("generate", "--url", url, "--api", "messages", "--system", "be brief", "hi ☕")
    assert proc.returncode == 0, proc.stderr
    # The system prompt went as Messages' system, and came back as the first turn of the rendered chat.
    assert proc.stdout.decode() == "system: be brief\nuser: hi ☕\n\n"
    assert "finish: stop" in proc.stderr.decode()

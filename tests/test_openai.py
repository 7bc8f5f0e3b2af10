"""OpenAI shapes: the official SDK's types validate every one, and its own decoders read our frames."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai._streaming import SSEDecoder as SDKDecoder
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessageParam

from _apps import REPLY, USAGE, app
from _uvicorn import serve
from tokenrelay._errors import (
    AuthenticationError,
    EngineError,
    InvalidRequestError,
    NotFoundError,
    PayloadTooLargeError,
    ProtocolError,
    RateLimitError,
    TokenRelayError,
    UseAfterFinishError,
)
from tokenrelay._stream import Usage
from tokenrelay.wire._chat import (
    DONE,
    ChatChunkWriter,
    TextChunkWriter,
    chat_completion,
    error_event,
    json_bytes,
    text_completion,
)
from tokenrelay.wire._chat_reader import ChatStreamDecoder, error_from_body
from tokenrelay.wire._sse import ServerSentEvent, SSEParser


# A writer renders one stream: a new one for each (after its finish() it writes nothing but usage).
def chat_writer() -> ChatChunkWriter:
    return ChatChunkWriter(id="chatcmpl-1", model="smollm2", created=1234, system_fingerprint="fp_1")


def usage_writer() -> ChatChunkWriter:
    return ChatChunkWriter(id="chatcmpl-2", model="smollm2", created=1234, include_usage=True)


def text_writer() -> TextChunkWriter:
    return TextChunkWriter(id="cmpl-1", model="smollm2", created=1234)


MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say hello"}]


def payload(frame: bytes) -> dict[str, object]:
    """The JSON of a single-event frame, read by our own parser."""
    [event] = SSEParser().feed(frame)
    result = json.loads(event.data)
    assert isinstance(result, dict)
    return result


# -- the shapes, validated by the SDK's pydantic types -------------------------------------------------------


def test_chat_chunks_are_what_the_sdk_types_expect() -> None:
    role, delta, finish = (
        payload(f) for f in (chat_writer().role(), chat_writer().delta("Hi"), chat_writer().finish("stop"))
    )
    for chunk in (role, delta, finish):
        assert list(chunk) == ["id", "object", "created", "model", "system_fingerprint", "choices"]
        choices = chunk["choices"]
        assert isinstance(choices, list)
        [choice] = choices
        assert list(choice) == ["index", "delta", "logprobs", "finish_reason"]
        parsed = ChatCompletionChunk.model_validate(chunk, strict=True)
        assert (parsed.id, parsed.object, parsed.created, parsed.model) == (
            "chatcmpl-1",
            "chat.completion.chunk",
            1234,
            "smollm2",
        )
        assert parsed.system_fingerprint == "fp_1"
        assert parsed.choices[0].index == 0 and parsed.choices[0].logprobs is None
    first, middle, last = (ChatCompletionChunk.model_validate(c).choices[0] for c in (role, delta, finish))
    assert (first.delta.role, first.delta.content, first.finish_reason) == ("assistant", "", None)
    assert (middle.delta.role, middle.delta.content, middle.finish_reason) == (None, "Hi", None)
    assert (last.delta.content, last.finish_reason) == (None, "stop")


def test_include_usage_puts_null_usage_on_every_chunk_and_ends_with_a_choiceless_one() -> None:
    for frame in (usage_writer().role(), usage_writer().delta("x"), usage_writer().finish("length")):
        chunk = payload(frame)
        assert chunk["usage"] is None
        ChatCompletionChunk.model_validate(chunk, strict=True)
    last = ChatCompletionChunk.model_validate(payload(usage_writer().usage(Usage(5, 3))), strict=True)
    assert last.choices == []
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (5, 3, 8)
    assert "usage" not in payload(chat_writer().delta("x"))


def test_legacy_text_chunks_and_whole_responses_validate() -> None:
    middle = payload(text_writer().delta("Hi"))
    assert middle["object"] == "text_completion"
    assert middle["choices"] == [{"text": "Hi", "index": 0, "logprobs": None, "finish_reason": None}]
    last = Completion.model_validate(payload(text_writer().finish("stop")), strict=True)
    assert (last.choices[0].text, last.choices[0].finish_reason) == ("", "stop")
    whole = Completion.model_validate(
        text_completion(
            id="cmpl-9", model="m", created=1, text="abc", finish_reason="length", usage=Usage(1, 3)
        ),
        strict=True,
    )
    assert (whole.choices[0].text, whole.usage and whole.usage.total_tokens) == ("abc", 4)
    chat = ChatCompletion.model_validate(
        chat_completion(
            id="chatcmpl-9", model="m", created=1, content="abc", finish_reason="stop", usage=Usage(2, 3)
        ),
        strict=True,
    )
    assert (chat.object, chat.choices[0].message.content, chat.choices[0].message.role) == (
        "chat.completion",
        "abc",
        "assistant",
    )


def test_non_ascii_costs_its_utf8_bytes_not_escapes() -> None:
    word = "नमस्ते"  # 6 code points, 18 bytes of UTF-8; an \\uXXXX escape would be 36
    assert len(chat_writer().delta(word)) - len(chat_writer().delta("")) == len(word.encode()) == 18
    assert len(text_writer().delta(word)) - len(text_writer().delta("")) == 18
    assert json_bytes({"k": word}) == '{"k":"नमस्ते"}'.encode()


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(blacklist_categories=["Cs"])))
def test_a_delta_is_one_data_line_and_carries_the_text_exactly(text: str) -> None:
    frame = chat_writer().delta(text)
    assert frame.startswith(b"data: {") and frame.endswith(b"}\n\n")
    assert frame.count(b"\n") == 2 and b"\r" not in frame
    assert payload(frame)["choices"] == [
        {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None}
    ]
    assert payload(text_writer().delta(text))["choices"][0]["text"] == text  # type: ignore[index]


def test_text_that_is_not_unicode_is_refused_not_garbled() -> None:
    with pytest.raises(UnicodeEncodeError):
        chat_writer().delta("lone \ud800 surrogate")


def test_the_sdk_decoder_reads_our_frames_cut_anywhere() -> None:
    writer = usage_writer()
    stream = b"".join([writer.role(), *map(writer.delta, REPLY), writer.finish("stop")])
    stream += writer.usage(USAGE) + DONE
    ours = [event.data for event in SSEParser().feed(stream)]
    assert ours[-1] == "[DONE]" and len(ours) == len(REPLY) + 4
    for cut in range(0, len(stream), 7):
        sdk = [event.data for event in SDKDecoder().iter_bytes(iter([stream[:cut], stream[cut:]]))]
        assert sdk == ours


# -- errors -------------------------------------------------------------------------------------------------


def test_error_event_is_what_the_sdk_raises_on() -> None:
    frame = error_event(EngineError("the engine crashed", code="engine_failed"))
    assert payload(frame) == {
        "error": {
            "message": "the engine crashed",
            "type": "server_error",
            "param": None,
            "code": "engine_failed",
        }
    }


@pytest.mark.parametrize(
    ("status", "body", "cls", "message"),
    [
        (400, b'{"error": {"message": "bad model", "type": "invalid_request_error", "param": "model"}}',
         InvalidRequestError, "bad model"),
        (401, b'{"error": {"message": "no key", "type": "authentication_error"}}', AuthenticationError, "no key"),
        (404, b'{"detail": "Not Found"}', NotFoundError, "Not Found"),
        (413, b'{"error": "too big"}', PayloadTooLargeError, "too big"),
        (429, b'{"error": {"message": "slow down", "type": "rate_limit_error", "code": 42}}', RateLimitError,
         "slow down"),
        (418, b"I'm a teapot", InvalidRequestError, "HTTP 418: I'm a teapot"),
        (503, b"upstream exploded", TokenRelayError, "HTTP 503: upstream exploded"),
        (200, b'{"error": {"message": "later", "type": "rate_limit_error"}}', RateLimitError, "later"),
        (200, b'{"error": {"message": "boom", "type": "server_error"}}', TokenRelayError, "boom"),
    ],
)  # fmt: skip
def test_error_from_body(status: int, body: bytes, cls: type[TokenRelayError], message: str) -> None:
    error = error_from_body(status, body)
    assert type(error) is cls
    assert error.message == message
    assert error.status_code == (cls.status_code if status == 200 else status)


def test_error_from_body_keeps_param_and_code_and_quotes_at_most_500_characters() -> None:
    error = error_from_body(
        400, b'{"error": {"message": "m", "type": "invalid_request_error", "param": "n", "code": 7}}'
    )
    assert (error.param, error.code) == ("n", "7")
    assert len(error_from_body(500, b"x" * 10_000).message) < 600


# -- the stream decoder ------------------------------------------------------------------------------------


def events(*frames: bytes) -> list[ServerSentEvent]:
    return SSEParser().feed(b"".join(frames))


def test_stream_decoder_reads_deltas_finish_usage_and_done() -> None:
    decoder = ChatStreamDecoder()
    writer = usage_writer()
    stream = events(writer.role(), *map(writer.delta, REPLY), writer.finish("stop"))
    assert "".join(decoder.feed(event) for event in stream) == "".join(REPLY)
    assert decoder.finished and not decoder.done and decoder.finish_reason == "stop"
    assert (decoder.id, decoder.model) == ("chatcmpl-2", "smollm2")
    [usage, done] = events(usage_writer().usage(USAGE), DONE)
    assert decoder.feed(usage) == "" and decoder.usage == USAGE
    assert decoder.feed(done) == "" and decoder.done


def test_stream_decoder_reads_legacy_text_chunks() -> None:
    decoder = ChatStreamDecoder()
    assert [
        decoder.feed(e)
        for e in events(text_writer().delta("a"), text_writer().delta("b"), text_writer().finish("length"))
    ] == [
        "a",
        "b",
        "",
    ]
    assert decoder.finish_reason == "length"


def test_stream_decoder_is_unfinished_until_told() -> None:
    decoder = ChatStreamDecoder()
    for event in events(chat_writer().role(), chat_writer().delta("x")):
        decoder.feed(event)
    assert not decoder.finished


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ("not json", ProtocolError),
        ("[1, 2]", ProtocolError),
        ('{"usage": {"prompt_tokens": "many"}}', ProtocolError),
        ('{"error": {"message": "model overloaded", "type": "server_error"}}', TokenRelayError),
    ],
)
def test_stream_decoder_refuses_what_is_not_a_chunk(data: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        ChatStreamDecoder().feed(ServerSentEvent(data=data))


# Shared with web/chat.js's ChunkReader (tests/web/chat.test.js): one set of rules for reading chunks.
CHUNK_VECTORS = json.loads((Path(__file__).parent / "vectors" / "chat_chunks.json").read_text("utf-8"))[
    "vectors"
]


def read_vector(data: list[str]) -> dict[str, object]:
    """Feed one vector's events to a decoder, up to the first error; what it read, in the vector's terms."""
    decoder = ChatStreamDecoder()
    deltas: list[str] = []
    error = None
    for item in data:
        try:
            text = decoder.feed(ServerSentEvent(data=item))
        except ProtocolError:
            error = "protocol"
            break
        except TokenRelayError:
            error = "server"
            break
        if text:
            deltas.append(text)
    usage = decoder.usage
    return {
        "deltas": deltas,
        "finish_reason": decoder.finish_reason,
        "usage": None
        if usage is None
        else {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens},
        "finished": decoder.finished,
        "error": error,
        "not_chunks": decoder.not_chunks,
        "tool_calls": [
            {"index": c.index, "id": c.id, "name": c.name, "arguments": c.arguments}
            for c in decoder.tool_calls
        ],
    }


@pytest.mark.parametrize("vector", CHUNK_VECTORS, ids=[v["name"] for v in CHUNK_VECTORS])
def test_stream_decoder_on_the_shared_chunk_vectors(vector: dict[str, object]) -> None:
    data = vector["events"]
    assert isinstance(data, list)
    assert read_vector(data) == {k: v for k, v in vector.items() if k not in ("name", "events")}


# -- the official SDK against a real server streaming our frames ------------------------------------------


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with serve(app()) as url:
        yield url + "/v1"


def sdk(base_url: str, *, strict: bool = True) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="test", max_retries=0, _strict_response_validation=strict)


def test_sdk_streams_a_chat_completion(base_url: str) -> None:
    stream = sdk(base_url).chat.completions.create(
        model="ok", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert all(isinstance(chunk, ChatCompletionChunk) for chunk in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "".join(REPLY)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == USAGE.total_tokens


def test_sdk_reads_a_whole_chat_completion(base_url: str) -> None:
    reply = sdk(base_url).chat.completions.create(model="ok", messages=MESSAGES)
    assert reply.choices[0].message.content == "".join(REPLY)
    assert reply.usage is not None and reply.usage.completion_tokens == len(REPLY)


def test_sdk_streams_legacy_completions(base_url: str) -> None:
    # Not strict: the SDK's Completion type says finish_reason is never null, yet every streamed text
    # chunk but the last has null there, from OpenAI itself too.
    chunks = list(sdk(base_url, strict=False).completions.create(model="ok", prompt="Say hello", stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "".join(REPLY)
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == USAGE.prompt_tokens


def test_sdk_raises_our_in_stream_error(base_url: str) -> None:
    stream = sdk(base_url).chat.completions.create(model="error", messages=MESSAGES, stream=True)
    with pytest.raises(openai.APIError, match="the engine crashed"):
        list(stream)


def test_sdk_reads_our_error_response(base_url: str) -> None:
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        sdk(base_url).chat.completions.create(model="no-such-model", messages=MESSAGES, stream=True)


async def test_async_sdk_streams_a_chat_completion(base_url: str) -> None:
    client = openai.AsyncOpenAI(
        base_url=base_url, api_key="test", max_retries=0, _strict_response_validation=True
    )
    stream = await client.chat.completions.create(model="ok", messages=MESSAGES, stream=True)
    text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])
    assert text == "".join(REPLY)
    await client.close()


# -- tool calls (issue 21) ------------------------------------------------------------------------------------


def tool_stream() -> list[bytes]:
    w = chat_writer()
    return [
        w.role(),
        w.delta("Checking."),
        w.tool_call(0, "call_x1", "get_weather"),
        w.tool_arguments(0, '{"city": "'),
        w.tool_arguments(0, '東京 🗼"}'),
        w.tool_call(1, "call_x2", "get_time"),
        w.tool_arguments(1, "{}"),
        w.finish("tool_calls"),
    ]


def test_tool_call_chunks_are_what_the_sdk_types_expect() -> None:
    frames = tool_stream()
    first = payload(frames[2])["choices"]
    assert first == [
        {
            "index": 0,
            "delta": {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_x1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ""},
                    }
                ]
            },
            "logprobs": None,
            "finish_reason": None,
        }
    ]
    later = payload(frames[3])["choices"]
    assert isinstance(later, list)
    assert later[0]["delta"] == {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": "'}}]}
    for frame in frames:
        ChatCompletionChunk.model_validate(payload(frame), strict=True)
    assert ChatCompletionChunk.model_validate(payload(frames[-1])).choices[0].finish_reason == "tool_calls"


def test_the_sdk_accumulates_our_tool_call_stream_into_the_message() -> None:
    from openai.lib.streaming.chat import ChatCompletionStreamState

    state = ChatCompletionStreamState()
    for frame in tool_stream():
        state.handle_chunk(ChatCompletionChunk.model_validate(payload(frame)))
    message = state.get_final_completion().choices[0].message
    assert message.content == "Checking."
    assert message.tool_calls is not None
    assert [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls] == [
        ("call_x1", "get_weather", '{"city": "東京 🗼"}'),
        ("call_x2", "get_time", "{}"),
    ]


def test_our_decoder_reads_our_tool_call_stream() -> None:
    decoder = ChatStreamDecoder()
    parser = SSEParser()
    text = "".join(decoder.feed(e) for frame in tool_stream() for e in parser.feed(frame))
    assert text == "Checking." and decoder.finish_reason == "tool_calls"
    assert [(c.index, c.id, c.name, c.arguments) for c in decoder.tool_calls] == [
        (0, "call_x1", "get_weather", '{"city": "東京 🗼"}'),
        (1, "call_x2", "get_time", "{}"),
    ]


def test_tool_call_frames_carry_token_ids_when_asked() -> None:
    choice = payload(chat_writer().tool_arguments(0, "{}", token_ids=[5, 6]))["choices"]
    assert isinstance(choice, list) and choice[0]["token_ids"] == [5, 6]
    w = chat_writer()
    w.prompt_token_ids([1, 2])
    assert payload(w.tool_call(0, "call_1", "f"))["prompt_token_ids"] == [1, 2]
    w.finish("tool_calls")
    with pytest.raises(UseAfterFinishError):
        w.tool_arguments(0, "x")


def test_a_whole_response_with_tool_calls_validates_with_null_content() -> None:
    def whole(content: str) -> ChatCompletion:
        body = chat_completion(
            id="chatcmpl-t",
            model="m",
            created=1,
            content=content,
            finish_reason="tool_calls",
            usage=Usage(9, 4),
            tool_calls=[("call_1", "get_weather", '{"city": "Paris"}')],
        )
        return ChatCompletion.model_validate(body, strict=True)

    message = whole("").choices[0].message
    assert message.content is None and message.tool_calls is not None
    [call] = message.tool_calls
    assert (call.id, call.type, call.function.name, call.function.arguments) == (  # type: ignore[union-attr]
        "call_1",
        "function",
        "get_weather",
        '{"city": "Paris"}',
    )
    assert whole("Sure.").choices[0].message.content == "Sure."
    plain = chat_completion(id="c", model="m", created=1, content="", finish_reason="stop", usage=Usage(1, 1))
    assert plain["choices"][0]["message"] == {"role": "assistant", "content": "", "refusal": None}  # type: ignore[index]

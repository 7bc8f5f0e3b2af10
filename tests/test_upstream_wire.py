"""The upstream protocols on streams served over a real uvicorn socket and relayed through ``UpstreamEngine``
and tokenrelay's own detokenizer and stop matcher.

SGLang and TGI cannot run here: their streams are written out in the shapes their documentation and source
give (SGLang's ``/generate`` with cumulative and with incremental ``output_ids``, TGI's ``/generate_stream``
events). The ``openai`` reader also reads streams recorded from vLLM 0.32, and the ``llamacpp`` reader streams
recorded from the real llama-server (``tests/data/upstream/``; ``tests/test_upstream_llama_server.py`` runs
against the binary itself when it is built).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from _uvicorn import serve
from tokenrelay import load_tokenizer
from tokenrelay._errors import InvalidRequestError, ProtocolError, RateLimitError, TokenRelayError
from tokenrelay._stream import Finished, TextDelta
from tokenrelay.engines import SamplingParams, stream_events
from tokenrelay.engines._upstream_wire import (
    LlamaCppTextReader,
    OpenAITokenReader,
    Protocol,
    SGLangReader,
)
from tokenrelay.engines._upstream_wire import request as wire_request
from tokenrelay.engines.upstream import UpstreamEngine
from tokenrelay.server import ServerConfig, create_app

TOK = load_tokenizer("smollm2")
TEXT = "Tea ☕ for 🦙 llamas, नमस्ते!"
IDS = TOK.encode(TEXT)
EOS = min(TOK.eos_token_ids)


def sglang_frames(incremental: bool) -> list[bytes]:
    frames = []
    reply = [*IDS, EOS]
    for n in range(1, len(reply) + 1):
        last = n == len(reply)
        meta = {
            "id": "a1b2",
            "finish_reason": {"type": "stop", "matched": EOS} if last else None,
            "prompt_tokens": 4,
            "completion_tokens": n,
            "cached_tokens": 0,
        }
        ids = reply[n - 1 : n] if incremental else reply[:n]
        body = {"text": TOK.decode(ids), "output_ids": ids, "meta_info": meta}
        frames.append(b"data: " + json.dumps(body).encode() + b"\n\n")
    return [*frames, b"data: [DONE]\n\n"]


def tgi_frames() -> list[bytes]:
    frames = []
    reply = [*IDS, EOS]
    for i, token_id in enumerate(reply):
        last = i == len(reply) - 1
        event = {
            "index": i + 1,
            "token": {"id": token_id, "text": TOK.decode([token_id]), "logprob": -0.25, "special": last},
            "generated_text": TEXT if last else None,
            "details": {
                "finish_reason": "eos_token",
                "generated_tokens": len(reply),
                "seed": None,
                "input_length": 4,
            }
            if last
            else None,
        }
        frames.append(b"data:" + json.dumps(event, ensure_ascii=False).encode() + b"\n\n")
    return frames


def llamacpp_frames() -> list[bytes]:
    # One chunk per token, except that a character split over tokens arrives whole in one chunk.
    pieces = ["Tea", " ☕", " for", " 🦙", " ll", "amas", ",", " नमस्ते", "!"]
    assert "".join(pieces) == TEXT
    head = {"created": 1, "id": "chatcmpl-x", "model": "smol", "object": "chat.completion.chunk"}
    frames = []
    for piece in pieces:
        choice = {"finish_reason": None, "index": 0, "delta": {"content": piece}}
        frames.append(b"data: " + json.dumps({**head, "choices": [choice]}).encode() + b"\n\n")
    done = {"finish_reason": "stop", "index": 0, "delta": {}}
    frames.append(b"data: " + json.dumps({**head, "choices": [done]}).encode() + b"\n\n")
    return [*frames, b"data: [DONE]\n\n"]


ROUTES = {
    "/generate": lambda body: sglang_frames(incremental=body.get("incremental", False)),
    "/generate_stream": lambda body: tgi_frames(),
    "/v1/chat/completions": lambda body: llamacpp_frames(),
}


def recorded_app(seen: list[dict[str, object]]) -> Starlette:
    async def handler(request: Request) -> StreamingResponse:
        body = await request.json()
        seen.append(body)
        frames = ROUTES[request.url.path](body)

        async def send() -> AsyncIterator[bytes]:
            for frame in frames:
                yield frame

        return StreamingResponse(send(), media_type="text/event-stream")

    return Starlette(routes=[Route(path, handler, methods=["POST"]) for path in ROUTES])


@pytest.fixture(scope="module")
def recorded() -> Iterator[tuple[str, list[dict[str, object]]]]:
    seen: list[dict[str, object]] = []
    with serve(recorded_app(seen)) as url:
        yield url, seen


async def relay(engine: UpstreamEngine, prompt: object, stops: tuple[str, ...] = ()) -> tuple[str, Finished]:
    params = SamplingParams(max_tokens=100, temperature=0.0)
    text, final = "", None
    async for event in stream_events(engine, prompt, params, stops=stops):  # type: ignore[arg-type]
        if isinstance(event, TextDelta):
            text += event.text
        else:
            final = event
    assert final is not None
    return text, final


@pytest.mark.parametrize("protocol", ["sglang", "tgi"])
async def test_id_protocols_relay_exact_text(
    recorded: tuple[str, list[dict[str, object]]], protocol: str
) -> None:
    url, seen = recorded
    engine = UpstreamEngine([url], TOK, protocol=protocol, health_interval=0)  # type: ignore[arg-type]
    text, final = await relay(engine, "Say it")
    assert text == TEXT and final.reason == "stop" and final.usage.completion_tokens == len(IDS) + 1
    text, final = await relay(engine, "Say it", stops=("🦙",))
    assert text == TEXT[: TEXT.index("🦙")]
    body = seen[-1]
    if protocol == "sglang":
        assert body["text"] == "Say it" and body["stream"] is True
        assert body["sampling_params"] == {"temperature": 0.0, "top_p": 1.0, "max_new_tokens": 100}
    else:
        assert body == {
            "inputs": "Say it",
            "parameters": {"details": True, "do_sample": False, "max_new_tokens": 100},
        }
    with pytest.raises(InvalidRequestError, match="text prompts"):
        await relay(engine, [{"role": "user", "content": "hi"}])
    await engine.aclose()


def test_sglang_reader_reads_cumulative_and_incremental_ids_alike() -> None:
    for incremental in (False, True):
        reader = SGLangReader()
        ids = [i for frame in sglang_frames(incremental) for i in reader.feed(frame.decode()[6:-2]).token_ids]
        assert ids == [*IDS, EOS]


def sglang_event(ids: list[int], completion_tokens: int | None, finish: object = None) -> str:
    meta: dict[str, object] = {"id": "r", "prompt_tokens": 4, "finish_reason": finish}
    if completion_tokens is not None:
        meta["completion_tokens"] = completion_tokens
    return json.dumps({"text": None, "output_ids": ids, "meta_info": meta})


def test_sglang_reader_takes_a_live_cumulative_list_that_ran_ahead_of_its_count() -> None:
    # SGLang's cumulative events pass its live id list, serialized after the count was taken: the list may
    # hold more ids than meta_info.completion_tokens says. Such an event is still cumulative, never new ids.
    reply = IDS[:6]
    events = [([reply[0]], 1), (reply[:4], 2), (reply[:5], 4), (reply, 6)]
    reader = SGLangReader()
    assert [i for ids, n in events for i in reader.feed(sglang_event(ids, n)).token_ids] == reply
    # Incremental deltas coalesced by the server (several ids in one event) are new ids, counts or not.
    for counted in (True, False):
        reader = SGLangReader()
        deltas = [reply[:1], reply[1:3], reply[3:6]]
        out = [
            reader.feed(sglang_event(d, len(reply[: reply.index(d[-1]) + 1]) if counted else None))
            for d in deltas
        ]
        assert [i for chunk in out for i in chunk.token_ids] == reply
    # A final delta whose count also counts an id it left out (a trimmed stop) is still new ids.
    reader = SGLangReader()
    reader.feed(sglang_event(reply[:3], 3))
    assert reader.feed(sglang_event(reply[3:6], 7, {"type": "stop", "matched": EOS})).token_ids == tuple(
        reply[3:6]
    )


def test_sglang_abort_finish_is_the_servers_error() -> None:
    abort = {"type": "abort", "message": "prompt too long", "status_code": 400, "err_type": "BadRequest"}
    with pytest.raises(InvalidRequestError, match="prompt too long"):
        SGLangReader().feed(sglang_event([], 0, abort))
    with pytest.raises(TokenRelayError, match="aborted"):
        SGLangReader().feed(sglang_event([], 0, {"type": "abort", "status_code": 503}))


async def test_llamacpp_server_without_counts_is_relayed_one_token_per_delta(
    recorded: tuple[str, list[dict[str, object]]],
) -> None:
    url, seen = recorded
    engine = UpstreamEngine([url], TOK, protocol="llamacpp", model="smol", health_interval=0)
    text, final = await relay(engine, [{"role": "user", "content": "hi"}])
    assert text == TEXT and final.reason == "stop"
    assert final.usage.completion_tokens == 9  # no timings in these chunks: one token per chunk
    text, _ = await relay(engine, [{"role": "user", "content": "hi"}], stops=("lla",))
    assert text == "Tea ☕ for 🦙 "  # a stop string across two chunks
    assert "return_token_ids" not in seen[-1] and "stop" not in seen[-1]
    await engine.aclose()


def test_openai_reader_tells_from_the_text_how_a_cut_character_ends() -> None:
    reader = OpenAITokenReader()

    def chunk(content: str | None, ids: list[int], *, text: bool = False) -> str:
        choice: dict[str, Any] = {"index": 0, "token_ids": ids, "finish_reason": None}
        if text:
            choice["text"] = content
        else:
            choice["delta"] = {} if content is None else {"content": content}
        return json.dumps({"choices": [choice]})

    assert reader.feed(chunk(" \ufffd", [15107])).stranded == "replace"  # tokenrelay: U+FFFD with the ids
    assert reader.feed(chunk("\ufffd", [15107], text=True)).stranded == "replace"  # (and /v1/completions)
    assert reader.feed(chunk("", [10813])).stranded == "discard"  # vLLM: the ids, no text
    assert reader.feed(chunk(None, [10813])).stranded == "discard"  # a discarding tokenrelay's finish chunk
    assert reader.feed(chunk("ok", [7])).stranded == "discard"
    assert reader.feed(chunk(None, [])).stranded is None  # no ids: says nothing


def test_openai_reader_refuses_text_without_ids_and_maps_in_stream_errors() -> None:
    reader = OpenAITokenReader()
    role = {
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
        "prompt_token_ids": [1, 2],
    }
    assert reader.feed(json.dumps(role)).prompt_tokens == 2
    with pytest.raises(ProtocolError, match="return_token_ids"):
        reader.feed(json.dumps({"choices": [{"index": 0, "delta": {"content": "hi"}}]}))
    error = {"error": {"message": "slow down", "type": "rate_limit_error", "param": None, "code": None}}
    with pytest.raises(RateLimitError, match="slow down"):
        reader.feed(json.dumps(error))


RECORDED = Path(__file__).parent / "data" / "upstream" / "vllm-0.32.0-cpu.json"


def recorded_vllm_app(stream: str) -> Starlette:
    async def handler(request: Request) -> StreamingResponse:
        async def send() -> AsyncIterator[bytes]:
            for frame in stream.encode().split(b"\n\n")[:-1]:  # one write per event, as vLLM sends them
                yield frame + b"\n\n"

        return StreamingResponse(send(), media_type="text/event-stream")

    return Starlette(
        routes=[Route(p, handler, methods=["POST"]) for p in ("/v1/chat/completions", "/v1/completions")]
    )


async def relay_recorded(
    stream: str, request: dict[str, Any], *, protocol: Protocol, fronts: int = 0
) -> tuple[str, Finished]:
    """The text and the finish of a recorded stream, served as it was recorded and relayed by tokenrelay
    (through ``fronts`` tokenrelay servers in between, each an upstream engine over the one below)."""
    prompt = request.get("messages") or request["prompt"]
    with ExitStack() as stack:
        url = stack.enter_context(serve(recorded_vllm_app(stream)))
        for _ in range(fronts):
            below = UpstreamEngine([url], TOK, model="smol", protocol=protocol, health_interval=0)
            url = stack.enter_context(serve(create_app(below, ServerConfig())))
            protocol = "openai"  # a tokenrelay server sends ids whatever it relays
        engine = UpstreamEngine([url], TOK, model="smol", protocol=protocol, health_interval=0)
        params = SamplingParams(max_tokens=request["max_tokens"], temperature=0.0)
        text, final = "", None
        async for event in stream_events(engine, prompt, params):
            if isinstance(event, TextDelta):
                text += event.text
            else:
                final = event
        await engine.aclose()
    assert final is not None
    return text, final


@pytest.mark.parametrize("fronts", [0, 1], ids=["direct", "through-a-front"])
@pytest.mark.parametrize("case", json.loads(RECORDED.read_text("utf-8"))["cases"], ids=lambda c: c["path"])
async def test_streams_recorded_from_vllm_relay_to_vllms_own_text(
    case: dict[str, object], fronts: int
) -> None:
    # Two of the three replies are cut by max_tokens inside a character, which vLLM ends before: so must every
    # tokenrelay, however many are stacked (the one in between sends those ids with no text).
    request = case["request"]
    assert isinstance(request, dict) and isinstance(case["stream"], str)
    text, final = await relay_recorded(case["stream"], request, protocol="openai", fronts=fronts)
    assert text == case["reply"]  # tokenrelay's detokenization of vLLM's ids is vLLM's own text
    assert final.reason == case["finish_reason"]
    first = json.loads(case["stream"].split("\n\n")[0].removeprefix("data: "))
    prompt_ids = first.get("prompt_token_ids") or first["choices"][0]["prompt_token_ids"]
    if not fronts:  # (a front's prompt_token_ids are its own plain rendering of the chat, not vLLM's)
        assert final.usage.prompt_tokens == len(prompt_ids)  # vLLM's count, its chat template included


LLAMA_SERVER = Path(__file__).parent / "data" / "upstream" / "llama-server-b1-0c1e570.json"


@pytest.mark.parametrize(
    "case", json.loads(LLAMA_SERVER.read_text("utf-8"))["cases"], ids=lambda c: f"{c['path']}-{c['usage']}"
)
async def test_streams_recorded_from_llama_server_relay_to_its_own_reply(case: dict[str, Any]) -> None:
    request = case["request"]
    assert (
        request["timings_per_token"] is True and "return_token_ids" not in request and "stop" not in request
    )
    text, final = await relay_recorded(case["stream"], request, protocol="llamacpp")
    assert text == case["reply"]  # llama-server's own non-streamed reply
    assert final.reason == case["finish_reason"]
    # Its counts, also of the tokens that added no text (an emoji's first bytes, the end of sequence).
    assert final.usage.completion_tokens == case["usage"]["completion_tokens"]
    assert final.usage.prompt_tokens == case["usage"]["prompt_tokens"]


def llamacpp_chunk(content: str | None, predicted: int | None, finish: str | None = None) -> str:
    chunk: dict[str, Any] = {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
    if content is not None:
        chunk["choices"][0]["delta"]["content"] = content
    if predicted is not None:
        chunk["timings"] = {"prompt_n": 3, "cache_n": 2, "predicted_n": predicted}
    return json.dumps(chunk)


def test_llamacpp_reader_counts_tokens_and_keeps_a_stop_on_the_last_token_a_stop() -> None:
    reader = LlamaCppTextReader(max_tokens=4)
    first = reader.feed(llamacpp_chunk("🌟", 3))
    assert (first.text, first.tokens, first.prompt_tokens) == ("🌟", 3, 5)  # prompt: evaluated + cached
    assert reader.feed(llamacpp_chunk(None, None, "stop")).finish_reason == "stop"
    usage = json.dumps({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 4}})
    # The 4th token was the end of sequence: counted, it would reach max_tokens and read as "length".
    assert reader.feed(usage).tokens == 0
    reader = LlamaCppTextReader(max_tokens=8)
    reader.feed(llamacpp_chunk("🌟", 3))
    reader.feed(llamacpp_chunk(None, None, "length"))
    assert reader.feed(usage).tokens == 1  # cut inside a character: the token counts, it has no text


# -- the msgspec reader means what the reference reader means ------------------------------------------------

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=5)
)
_any_json = st.recursive(
    _scalars,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=4), kids, max_size=3),
    max_leaves=6,
)
_good_ids = st.lists(st.integers(0, 2**20), max_size=4)
_good_text = st.sampled_from(["", "a", " \ufffd", "\ufffd", "नम", "a\ufffdb"])


def _chunks(weird: bool) -> st.SearchStrategy[dict[str, object]]:
    """Chat and text chunks as vLLM and tokenrelay send them, or (``weird``) with any field of any type."""
    ids, text = (_good_ids | _any_json, _good_text | _any_json) if weird else (_good_ids, _good_text)
    delta = st.fixed_dictionaries({}, optional={"content": text | st.none(), "role": st.just("assistant")})
    choice = st.fixed_dictionaries(
        {"index": st.just(0)},
        optional={
            "delta": (delta | _any_json) if weird else delta,
            "text": text,
            "token_ids": ids,
            "finish_reason": st.sampled_from([None, "stop", "length"]) | (_any_json if weird else st.none()),
            "prompt_token_ids": ids,
            "logprobs": st.none(),
        },
    )
    usage = st.fixed_dictionaries({}, optional={"prompt_tokens": _scalars if weird else st.integers(0, 99)})
    fields: dict[str, st.SearchStrategy[object]] = {
        "choices": (st.lists(choice, max_size=2) | _any_json) if weird else st.lists(choice, max_size=2),
        "prompt_token_ids": ids,
        "usage": (usage | _any_json) if weird else (usage | st.none()),
    }
    if weird:
        fields["error"] = st.none() | st.fixed_dictionaries({"message": st.text(max_size=5)}) | _any_json
    return st.fixed_dictionaries({"id": st.just("chatcmpl-1")}, optional=fields)


def _outcome(reader: OpenAITokenReader, data: str) -> object:
    try:
        return reader.feed(data)
    except Exception as exc:  # the same error, whichever reader raised it
        return (type(exc), str(exc))


@settings(max_examples=400, deadline=None)
@given(
    chunk=st.one_of(_chunks(False), _chunks(False), _chunks(True), _any_json),
    raw=st.sampled_from(["", "[DONE]", "{", "[1]", '{"choices": [{"token_ids": [1e400]}]}']),
)
def test_the_decoding_reader_reads_every_chunk_as_the_reference_reader(chunk: object, raw: str) -> None:
    from tokenrelay.engines.upstream_decode import DecodingOpenAIReader, _decode

    for data in (json.dumps(chunk, ensure_ascii=False), raw):
        assert _outcome(DecodingOpenAIReader(), data) == _outcome(OpenAITokenReader(), data), data
    with contextlib.suppress(Exception):  # (--hypothesis-show-statistics: how many took the typed path)
        hypothesis.event("typed" if _decode(json.dumps(chunk)).choices is not None else "typed, no choices")


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
AS_SCHEMA = {"type": "json_schema", "json_schema": {"name": "c", "schema": SCHEMA, "strict": True}}


@pytest.mark.parametrize(
    ("protocol", "response_format", "where", "expected"),
    [
        ("openai", AS_SCHEMA, ("response_format",), AS_SCHEMA),
        ("openai", {"type": "json_object"}, ("response_format",), {"type": "json_object"}),
        ("llamacpp", AS_SCHEMA, ("json_schema",), SCHEMA),
        ("llamacpp", {"type": "json_object"}, ("json_schema",), {"type": "object"}),
        ("sglang", AS_SCHEMA, ("sampling_params", "json_schema"), json.dumps(SCHEMA)),
        ("sglang", {"type": "json_object"}, ("sampling_params", "json_schema"), '{"type": "object"}'),
        ("tgi", AS_SCHEMA, ("parameters", "grammar"), {"type": "json", "value": SCHEMA}),
        (
            "tgi",
            {"type": "json_object"},
            ("parameters", "grammar"),
            {"type": "json", "value": {"type": "object"}},
        ),
    ],
)
def test_response_format_goes_in_each_protocols_documented_field(
    protocol: Protocol, response_format: dict[str, Any], where: tuple[str, ...], expected: object
) -> None:
    _, body = wire_request(
        protocol,
        "p",
        model=None,
        max_tokens=5,
        temperature=0.0,
        top_p=1.0,
        seed=None,
        response_format=response_format,
    )
    node: Any = body
    for key in where:
        node = node[key]
    assert node == expected
    _, plain = wire_request(protocol, "p", model=None, max_tokens=5, temperature=0.0, top_p=1.0, seed=None)
    assert "response_format" not in json.dumps(plain) and "json_schema" not in json.dumps(plain)
    assert "grammar" not in json.dumps(plain)

"""``tokenrelay serve --engine upstream --upstream-protocol llamacpp`` in front of the real ``llama-server``.

llama.cpp's server (built by ``make llama-server``) serves the embedded SmolLM2 GGUF; tokenrelay's CLI runs in
front of it, and the official ``openai`` SDK talks to both. Its streamed ids are incomplete (a token that ends
inside a UTF-8 character loses its id), so tokenrelay relays its text deltas: the checks are that the text is
llama-server's own non-streamed reply exactly, multi-byte characters included; that usage counts every token
(the ones that added no text too); that stop strings are tokenrelay's; that a client leaving frees
llama-server's slot; and that the front survives a replica going down and says so on ``/health``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from llama_server import LlamaServer, llama_server_binary, running_llama_server
from server_helpers import ServerProcess, read_chat_stream, serve_process

# Prompts whose greedy replies carry multi-byte characters: 3-token emoji, Japanese, Devanagari; one that ends
# with the end-of-sequence token; and one cut by max_tokens inside an emoji (its last token adds no text).
CHATS = [
    ("Write a happy message with three emoji.", 40),
    ("Write a happy message with three emoji.", 7),
    ("How do you say 'thank you' in Japanese?", 48),
    ("Write the word hello in Hindi script.", 48),
    ("Say hi.", 100),
]


@pytest.fixture(scope="module")
def llama() -> Iterator[LlamaServer]:
    with running_llama_server() as server:
        yield server


def front_process(*upstreams: str) -> AbstractContextManager[ServerProcess]:
    argv = ["--engine", "upstream", "--upstream-protocol", "llamacpp", "--health-interval", "0.5"]
    for url in upstreams:
        argv += ["--upstream", url]
    return serve_process(*argv, "--log-level", "warning", timeout=60)


@pytest.fixture(scope="module")
def front(llama: LlamaServer) -> Iterator[str]:
    with front_process(llama.url) as server:
        yield server.url


def sdk(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)


def model_of(url: str) -> str:
    return sdk(url).models.list().data[0].id


def relayed_chat(url: str, content: str, max_tokens: int, **extra: object) -> tuple[str, str | None, object]:
    stream = sdk(url).chat.completions.create(  # type: ignore[call-overload]
        model=model_of(url),
        messages=[{"role": "user", "content": content}],
        temperature=0,
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
        **extra,
    )
    return read_chat_stream(stream)


def whole_chat(url: str, content: str, max_tokens: int) -> openai.types.chat.ChatCompletion:
    """The reply not streamed (llama-server's own, or through the front)."""
    return sdk(url).chat.completions.create(
        model=model_of(url),
        messages=[{"role": "user", "content": content}],
        temperature=0,
        max_tokens=max_tokens,
    )


def test_streamed_text_and_usage_are_llama_servers_own_reply(llama: LlamaServer, front: str) -> None:
    replies, finishes = [], []
    for content, max_tokens in CHATS:
        own = whole_chat(llama.url, content, max_tokens)
        text, finish, usage = relayed_chat(front, content, max_tokens)
        assert text == own.choices[0].message.content, content
        assert finish == own.choices[0].finish_reason, content
        assert own.usage is not None and usage is not None
        # Every token counts, also those that added no text (the emoji's first bytes, the end of sequence).
        assert usage.completion_tokens == own.usage.completion_tokens, content  # type: ignore[attr-defined]
        assert usage.prompt_tokens == own.usage.prompt_tokens, content  # type: ignore[attr-defined]
        replies.append(text)
        finishes.append(finish)
    # The prompts did what they are for: 4-byte and other multi-byte characters, one reply cut inside one.
    assert any(any(ord(c) > 0xFFFF for c in r) for r in replies)
    assert any(any(0x7FF < ord(c) <= 0xFFFF for c in r) for r in replies)
    assert "stop" in finishes and "length" in finishes


def test_responses_and_messages_streams_are_llama_servers_own_reply(llama: LlamaServer, front: str) -> None:
    """The front writes Responses and Messages from llama-server's chat stream: the joined deltas are
    llama-server's own non-streamed reply, the finish maps to each dialect's, usage counts every token."""
    model = model_of(front)
    for content, max_tokens in CHATS[:3]:
        own = whole_chat(llama.url, content, max_tokens)
        assert own.usage is not None
        text, cut = own.choices[0].message.content, own.choices[0].finish_reason == "length"
        user: Any = [{"role": "user", "content": content}]
        stream: Any = sdk(front).responses.create(
            model=model, input=user, temperature=0, max_output_tokens=max_tokens, stream=True
        )
        events = list(stream)
        deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
        last = events[-1]
        assert last.type == ("response.incomplete" if cut else "response.completed"), content
        response = last.response
        assert "".join(deltas) == response.output_text == text, content
        assert response.usage is not None
        assert response.usage.output_tokens == own.usage.completion_tokens, content
        body = {"model": model, "messages": user, "max_tokens": max_tokens, "temperature": 0, "stream": True}
        with httpx.stream("POST", front + "/v1/messages", json=body, timeout=120) as reply:
            events = [json.loads(line[6:]) for line in reply.iter_lines() if line.startswith("data: ")]
        texts = [e["delta"]["text"] for e in events if e["type"] == "content_block_delta"]
        [end] = [e for e in events if e["type"] == "message_delta"]
        assert "".join(texts) == text, content
        assert end["delta"]["stop_reason"] == ("max_tokens" if cut else "end_turn"), content
        assert end["usage"]["output_tokens"] == own.usage.completion_tokens, content
        assert events[-1]["type"] == "message_stop"


def test_legacy_completions_relay_the_same_text(llama: LlamaServer, front: str) -> None:
    prompt, model = "The three primary colours are", model_of(front)
    own = sdk(llama.url).completions.create(model=model, prompt=prompt, temperature=0, max_tokens=24)
    stream = sdk(front).completions.create(
        model=model, prompt=prompt, temperature=0, max_tokens=24, stream=True
    )
    assert "".join(c.choices[0].text for c in stream if c.choices) == own.choices[0].text


def test_stop_strings_are_applied_by_tokenrelay(llama: LlamaServer, front: str) -> None:
    for content, max_tokens in (("Say hi.", 100), ("How do you say 'thank you' in Japanese?", 48)):
        reply = whole_chat(llama.url, content, max_tokens).choices[0].message.content or ""
        assert len(reply) > 8
        # A stop that starts mid-reply (a few characters in, past the first delta) and, for the Japanese reply,
        # is made of multi-byte characters; tokenrelay never sends it to llama-server.
        stop = reply[4:7]
        expected = reply[: reply.index(stop)]
        text, finish, usage = relayed_chat(front, content, max_tokens, stop=[stop])
        assert (text, finish) == (expected, "stop")
        assert 0 < usage.completion_tokens < max_tokens  # type: ignore[attr-defined]


def test_a_client_that_leaves_frees_llama_servers_slot(llama: LlamaServer, front: str) -> None:
    # Greedy SmolLM2 writes this story to any length: left alone, llama-server would decode 1500 tokens.
    before = llama.metric("tokens_predicted_total")
    closed = cancelled_upstream(front, llama.url)
    stream = sdk(front).chat.completions.create(
        model=model_of(front),
        messages=[{"role": "user", "content": "Write a very long story about a dragon."}],
        temperature=0,
        max_tokens=1500,
        stream=True,
    )
    seen = 0
    for chunk in stream:
        seen += bool(chunk.choices and chunk.choices[0].delta.content)
        if seen == 5:
            break
    assert llama.slots_busy() == 1  # still generating while the client reads
    stream.close()
    deadline = time.monotonic() + 10
    while llama.slots_busy() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert llama.slots_busy() == 0  # the slot was released: the request was cancelled, not finished
    decoded = llama.metric("tokens_predicted_total") - before
    time.sleep(0.5)
    assert llama.metric("tokens_predicted_total") - before == decoded < 400  # and nothing more is decoded
    assert cancelled_upstream(front, llama.url) == closed + 1


def cancelled_upstream(front: str, replica: str) -> float:
    """The front's count of requests it closed on ``replica`` before the replica finished them."""
    prefix = f'tokenrelay_upstream_cancelled_total{{replica="{replica}"}} '
    lines = httpx.get(front + "/metrics", timeout=5).text.splitlines()
    return next(float(line.removeprefix(prefix)) for line in lines if line.startswith(prefix))


def wait_for(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.1)


def test_failover_when_a_replica_goes_down_and_health_shows_it() -> None:
    content, max_tokens = "Write the word hello in Hindi script.", 32
    with running_llama_server() as a, running_llama_server() as b, front_process(a.url, b.url) as server:
        url = server.url
        health = httpx.get(url + "/health", timeout=5)
        assert health.status_code == 200
        assert [(r["url"], r["healthy"]) for r in health.json()["replicas"]] == [(a.url, True), (b.url, True)]
        expected = whole_chat(b.url, content, max_tokens).choices[0].message.content

        a.stop()  # replica A goes away: requests go to B, before or after a health check noticed
        for _ in range(3):
            assert relayed_chat(url, content, max_tokens)[0] == expected
        wait_for(lambda: not httpx.get(url + "/health", timeout=5).json()["replicas"][0]["healthy"])
        health = httpx.get(url + "/health", timeout=5)
        assert health.status_code == 200  # B still serves
        replicas = health.json()["replicas"]
        assert [(r["url"], r["healthy"]) for r in replicas] == [(a.url, False), (b.url, True)]
        assert replicas[0]["last_error"] and replicas[1]["requests"] >= 3
        metrics = httpx.get(url + "/metrics", timeout=5).text
        assert f'tokenrelay_upstream_up{{replica="{a.url}"}} 0.0' in metrics

        b.stop()  # no replica left: the front says so, and a request is an OpenAI-shaped 500
        wait_for(lambda: httpx.get(url + "/health", timeout=5).status_code == 503)
        health = httpx.get(url + "/health", timeout=5)
        assert health.status_code == 503 and health.json()["status"] == "no healthy replica"
        with pytest.raises(openai.InternalServerError, match="every upstream replica failed"):
            whole_chat(url, content, max_tokens)  # not streamed: a 500
        with pytest.raises(openai.APIError, match="every upstream replica failed"):
            relayed_chat(url, content, max_tokens)  # streamed: the stream had opened, an error event ends it


def test_a_missing_binary_skips_here_but_fails_in_ci(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TOKENRELAY_LLAMA_SERVER", str(tmp_path / "no-llama-server"))
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="make llama-server"):
        llama_server_binary()
    monkeypatch.setenv("CI", "true")  # CI must run these tests: no silent skip there
    with pytest.raises(pytest.fail.Exception, match="CI must run"):
        llama_server_binary()


CITY = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 20},
        "country": {"type": "string", "maxLength": 20},
    },
    "required": ["city", "country"],
    "additionalProperties": False,
}


def test_response_format_is_enforced_by_llama_server_and_relayed_exactly(
    llama: LlamaServer, front: str
) -> None:
    import jsonschema

    fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY, "strict": True}}
    for content in ("Name a city.", "Where is the Eiffel tower?"):
        own = sdk(llama.url).chat.completions.create(  # type: ignore[call-overload]
            model=model_of(llama.url),
            messages=[{"role": "user", "content": content}],
            temperature=0,
            max_tokens=80,
            response_format=fmt,
        )
        text, finish, _ = relayed_chat(front, content, 80, response_format=fmt)
        assert text == own.choices[0].message.content and finish == own.choices[0].finish_reason == "stop"
        jsonschema.validate(json.loads(text), CITY)
    text, _, _ = relayed_chat(front, "Name a city.", 80, response_format={"type": "json_object"})
    assert isinstance(json.loads(text), dict)


def test_a_huge_enum_is_refused_by_the_front_not_handed_to_llama_server(front: str) -> None:
    fmt = {
        "type": "json_schema",
        "json_schema": {"name": "e", "schema": {"enum": [f"v{i}" for i in range(20000)]}},
    }
    started = time.monotonic()
    with pytest.raises(openai.BadRequestError) as info:
        relayed_chat(front, "Pick one.", 10, response_format=fmt)
    assert time.monotonic() - started < 5
    assert info.value.body["param"] == "response_format.json_schema.schema"  # type: ignore[index]
    assert "20,000 enum values" in info.value.body["message"]  # type: ignore[index]

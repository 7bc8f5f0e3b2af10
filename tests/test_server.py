"""The server on real uvicorn sockets: headers, framing, pacing, keep-alives, cancellation, errors, limits.
What it answers to bad requests, keys and routes is checked in-process (``asgi_client``): no socket needed."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import socket
import subprocess
import time

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from _uvicorn import serve
from server_helpers import asgi_client, raw_post, read_timed, replay_app, split_response
from tiny_tokenizers import corpus_text
from tokenrelay.wire._sse import SSEParser

CHAT = {"model": "replay", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def chat(**overrides: object) -> bytes:
    return json.dumps({**CHAT, **overrides}).encode()


def data_events(chunks: list[bytes]) -> list[str]:
    parser = SSEParser()
    events = [e.data for c in chunks for e in parser.feed(c)]
    return events + [e.data for e in parser.close()]


def test_stream_headers_framing_and_pacing() -> None:
    app, _ = replay_app("Tea is ready: ☕ 🦙 आपका चाय", rate=20.0)
    with serve(app) as url:
        sock = raw_post(
            url,
            "/v1/chat/completions",
            chat(stream_options={"include_usage": True}),
            headers={"Accept-Encoding": "gzip"},
        )
        t0 = time.monotonic()
        timed = read_timed(sock)
        sock.close()
    head, chunks = split_response(b"".join(c for _, c in timed))
    lines = [h.lower() for h in head.split("\r\n")]
    assert lines[0] == "http/1.1 200 ok"
    assert "content-type: text/event-stream; charset=utf-8" in lines
    assert "cache-control: no-cache, no-transform" in lines
    assert "x-accel-buffering: no" in lines
    assert not any(h.startswith(("connection:", "content-encoding:", "content-length:")) for h in lines)
    # One write per event: every HTTP chunk is exactly one SSE frame, and the first is a comment.
    assert chunks[0].startswith(b":")
    assert all(c.endswith(b"\n\n") and c.count(b"\n\n") == 1 for c in chunks)
    payloads = data_events(chunks)
    assert payloads[-1] == "[DONE]"
    objs = [json.loads(p) for p in payloads[:-1]]
    assert objs[0]["choices"][0]["delta"]["role"] == "assistant"
    deltas = [o["choices"][0]["delta"].get("content") for o in objs[1:-2]]
    assert all(deltas) and "".join(deltas) == "Tea is ready: ☕ 🦙 आपका चाय"
    assert not any("\ufffd" in d for d in deltas)
    assert objs[-2]["choices"][0]["finish_reason"] == "stop"
    assert objs[-1]["choices"] == [] and objs[-1]["usage"]["completion_tokens"] > 0
    # Paced at the engine's rate, not in a lump: arrivals spread over time, one recv per token or so.
    arrivals = [t - t0 for t, _ in timed]
    assert arrivals[-1] - arrivals[0] > 0.5
    assert len(timed) >= len(deltas) // 2


def test_headers_and_first_comment_before_the_first_token() -> None:
    app, _ = replay_app("slow start", engine_options={"first_token_delay": 1.5})
    with serve(app) as url:
        sock = raw_post(url, "/v1/chat/completions", chat())
        sock.settimeout(5)
        t0 = time.monotonic()
        first = sock.recv(65536)
        elapsed = time.monotonic() - t0
        sock.close()
    assert first.startswith(b"HTTP/1.1 200")
    assert elapsed < 0.8  # long before the first token (1.5 s)
    if b"\r\n\r\n" in first and first.split(b"\r\n\r\n", 1)[1]:
        assert b": stream open" in first


def test_streams_are_never_compressed_but_other_responses_are() -> None:
    app, _ = replay_app("compress me " * 50)
    with serve(app) as url, httpx.Client() as client:
        docs = client.get(url + "/openapi.json", headers={"Accept-Encoding": "gzip"})
        assert docs.headers.get("content-encoding") == "gzip"
        with client.stream(
            "POST", url + "/v1/chat/completions", content=chat(), headers={"Accept-Encoding": "gzip"}
        ) as r:
            assert "content-encoding" not in r.headers
            assert b"[DONE]" in r.read()


def test_keepalives_while_queued_and_during_prefill() -> None:
    app, _ = replay_app("x " * 30, rate=20.0, max_active=1, keepalive_interval=0.1)
    with serve(app) as url:
        first = raw_post(url, "/v1/chat/completions", chat())
        time.sleep(0.2)  # the first stream holds the only slot for ~1.5 s
        second = raw_post(url, "/v1/chat/completions", chat())
        _, chunks = split_response(b"".join(c for _, c in read_timed(second)))
        read_timed(first)
        first.close()
        second.close()
    before_data = []
    for c in chunks:
        if c.startswith(b"data:"):
            break
        before_data.append(c)
    assert sum(c == b": keep-alive\n\n" for c in before_data) >= 5
    app, _ = replay_app("y", keepalive_interval=0.1, engine_options={"first_token_delay": 0.6})
    with serve(app) as url:
        sock = raw_post(url, "/v1/chat/completions", chat())
        _, chunks = split_response(b"".join(c for _, c in read_timed(sock)))
        sock.close()
    assert chunks.count(b": keep-alive\n\n") >= 3
    assert data_events(chunks)[-1] == "[DONE]"  # keep-alives dispatch nothing


async def test_200_streams_cut_at_random_points_stop_their_generations() -> None:
    # 25 steps/s: a step (40 ms) is longer than the scheduling delays of a loaded 2-core machine, so "at most
    # one step after the cut" measures the server, not the noise.
    app, engine = replay_app(None, rate=25.0, counting=True)
    rng = random.Random(2026)
    with serve(app) as url:
        async with httpx.AsyncClient(timeout=30) as client:

            async def one(i: int) -> float:
                body = {**CHAT, "messages": [{"role": "user", "content": f"stream {i} " + "word " * 40}]}
                cut_after = rng.randint(0, 12)
                async with client.stream("POST", url + "/v1/chat/completions", json=body) as r:
                    seen = 0
                    async for _ in r.aiter_raw():
                        seen += 1
                        if seen > cut_after:
                            break
                return time.monotonic()  # the response is closed: the connection is gone

            cuts: dict[int, float] = {}
            for start in range(0, 200, 50):
                times = await asyncio.gather(*(one(i) for i in range(start, start + 50)))
                cuts.update(zip(range(start, start + 50), times, strict=True))
            deadline = time.monotonic() + 1.0
            while True:
                health = (await client.get(url + "/health")).json()
                if health["active"] == 0 and health["queued"] == 0:
                    break
                assert time.monotonic() < deadline, health
                await asyncio.sleep(0.02)
            metrics = (await client.get(url + "/metrics")).text
    assert len(engine.generations) == 200
    for i, cut in cuts.items():
        gen = engine.generations[f"stream {i} " + "word " * 40]
        after = [t for t in gen.steps if t > cut]
        assert len(after) <= 1, (i, len(after))
        assert gen.closed_at is not None
    cancelled = next(
        line for line in metrics.splitlines() if line.startswith("tokenrelay_cancellations_total")
    )
    assert float(cancelled.split()[-1]) >= 150  # nearly all were cut before their end


def test_a_client_that_stops_reading_is_dropped_after_the_send_timeout() -> None:
    text = corpus_text() * 40
    app, engine = replay_app(text, rate=None, counting=True, send_timeout=0.5, max_tokens_limit=100_000)
    with serve(app) as url:
        host, port = url.removeprefix("http://").split(":")
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((host, int(port)))
        body = chat(max_tokens=100_000)  # ~12 MB of frames: more than the socket buffers hold
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        deadline = time.monotonic() + 20
        while True:  # never read: the server's writes back up until the send times out
            health = httpx.get(url + "/health").json()
            if health["active"] == 0:
                break
            assert time.monotonic() < deadline, "generation still running"
            time.sleep(0.1)
        metrics = httpx.get(url + "/metrics").text
        sock.close()
    gen = next(iter(engine.generations.values()))
    assert gen.closed_at is not None
    assert len(gen.steps) < len(engine.tokenizer.encode(text))  # stopped long before the end
    assert 'tokenrelay_cancellations_total{model="replay"} 1.0' in metrics


def test_an_engine_error_mid_stream_is_an_error_event_then_a_clean_end() -> None:
    app, _ = replay_app("one two three four five six", engine_options={"fail_after": 3})
    with serve(app) as url:
        sock = raw_post(url, "/v1/chat/completions", chat())
        raw = b"".join(c for _, c in read_timed(sock))
        sock.close()
        assert raw.endswith(b"0\r\n\r\n")  # the chunked body was terminated properly
        payloads = data_events(split_response(raw)[1])
        err = json.loads(payloads[-2])
        assert err["error"]["type"] == "server_error" and "fail_after" in err["error"]["message"]
        assert payloads[-1] == "[DONE]"  # and the stream's end marker, as vLLM and our shutdown send it
        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.APIError, match="fail_after"):
            for _ in client.chat.completions.create(model="replay", messages=CHAT["messages"], stream=True):  # type: ignore[call-overload]
                pass
        assert httpx.get(url + "/health").json()["status"] == "ok"  # still serving


def test_one_log_line_per_request_with_separate_timings(caplog: pytest.LogCaptureFixture) -> None:
    app, _ = replay_app("a b c d e f", rate=50.0)
    with caplog.at_level(logging.INFO, logger="tokenrelay.server"), serve(app) as url:
        httpx.post(url + "/v1/chat/completions", content=chat(), timeout=10).read()
        time.sleep(0.1)
    lines = [r.getMessage() for r in caplog.records if r.name == "tokenrelay.server"]
    assert len(lines) == 1
    for field in ("ttft=", "itl_p50=", "itl_p95=", "total=", "tokens=", "finish=stop"):
        assert field in lines[0]


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (b"{not json", 400, None),
        (b"\xff\xfe{}", 400, None),
        (b"[1, 2]", 400, None),
        (json.dumps({"model": 7, "messages": [{"role": "user", "content": "hi"}]}).encode(), 400, "model"),
        (json.dumps({"model": "replay"}).encode(), 400, "messages"),
        (chat(max_tokens="many"), 400, "max_tokens"),
        (chat(max_tokens=0), 400, "max_tokens"),
        (chat(max_tokens=10**6), 400, "max_tokens"),
        (chat(temperature=5), 400, "temperature"),
        (chat(n=2), 400, "n"),
        (chat(logprobs=True), 400, "logprobs"),
        (chat(presence_penalty=0.5), 400, "presence_penalty"),
        (chat(messages=[{"role": "wizard", "content": "hi"}]), 400, "messages.0.role"),
        (chat(stop=[""]), 400, "stop"),
        (chat(model="gpt-9"), 404, "model"),
    ],
)
async def test_bad_requests_get_openai_shaped_errors(body: bytes, status: int, param: str | None) -> None:
    app, _ = replay_app("fine")
    async with asgi_client(app) as client:  # what the server answers: no socket needed
        r = await client.post(
            "/v1/chat/completions", content=body, headers={"Content-Type": "application/json"}
        )
        assert r.status_code == status, r.text
        err = r.json()["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["message"]
        assert err["param"] == param
        ok = await client.post("/v1/chat/completions", content=chat(stream=False))
        assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == "fine"


async def test_body_size_api_key_and_unknown_routes() -> None:
    app, _ = replay_app("fine", max_body_bytes=2000, api_key="sekrit")
    async with asgi_client(app) as client:
        auth = {"Authorization": "Bearer sekrit"}
        big = chat(messages=[{"role": "user", "content": "x" * 5000}])
        r = await client.post("/v1/chat/completions", content=big, headers=auth)
        assert r.status_code == 413 and r.json()["error"]["type"] == "invalid_request_error"
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic sekrit"}):
            r = await client.post("/v1/chat/completions", content=chat(), headers=headers)
            assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        r = await client.get("/v1/nope")
        assert r.status_code == 401  # with a key set, unknown paths need it too (issue 12)
        r = await client.get("/v1/nope", headers=auth)
        assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
        r = await client.post("/v1/chat/completions", content=chat(stream=False), headers=auth)
        assert r.status_code == 200


def test_a_full_queue_answers_429_with_retry_after() -> None:
    app, _ = replay_app("x " * 40, rate=20.0, max_active=1, max_queued=0)
    with serve(app) as url:
        first = raw_post(url, "/v1/chat/completions", chat())
        time.sleep(0.3)
        r = httpx.post(url + "/v1/chat/completions", content=chat())
        assert r.status_code == 429
        assert r.headers["retry-after"] == "1"
        assert r.json()["error"]["type"] == "rate_limit_error"
        read_timed(first)
        first.close()
        assert httpx.post(url + "/v1/chat/completions", content=chat(stream=False)).status_code == 200


async def test_models_health_metrics_and_openapi() -> None:
    app, _ = replay_app("m")
    async with asgi_client(app) as client:
        models = (await client.get("/v1/models")).json()
        assert [m["id"] for m in models["data"]] == ["replay"]
        assert (await client.get("/health")).json()["status"] == "ok"
        await client.post("/v1/chat/completions", content=chat(stream=False))
        metrics = (await client.get("/metrics")).text
        for name in (
            "tokenrelay_ttft_seconds_bucket",
            "tokenrelay_inter_token_seconds_bucket",
            "tokenrelay_e2e_seconds_bucket",
            "tokenrelay_active_generations",
            "tokenrelay_queued_generations",
            "tokenrelay_cancellations_total",
            'tokenrelay_tokens_total{kind="completion",model="replay"}',
            "tokenrelay_errors",
        ):
            assert name in metrics, name
        spec = (await client.get("/openapi.json")).json()
        assert {"/v1/chat/completions", "/v1/completions"} <= set(spec["paths"])


def test_openai_sdk_streaming_plain_stop_usage_and_legacy_completions() -> None:
    text = corpus_text()
    app, _ = replay_app(text, rate=None)
    with serve(app) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        msgs: list[ChatCompletionMessageParam] = [{"role": "user", "content": "corpus please"}]
        stream = client.chat.completions.create(
            model="replay",
            messages=msgs,
            stream=True,
            stream_options={"include_usage": True},
            max_tokens=4000,
        )
        pieces, finish, usage = [], None, None
        for chunk in stream:
            if chunk.choices:
                pieces.append(chunk.choices[0].delta.content or "")
                finish = chunk.choices[0].finish_reason or finish
            if chunk.usage:
                usage = chunk.usage
        assert "".join(pieces) == text  # byte-exact through detokenizer, SSE, network and the SDK
        assert finish == "stop" and usage is not None and usage.completion_tokens > 100
        whole = client.chat.completions.create(model="replay", messages=msgs, max_tokens=4000)
        assert whole.choices[0].message.content == text
        stopped = client.chat.completions.create(model="replay", messages=msgs, stop=["☕"])
        assert stopped.choices[0].message.content == text[: text.index("☕")]
        short = client.chat.completions.create(model="replay", messages=msgs, max_tokens=5)
        assert short.choices[0].finish_reason == "length" and short.usage.completion_tokens == 5  # type: ignore[union-attr]
        legacy = client.completions.create(model="replay", prompt="p", stream=True, max_tokens=4000)
        assert "".join(c.choices[0].text for c in legacy) == text


def test_curl_no_buffer() -> None:
    app, _ = replay_app("curl sees ☕ stream", rate=50.0)
    with serve(app) as url:
        out = subprocess.run(
            [
                "curl",
                "-sN",
                url + "/v1/chat/completions",
                "-H",
                "Content-Type: application/json",
                "-d",
                chat(),
            ],
            capture_output=True,
            timeout=30,
            check=True,
        ).stdout
    assert out.startswith(b": stream open\n\n")
    assert out.endswith(b"data: [DONE]\n\n")
    contents = [
        json.loads(d)["choices"][0]["delta"].get("content", "")
        for d in data_events([out])[:-1]
        if json.loads(d).get("choices")
    ]
    assert "".join(contents) == "curl sees ☕ stream"

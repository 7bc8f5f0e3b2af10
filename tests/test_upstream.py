"""``--engine upstream``: tokenrelay in front of tokenrelay replicas, over real uvicorn sockets.

The replicas are tokenrelay servers over the replay engine (they honour ``return_token_ids``), so routing,
failover, cancellation and error mapping are tested without a model; the client is the official SDK.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, cast

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from _uvicorn import serve
from server_helpers import replay_app, split_response
from tokenrelay import load_tokenizer
from tokenrelay.engines.base import JSONConstraint
from tokenrelay.engines.upstream import UpstreamEngine
from tokenrelay.server import ServerConfig, create_app

TEXT = "Relayed ☕ twice: 🦙 नमस्ते, 你好!\nThe end."
MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


def dead_url() -> str:
    """A loopback port nothing listens on (bound, then closed)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"


@contextmanager
def front(urls: list[str], **engine_options: object) -> Iterator[tuple[str, UpstreamEngine]]:
    options: dict[str, object] = {"model": "replay", "health_interval": 0}
    options.update(engine_options)
    engine = UpstreamEngine(urls, load_tokenizer("smollm2"), **options)  # type: ignore[arg-type]
    with serve(create_app(engine, ServerConfig(max_active=64))) as url:
        yield url, engine


def sdk(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)


def chat_text(url: str, **extra: object) -> str:
    with sdk(url) as client:  # closed, so its pooled socket is not left for the garbage collector
        stream = client.chat.completions.create(  # type: ignore[call-overload]  # **extra: any of the options
            model="replay",
            messages=MESSAGES,
            stream=True,
            **extra,
        )
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def test_relays_exact_text_stops_and_usage_through_the_sdk() -> None:
    app, _ = replay_app(TEXT, rate=None)
    with serve(app) as upstream, front([upstream]) as (url, _engine):
        assert chat_text(url) == TEXT
        assert chat_text(url, stop=["🦙"]) == TEXT[: TEXT.index("🦙")]  # tokenrelay's own stop matcher
        whole = sdk(url).chat.completions.create(model="replay", messages=MESSAGES, max_tokens=4)
        assert whole.choices[0].finish_reason == "length" and whole.usage is not None
        assert whole.usage.completion_tokens == 4
        legacy = openai.OpenAI(
            base_url=url + "/v1", api_key="x", max_retries=0, _strict_response_validation=False
        ).completions.create(model="replay", prompt="p", stream=True)
        assert "".join(c.choices[0].text for c in legacy) == TEXT


def test_a_replica_that_runs_out_of_context_ends_with_length_not_stop() -> None:
    app, replica = replay_app(TEXT, rate=None)
    room = 5
    replica.n_ctx = len(replica.prompt_ids(MESSAGES)) + room  # its sequence fills after 5 tokens
    with serve(app) as upstream, front([upstream]) as (url, _engine):
        chunks = list(
            sdk(url).chat.completions.create(
                model="replay",
                messages=MESSAGES,
                stream=True,
                max_tokens=100,
                stream_options={"include_usage": True},
            )
        )
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert finishes == ["length"]  # the replica's own "length", though our max_tokens was not reached
        usage = chunks[-1].usage
        assert usage is not None and usage.completion_tokens == room
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert TEXT.startswith(text) and text != TEXT


def test_least_loaded_routing_spreads_concurrent_streams() -> None:
    with ExitStack() as stack:
        upstreams = [stack.enter_context(serve(replay_app(TEXT, rate=100.0)[0])) for _ in range(2)]
        url, engine = stack.enter_context(front(upstreams))
        results: list[str] = []
        threads = [threading.Thread(target=lambda: results.append(chat_text(url))) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert results == [TEXT] * 6
        assert [r.requests for r in engine.replicas] == [
            3,
            3,
        ]  # each new stream went to the idle-most replica
        metrics = httpx.get(url + "/metrics").text
        for upstream in upstreams:
            assert f'tokenrelay_upstream_requests_total{{replica="{upstream}"}} 3.0' in metrics
            assert f'tokenrelay_upstream_up{{replica="{upstream}"}} 1.0' in metrics


def test_a_busy_replica_gets_no_new_stream_while_another_is_idle() -> None:
    with ExitStack() as stack:
        upstreams = [stack.enter_context(serve(replay_app(TEXT * 20, rate=50.0)[0])) for _ in range(2)]
        url, engine = stack.enter_context(front(upstreams))
        with httpx.stream("POST", url + "/v1/completions", json={"prompt": "x", "stream": True}) as long:
            lines = long.iter_lines()
            while not next(lines).startswith("data:"):  # the first text: streaming from replica 0
                pass
            assert [r.active for r in engine.replicas] == [1, 0]
            for _ in range(2):  # round robin would send the second one to replica 0
                httpx.post(url + "/v1/completions", json={"prompt": "y", "max_tokens": 2}).raise_for_status()
            assert [r.requests for r in engine.replicas] == [1, 2]


def test_a_dead_replica_is_skipped_and_marked_down() -> None:
    app, _ = replay_app(TEXT, rate=None)
    dead = dead_url()
    with serve(app) as upstream, front([dead, upstream]) as (url, engine):
        for _ in range(3):
            assert chat_text(url) == TEXT
        down, up = engine.replicas
        assert not down.healthy and down.failures == 1 and down.retried_away == 1
        assert up.requests == 3 and up.healthy  # once down, the dead one is not tried while another is up


def test_failure_before_the_first_token_is_retried_elsewhere_but_never_after() -> None:
    failing, _ = replay_app(TEXT, rate=None, engine_options={"fail_after": 0})
    late, _ = replay_app(TEXT, rate=None, engine_options={"fail_after": 3})
    good, _ = replay_app(TEXT, rate=None)
    with serve(failing) as bad, serve(good) as ok, front([bad, ok]) as (url, engine):
        assert chat_text(url) == TEXT  # the in-stream error came before any id: retried on `ok`
        assert engine.replicas[0].retried_away == 1 and engine.replicas[1].requests == 1
    with serve(late) as bad, serve(good) as ok, front([bad, ok]) as (url, engine):
        with pytest.raises(openai.APIError, match="mid-stream"):
            chat_text(url)
        assert engine.replicas[1].requests == 0  # three ids were out: no retry


def test_every_replica_down_is_an_openai_shaped_500_and_4xx_passes_through() -> None:
    with front([dead_url(), dead_url()]) as (url, _):
        reply = httpx.post(url + "/v1/chat/completions", json={"messages": MESSAGES})
        assert reply.status_code == 500
        assert "every upstream replica failed" in reply.json()["error"]["message"]
    app, _ = replay_app(TEXT, rate=None)
    with serve(app) as upstream, front([upstream], model="no-such-model") as (url, engine):
        with pytest.raises(openai.NotFoundError, match="does not exist"):
            sdk(url).chat.completions.create(model="no-such-model", messages=MESSAGES)
        assert engine.replicas[0].healthy  # the replica answered; the request was wrong


def test_a_client_that_leaves_closes_the_upstream_request() -> None:
    app, counting = replay_app(TEXT * 50, rate=40.0, counting=True)
    with serve(app) as upstream, front([upstream]) as (url, engine):
        with httpx.stream(
            "POST",
            url + "/v1/chat/completions",
            json={"messages": MESSAGES, "stream": True, "max_tokens": 2000},
        ) as response:
            seen = 0
            for line in response.iter_lines():
                seen += line.startswith("data:")
                if seen == 4:
                    break
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and counting.generations["hi"].closed_at is None:
            time.sleep(0.02)
        generation = counting.generations["hi"]
        assert generation.closed_at is not None  # the replica's generation stopped
        steps = len(generation.steps)
        time.sleep(0.3)
        assert len(generation.steps) == steps < 100  # and computes nothing more
        assert engine.replicas[0].cancelled == 1 and engine.replicas[0].active == 0


async def test_health_checks_bring_a_replica_back() -> None:
    app, _ = replay_app(TEXT, rate=None)
    with serve(app) as upstream:
        engine = UpstreamEngine([upstream], load_tokenizer("smollm2"), model="replay", health_interval=0)
        engine.replicas[0].down("pretend")
        await engine.check_health()
        assert engine.replicas[0].healthy
        dead = UpstreamEngine([dead_url()], load_tokenizer("smollm2"), health_interval=0)
        await dead.check_health()
        assert not dead.replicas[0].healthy and "health" in dead.replicas[0].last_error
        await engine.aclose()
        await dead.aclose()


def test_cli_builds_the_engine_from_its_options() -> None:
    from tokenrelay._errors import ConfigError
    from tokenrelay.cli import _build_engine, build_parser

    app, _ = replay_app(TEXT, rate=None)
    with serve(app) as upstream:
        base = ["serve", "--engine", "upstream", "--upstream", upstream + "/v1", "--upstream", dead_url()]
        with pytest.raises(ConfigError, match="--tokenizer"):  # the model ("replay") names no tokenizer
            _build_engine(build_parser().parse_args(base))
        engine = _build_engine(build_parser().parse_args([*base, "--tokenizer", "smollm2"]))
        assert isinstance(engine, UpstreamEngine)
        assert engine.model == "replay"  # read from the first replica's /v1/models
        assert engine.replicas[0].url == upstream  # a trailing /v1 is the same server
        with pytest.raises(ConfigError, match="--upstream"):
            _build_engine(build_parser().parse_args(["serve", "--engine", "upstream"]))


def test_cli_passes_vllms_parallel_options_through(monkeypatch: pytest.MonkeyPatch) -> None:
    from tokenrelay.cli import _build_engine, build_parser
    from tokenrelay.engines import vllm

    seen: dict[str, object] = {}

    def load(model: str, **options: object) -> str:  # vLLM itself is tested in tests/with_vllm
        seen.update(options, model=model)
        return "engine"

    monkeypatch.setattr(vllm.VLLMEngine, "load", load)
    argv = ["serve", "--engine", "vllm", "--tensor-parallel-size", "2", "--pipeline-parallel-size", "2"]
    argv += ["--data-parallel-size", "2", "--distributed-executor-backend", "ray", "--max-model-len", "4096"]
    argv += ["--dtype", "bfloat16", "--enforce-eager", "--reasoning-parser", "qwen3"]
    assert _build_engine(build_parser().parse_args(argv)) == "engine"  # type: ignore[comparison-overlap]
    assert seen == {
        "model": "smollm2",
        "tensor_parallel_size": 2,
        "pipeline_parallel_size": 2,
        "data_parallel_size": 2,
        "distributed_executor_backend": "ray",
        "max_model_len": 4096,
        "dtype": "bfloat16",
        "enforce_eager": True,
        "seed": None,
        "on_progress": seen["on_progress"],
        "reasoning_parser": "qwen3",  # vLLM enforces thinking budgets in the format's tags
    }


def test_health_lists_the_replicas_and_is_503_when_none_is_up() -> None:
    app, _ = replay_app(TEXT, rate=None)
    dead = dead_url()
    with serve(app) as upstream, front([upstream, dead]) as (url, engine):
        health = httpx.get(url + "/health")  # the first look probes every replica
        assert health.status_code == 200 and health.json()["status"] == "ok"
        replicas = health.json()["replicas"]
        assert [(r["url"], r["healthy"]) for r in replicas] == [(upstream, True), (dead, False)]
        assert replicas[0]["last_error"] is None and "health" in replicas[1]["last_error"]
        assert chat_text(url) == TEXT
        assert httpx.get(url + "/health").json()["replicas"][0]["requests"] == 1
        engine.replicas[0].down("pretend")  # as a failed request or health check leaves it
        health = httpx.get(url + "/health")
        assert health.status_code == 503 and health.json()["status"] == "no healthy replica"
    with front([dead_url()]) as (url, _):
        assert httpx.get(url + "/health").status_code == 503


def test_the_engines_package_declares_every_engine_and_imports_none() -> None:
    import subprocess
    import sys

    from tokenrelay import engines
    from tokenrelay.cli import build_parser

    parser = build_parser()  # the CLI offers exactly the declared engines, the first by default
    assert parser.parse_args(["serve"]).engine == next(iter(engines.ENGINES)) == "llamacpp"
    assert [parser.parse_args(["serve", "--engine", n]).engine for n in engines.ENGINES] == list(
        engines.ENGINES
    )
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--engine", "nope"])
    for name, (module, cls) in engines.ENGINES.items():
        assert engines.engine_class(name) is getattr(engines, cls)
        assert getattr(engines, cls).__module__ == module and cls in engines.__all__
    assert engines.__all__ == sorted(engines.__all__, key=lambda n: (not n.isupper(), n))
    code = (
        "import sys, tokenrelay.engines as e; "
        "assert not [m for m in sys.modules if m.startswith('tokenrelay.engines.') and m[19:] in "
        "('llamacpp', 'replay', 'upstream', 'vllm')], sorted(sys.modules); "
        "e.VLLMEngine, e.LlamaCppEngine; assert 'vllm' not in sys.modules and 'llama_cpp' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    with pytest.raises(ValueError, match="unknown engine"):
        engines.engine_class("nope")


CUT_TEXT = "Tea \ufffd🦙 ok"  # a literal U+FFFD the model wrote, then an emoji of three byte tokens


def close_all(sdks: dict[str, openai.OpenAI]) -> None:
    for client in sdks.values():
        client.close()


def reply_text(
    client: httpx.Client, sdks: dict[str, openai.OpenAI], url: str, max_tokens: int, *, stream: bool
) -> str:
    """The reply's text, whole (``message.content``) or joined from the stream as the official SDK reads it
    (``sdks``: one SDK client per server, made once: each costs ~0.1 s)."""
    body = {"messages": MESSAGES, "max_tokens": max_tokens}
    if not stream:
        reply = client.post(url + "/v1/chat/completions", json=body)
        reply.raise_for_status()
        return str(reply.json()["choices"][0]["message"]["content"])
    if url not in sdks:
        sdks[url] = sdk(url)
    chunks = sdks[url].chat.completions.create(
        model="replay", messages=MESSAGES, max_tokens=max_tokens, stream=True
    )
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


@pytest.mark.parametrize("policy", ["replace", "discard"])
def test_a_reply_cut_inside_a_character_ends_as_on_the_upstream_through_one_and_two_fronts(
    policy: str,
) -> None:
    # "replace" is tokenrelay's own server (U+FFFD, as the tokenizer's decode); "discard" is vLLM's rule, set on
    # the bottom server's engine. Every cut, streamed and not, must give the bottom's own text through any
    # number of fronts, though each front decodes the ids itself.
    app, bottom = replay_app(CUT_TEXT, rate=None)
    bottom.stranded = policy
    tok = load_tokenizer("smollm2")
    ids = tok.encode(CUT_TEXT)
    emoji = ids.index(tok.encode("🦙")[0])
    with ExitStack() as stack:
        upstream = stack.enter_context(serve(app))
        one, _ = stack.enter_context(front([upstream]))
        two, _ = stack.enter_context(front([one]))
        client = stack.enter_context(httpx.Client())  # one client: a new one per request costs ~0.1 s
        sdks: dict[str, openai.OpenAI] = {}
        stack.callback(close_all, sdks)
        for n in (emoji, emoji + 1, emoji + 2, emoji + 3, len(ids) + 1):  # around the emoji, and the whole
            own = reply_text(client, sdks, upstream, n, stream=False)
            assert reply_text(client, sdks, upstream, n, stream=True) == own
            for url in (one, two):
                assert reply_text(client, sdks, url, n, stream=True) == own, (n, url == two)
                assert reply_text(client, sdks, url, n, stream=False) == own, (n, url == two)
        # The cuts after the emoji's first and second byte: the model's own U+FFFD, then the stranded bytes'.
        for n in (emoji + 1, emoji + 2):
            expected = "Tea \ufffd\ufffd" if policy == "replace" else "Tea \ufffd"
            assert (
                reply_text(client, sdks, two, n, stream=True)
                == reply_text(client, sdks, upstream, n, stream=False)
                == expected
            )


def test_a_slow_client_gets_the_tokens_that_arrived_meanwhile_merged_into_whole_frames() -> None:
    # The replica sends as fast as it can; the client reads 2 KiB every 10 ms through a small receive buffer.
    # While the front waits for the client, the replica's events queue up and leave as one frame: exact text,
    # whole characters, one event per write (one HTTP chunk each).
    from tiny_tokenizers import corpus_text

    text = corpus_text() * 3
    app, _ = replay_app(text, rate=None)
    with serve(app) as upstream, front([upstream]) as (url, _):
        host, port = url.removeprefix("http://").split(":")
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((host, int(port)))
        body = json.dumps({"messages": MESSAGES, "stream": True, "max_tokens": 4096}).encode()
        head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        sock.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        raw = b""
        while not raw.endswith(b"0\r\n\r\n"):
            piece = sock.recv(2048)
            assert piece, raw[:300] + b" ... " + raw[-300:]
            raw += piece
            time.sleep(0.01)
        sock.close()
    chunks = split_response(raw)[1]
    events = [c for c in chunks if c.startswith(b"data: {")]
    assert all(c.endswith(b"\n\n") and c.count(b"\n\n") == 1 for c in chunks)  # one whole event per write
    deltas = [json.loads(c[6:])["choices"] for c in events]
    pieces = [d[0]["delta"].get("content") or "" for d in deltas if d]
    assert "".join(pieces) == text  # (a character broken between frames would show as an extra U+FFFD)
    tokens = len(load_tokenizer("smollm2").encode(text))
    assert tokens / len([p for p in pieces if p]) > 3  # merged: several tokens per frame on average


async def test_a_consumer_that_falls_behind_pauses_reading_from_the_replica() -> None:
    from tiny_tokenizers import corpus_text
    from tokenrelay.engines.upstream_client import HIGH_WATER, ReplicaConnections

    app, _ = replay_app(corpus_text() * 20, rate=None)  # 4,096 tokens asked, ~1 MB of chunks, sent at once
    with serve(app) as upstream:
        pool = ReplicaConnections(upstream)
        body = json.dumps({"messages": MESSAGES, "stream": True, "max_tokens": 4096}).encode()
        response = await pool.post("/v1/chat/completions", body)
        await asyncio.sleep(1.0)  # not reading: the replica's stream must stop at the high water mark
        assert response._buffered <= HIGH_WATER + 256 * 1024  # (the mark, and what one read can add)
        conn = next(iter(pool._open))
        assert conn._paused
        events = 0
        while batch := await response.next_events():
            events += len(batch)
        assert events > 2500 and not conn._paused  # every event, once the consumer took them
        response.release()
        pool.close()


def test_response_format_reaches_a_tokenrelay_replica_and_its_refusals_come_back() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    seen: list[object] = []
    app, inner = replay_app('{"city": "Zürich"}', rate=None)
    generate = inner.generate

    def spy(prompt: Any, params: Any, **kwargs: Any) -> Any:
        seen.append(params.constraint)
        return generate(prompt, params, **kwargs)

    inner.generate = spy
    with serve(app) as upstream, front([upstream]) as (url, _engine):
        fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": schema, "strict": True}}
        assert json.loads(chat_text(url, response_format=fmt)) == {"city": "Zürich"}
        assert chat_text(url, response_format={"type": "json_object"}) == '{"city": "Zürich"}'
        # The front checks a schema itself first: a bad one never reaches the replica.
        with pytest.raises(openai.BadRequestError) as info:
            chat_text(
                url,
                response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": {"not": {}}}},
            )
        assert info.value.body["param"] == "response_format.json_schema.schema.not"  # type: ignore[index]
        # Cut by max_tokens on the replica: the front relays the cut text and its "length", nothing closed.
        with sdk(url) as client:
            chunks = list(
                client.chat.completions.create(
                    model="replay",
                    messages=MESSAGES,
                    max_tokens=3,
                    response_format=cast(Any, fmt),
                    stream=True,
                )
            )
        choices = [c.choices[0] for c in chunks if c.choices]
        cut = "".join(c.delta.content or "" for c in choices)
        assert choices[-1].finish_reason == "length"
        assert '{"city": "Zürich"}'.startswith(cut) and 0 < len(cut) < len('{"city": "Zürich"}')
    city = JSONConstraint(json.dumps(schema, separators=(",", ":")), name="city", strict=True)
    assert seen == [city, JSONConstraint(), city]  # the bad schema never reached the replica

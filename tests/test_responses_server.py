"""``POST /v1/responses`` on the server (issue 29 §1 and §3): the request's fields, the store, hostile input and
faults, on the replay engine (SmolLM2's tokenizer).

Every client mistake is a 4xx in OpenAI's error shape whose ``param`` names the field (never a 5xx, never
silently ignored); the store keeps what ended, bounded by count and bytes, and nothing a client left half-way.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from _uvicorn import serve_relay
from server_helpers import asgi_client, raw_post, replay_app, serve_process
from tokenrelay.server.responses_store import ResponseStore

REPLY = "Fine, thanks 🦙."
TOOL = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "replay", "input": "hi", **fields}


def error_of(r: httpx.Response, status: int = 400) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err  # type: ignore[no-any-return]


BAD: list[tuple[dict[str, Any], str, str | None]] = [
    # (fields, the param named, a word the message must hold)
    ({"input": 5}, "input", None),
    ({"input": []}, "input", None),
    ({"input": [5]}, "input.0", None),
    ({"input": [{"type": "bogus"}]}, "input.0.type", "bogus"),
    ({"input": [{"role": "wizard", "content": "x"}]}, "input.0.role", "wizard"),
    ({"input": [{"role": "user"}]}, "input.0.content", None),
    (
        {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
        "input.0.content.0.type",
        "input_image",
    ),
    ({"input": [{"role": "user", "content": [{"type": "input_text"}]}]}, "input.0.content.0.text", None),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input.0.call_id", None),
    ({"input": [{"type": "function_call_output", "call_id": "c1", "output": "x"}]}, "input.0.call_id", "c1"),
    ({"input": "a\ud800"}, "input", None),
    ({"instructions": 5}, "instructions", None),
    ({"tools": [{"type": "telepathy"}]}, "tools.0.type", "telepathy"),
    ({"tools": [{"type": "web_search"}, {"type": "function", "name": "bad name!"}]}, "tools.1.name", None),
    ({"tools": [TOOL, TOOL]}, "tools.1.name", None),
    ({"tools": [{**TOOL, "parameters": {"type": "string"}}]}, "tools.0.parameters", None),
    ({"tools": [{**TOOL, "parameters": {"type": 5}}]}, "tools.0.parameters", None),
    ({"tools": [TOOL] * 1000}, "tools", "1000"),
    ({"tool_choice": "required"}, "tool_choice", None),
    ({"tools": [TOOL], "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice.name", "nope"),
    (
        {"tools": [TOOL], "tool_choice": {"type": "allowed_tools", "tools": []}},
        "tool_choice",
        "allowed_tools",
    ),
    ({"text": {"format": {"type": "xml"}}}, "text.format.type", "xml"),
    ({"text": {"format": {"type": "json_schema", "schema": {}}}}, "text.format.name", None),
    (
        {"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": 5}}}},
        "text.format.schema",
        None,
    ),
    (
        {"text": {"format": {"type": "json_schema", "name": "x", "schema": {"not": {}}}}},
        "text.format.schema",
        None,
    ),
    ({"tools": [TOOL], "text": {"format": {"type": "json_object"}}}, "text.format", None),
    ({"max_output_tokens": 0}, "max_output_tokens", None),
    ({"max_output_tokens": 10**7}, "max_output_tokens", None),
    ({"temperature": 3}, "temperature", None),
    ({"top_p": 0}, "top_p", None),
    ({"stream": "yes"}, "stream", None),
    ({"background": True}, "background", "background"),
    ({"truncation": "auto"}, "truncation", "auto"),
    ({"conversation": "conv_1"}, "conversation", None),
    ({"prompt": {"id": "pmpt_1"}}, "prompt", None),
    ({"metadata": {"k": 5}}, "metadata.k", None),
]


@pytest.mark.parametrize("stream", [False, True])
async def test_every_bad_field_is_a_400_naming_it(stream: bool) -> None:
    app, _ = replay_app(REPLY, rate=None)
    async with asgi_client(app) as client:
        for fields, param, word in BAD:
            content = json.dumps(
                body(**{"stream": stream, **fields})
            ).encode()  # ASCII: a lone surrogate escaped
            r = await client.post("/v1/responses", content=content)
            err = error_of(r)
            assert err["param"] == param or err["param"].startswith(param + "."), (fields, err)
            assert word is None or word in err["message"], (fields, err)
        for raw in (b"", b"{", b"[]", b'{"input": NaN}', b"\xff"):
            error_of(await client.post("/v1/responses", content=raw))
        ok = await client.post("/v1/responses", json=body(stream=stream))
        assert ok.status_code == 200


async def test_built_in_tools_are_left_out_and_named_and_the_request_is_echoed() -> None:
    app, _ = replay_app(REPLY, rate=None)
    async with asgi_client(app) as client:
        fields = {
            "instructions": "Be brief.",
            "tools": [{"type": "web_search"}, TOOL, {"type": "namespace", "name": "ns", "tools": []}],
            "tool_choice": "auto",
            "metadata": {"run": "7"},
            "reasoning": {"effort": "low"},
            "store": False,
            "include": ["reasoning.encrypted_content"],
            "text": {"format": {"type": "text"}, "verbosity": "low"},
        }
        r = (await client.post("/v1/responses", json=body(**fields))).json()
    assert r["tokenrelay"] == {"tools_left_out": ["web_search", "namespace"]}
    assert [t["name"] for t in r["tools"]] == ["get_weather"]
    assert r["instructions"] == "Be brief." and r["metadata"] == {"run": "7"} and r["store"] is False
    assert r["reasoning"]["effort"] == "low" and r["output"][0]["content"][0]["text"] == REPLY


async def test_the_store_keeps_ended_responses_and_forgets_what_store_false_asks() -> None:
    app, _ = replay_app(REPLY, rate=None)
    async with asgi_client(app) as client:
        kept = (await client.post("/v1/responses", json=body())).json()
        unkept = (await client.post("/v1/responses", json=body(store=False))).json()
        assert (await client.get(f"/v1/responses/{kept['id']}")).json() == kept
        err = error_of(await client.get(f"/v1/responses/{unkept['id']}"), 404)
        assert unkept["id"] in err["message"] and err["code"] == "response_not_found"
        # continued: the stored conversation comes first
        more = await client.post("/v1/responses", json=body(previous_response_id=kept["id"], input="and?"))
        assert more.status_code == 200 and more.json()["previous_response_id"] == kept["id"]
        assert more.json()["usage"]["input_tokens"] > kept["usage"]["input_tokens"]
        deleted = await client.delete(f"/v1/responses/{kept['id']}")
        assert deleted.json() == {"id": kept["id"], "object": "response", "deleted": True}
        error_of(await client.get(f"/v1/responses/{kept['id']}"), 404)
        error_of(await client.delete(f"/v1/responses/{kept['id']}"), 404)
        err = error_of(await client.post("/v1/responses", json=body(previous_response_id=kept["id"])), 404)
        assert err["param"] == "previous_response_id" and kept["id"] in err["message"]
        r = await client.request("PUT", f"/v1/responses/{kept['id']}")
        assert r.status_code == 405 and set(r.headers["allow"].split(", ")) == {"GET", "DELETE"}


def test_the_store_is_bounded_by_count_and_bytes_oldest_first() -> None:
    store = ResponseStore(max_responses=3, max_bytes=10_000)
    for i in range(5):
        store.put({"id": f"r{i}", "output": []}, [{"role": "user", "content": "x" * 100}])
    assert len(store) == 3 and [store.get(f"r{i}").body[:10] for i in (2, 3, 4)]
    with pytest.raises(Exception, match="r0"):
        store.get("r0")
    small = ResponseStore(max_responses=100, max_bytes=2_000)
    for i in range(10):
        small.put({"id": f"s{i}", "output": []}, [{"role": "user", "content": "y" * 500}])
    assert 0 < len(small) < 10 and small.bytes <= 2_000
    small.get("s9")  # the newest stays
    huge = ResponseStore(max_bytes=100)
    huge.put({"id": "big", "output": []}, [{"role": "user", "content": "z" * 1000}])
    assert len(huge) == 0  # larger than the whole budget: not kept


async def test_a_chain_that_outgrows_the_context_is_context_length_exceeded() -> None:
    app, engine = replay_app(REPLY * 4, rate=None)
    engine.n_ctx = 160
    async with asgi_client(app) as client:
        previous = None
        for _ in range(20):
            r = await client.post("/v1/responses", json=body(previous_response_id=previous, input="more"))
            if r.status_code != 200:
                break
            previous = r.json()["id"]
        err = error_of(r)
        assert err["code"] == "context_length_exceeded" and err["param"] == "input"
        assert previous is not None  # some turns fitted first


def test_a_client_that_leaves_mid_stream_stops_the_generation_and_nothing_is_stored() -> None:
    app, engine = replay_app(REPLY * 200, rate=200, counting=True)
    with serve_relay(app) as url:
        payload = json.dumps(body(stream=True, input="leave early", max_output_tokens=4000)).encode()
        sock = raw_post(url, "/v1/responses", payload)
        sock.settimeout(10)
        data = b""
        while data.count(b"response.output_text.delta") < 5:
            data += sock.recv(65536)
        response_id = data.split(b'"id":"', 1)[1].split(b'"', 1)[0].decode()
        sock.close()
        record = engine.generations["leave early"]
        deadline = time.monotonic() + 5
        while record.closed_at is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert record.closed_at is not None  # the engine's step loop was closed
        steps = len(record.steps)
        time.sleep(0.2)
        assert len(record.steps) == steps < 200  # no step after the client left
        r = httpx.get(f"{url}/v1/responses/{response_id}")
        assert r.status_code == 404  # nothing half-done that would read as complete


def test_keepalives_and_shutdown_end_a_responses_stream_in_its_own_dialect() -> None:
    app, _ = replay_app(REPLY, rate=None, engine_options={"first_token_delay": 0.5}, keepalive_interval=0.1)
    with serve_relay(app) as url:
        r = httpx.post(url + "/v1/responses", json=body(stream=True), timeout=10)
    assert r.text.count(": keep-alive") >= 2 and "event: response.completed" in r.text
    frames = [f for f in r.text.split("\n\n") if f.startswith("event:")]
    assert frames[-1].startswith("event: response.completed")


def test_a_shutdown_interrupt_is_an_error_event_then_response_failed() -> None:
    app, _ = replay_app(REPLY * 200, rate=100)
    server = app.state.tokenrelay
    with serve_relay(app) as url, httpx.stream("POST", url + "/v1/responses", json=body(stream=True)) as r:
        text = ""
        for chunk in r.iter_text():
            text += chunk
            if "output_text.delta" in text and not server.draining:
                # as SIGTERM does (server.run), on the server's loop: a grace period of 0
                _loop_of(server).call_soon_threadsafe(server.drain, 0.0)
    frames = [f for f in text.split("\n\n") if f.startswith("event:")]
    kinds = [f.split("\n", 1)[0].removeprefix("event: ") for f in frames]
    assert kinds[-5:] == [
        "error",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.failed",
    ]
    assert "server_shutting_down" in frames[-5] and '"status":"incomplete"' in frames[-2]
    numbers = [json.loads(f.split("data: ", 1)[1])["sequence_number"] for f in frames]
    assert numbers == list(range(len(frames)))


def _loop_of(server: Any) -> asyncio.AbstractEventLoop:
    """The event loop the app's server runs on: that of its running stream's task."""
    run = next(iter(server.live))
    return run.response._host.get_loop()  # type: ignore[no-any-return]


def test_with_workers_each_finds_its_own_responses_and_others_say_why_not(tmp_path: Any) -> None:
    reply = tmp_path / "reply.txt"
    reply.write_text(REPLY)
    args = ("--engine", "replay", "--text-file", str(reply), "--rate", "0", "--workers", "2")
    with serve_process(*args, timeout=120) as server:
        ids = []
        for _ in range(8):  # a new connection each: the kernel spreads them over the workers
            with httpx.Client(base_url=server.url, timeout=30) as client:
                ids.append(client.post("/v1/responses", json=body()).json()["id"])
        found = missing = 0
        for response_id in ids * 2:
            with httpx.Client(base_url=server.url, timeout=30) as client:
                r = client.get(f"/v1/responses/{response_id}")
            if r.status_code == 200:
                found += 1
                assert r.json()["id"] == response_id
            else:
                err = error_of(r, 404)
                assert response_id in err["message"] and "2 worker processes" in err["message"]
                missing += 1
        assert found > 0  # each worker serves its own; the others' are a 404 that says why


async def test_openapi_and_docs_describe_the_endpoint_and_the_stored_responses() -> None:
    app, _ = replay_app(REPLY, rate=None)
    async with asgi_client(app) as client:
        spec = (await client.get("/openapi.json")).json()
        docs = (await client.get("/docs")).text
    post = spec["paths"]["/v1/responses"]["post"]
    assert post["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ResponsesRequest"
    }
    assert set(spec["paths"]["/v1/responses/{response_id}"]) == {"get", "delete"}
    assert "input" in spec["components"]["schemas"]["ResponsesRequest"]["required"]
    assert "<code>/v1/responses</code>" in docs and "<code>/v1/responses/{response_id}</code>" in docs


async def test_admission_refuses_beyond_the_queue_in_openai_s_shape() -> None:
    app, _ = replay_app(REPLY * 50, rate=50, max_active=1, max_queued=0)
    async with asgi_client(app) as client:

        async def one() -> httpx.Response:
            return await client.post("/v1/responses", json=body(stream=True, max_output_tokens=20))

        first = asyncio.ensure_future(one())
        await asyncio.sleep(0.2)  # the first holds the only slot
        err = error_of(await client.post("/v1/responses", json=body()), 429)
        assert err["type"] == "rate_limit_error"
        assert (await first).status_code == 200

"""A finished request leaves no reference cycle: its objects are freed by reference counting when it ends.

Under load the cyclic collector's full pass walks every tracked object, and while it runs no stream sends (a
pause of tens of milliseconds with 1,000 streams open, benchmarks/server_load.py). A request whose objects
form a cycle (a callback that refers to its owner, a closure that refers to itself, an exception that holds
the frame that holds it) survives its end until such a pass, so every finished stream adds to the next pause.
Each case runs one request through the ASGI app with the collector off, then counts what ``gc.collect()``
finds unreachable: it must be nothing, on every path a request can take (streamed or whole, finished, cut by
the client, refused, failed).
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tokenrelay import load_tokenizer
from tokenrelay.engines import ReplayEngine
from tokenrelay.server import ServerConfig, create_app
from tokenrelay.server.collector import FULL_PASS_EVERY

TEXT = "Hello 🙂 world: नमस्ते, 日本語のテキスト. The end."


def app_for(**engine_options: Any) -> Any:
    engine = ReplayEngine(load_tokenizer("smollm2"), TEXT, **{"rate": None, **engine_options})
    return create_app(engine, ServerConfig())


async def call(
    app: Any, path: str, body: dict[str, Any], *, leave_after: int | None = None
) -> tuple[int, bytes]:
    """One POST through the ASGI app; the status and body. The client disconnects after ``leave_after`` body
    messages (0: 50 ms after sending its request)."""
    raw = json.dumps(body).encode()
    pending = [{"type": "http.request", "body": raw, "more_body": False}]
    gone = asyncio.Event()
    status = 0
    out: list[bytes] = []

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop()
        if leave_after == 0:  # leaves while the reply is being generated
            await asyncio.sleep(0.05)
            gone.set()
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        else:
            out.append(message.get("body", b""))
            if leave_after is not None and len(out) >= leave_after:
                gone.set()
                await asyncio.sleep(0)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"test"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    await app(scope, receive, send)
    return status, b"".join(out)


CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "hi"}]

CASES: dict[str, tuple[dict[str, Any], str, dict[str, Any], int | None, int]] = {
    # name: (engine options, path, body, leave_after, expected status)
    "chat stream": ({}, CHAT, {"messages": MESSAGES, "stream": True}, None, 200),
    "chat stream, every option": (
        {},
        CHAT,
        {
            "messages": MESSAGES,
            "stream": True,
            "stop": ["world", "zzz"],
            "return_token_ids": True,
            "stream_options": {"include_usage": True, "include_step_times": True},
        },
        None,
        200,
    ),
    "completion stream, max_tokens": (
        {},
        "/v1/completions",
        {"prompt": "hi", "stream": True, "max_tokens": 5},
        None,
        200,
    ),
    "chat whole": ({}, CHAT, {"messages": MESSAGES}, None, 200),
    "completion whole": ({}, "/v1/completions", {"prompt": "hi"}, None, 200),
    "client leaves mid-stream": ({"rate": 50.0}, CHAT, {"messages": MESSAGES, "stream": True}, 4, 200),
    "client leaves a whole reply": ({"rate": 50.0}, CHAT, {"messages": MESSAGES}, 0, 0),
    "engine fails mid-stream": ({"fail_after": 3}, CHAT, {"messages": MESSAGES, "stream": True}, None, 200),
    "engine fails a whole reply": ({"fail_after": 3}, CHAT, {"messages": MESSAGES}, None, 500),
    "invalid body": ({}, CHAT, {"messages": "nope"}, None, 400),
    "unknown model": ({}, CHAT, {"messages": MESSAGES, "model": "nope"}, None, 404),
}


def _describe(obj: object) -> str:
    kind = type(obj).__name__
    if kind == "cell":
        try:
            return "cell → " + type(obj.cell_contents).__name__  # type: ignore[attr-defined]
        except ValueError:
            return "empty cell"
    name = getattr(obj, "__qualname__", None)
    return f"{kind} {name}" if isinstance(name, str) else kind


def unreachable_cycles() -> list[list[str]]:
    """Collect; return each reference cycle among what was unreachable, as its members' descriptions."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        garbage = list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    members = {id(o): o for o in garbage}
    edges = {k: [id(r) for r in gc.get_referents(o) if id(r) in members] for k, o in members.items()}
    # Tarjan's strongly connected components, iteratively: each one with an edge inside it is a cycle.
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on_stack: set[int] = set()
    cycles: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work: list[tuple[int, int]] = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = len(index)
                stack.append(v)
                on_stack.add(v)
            if i < len(edges[v]):
                work.append((v, i + 1))
                w = edges[v][i]
                if w not in index:
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1 or v in edges[v]:
                    cycles.append(sorted(_describe(members[w]) for w in component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return cycles


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.parametrize("case", list(CASES))
def test_a_finished_request_leaves_no_cycle(case: str, collector_off: None) -> None:
    options, path, body, leave_after, status = CASES[case]
    app = app_for(**options)
    loop = asyncio.new_event_loop()
    try:
        # The first request warms what is built once per process (caches, compiled tables, lazy imports).
        loop.run_until_complete(call(app, path, body, leave_after=leave_after))
        gc.collect()
        got, _ = loop.run_until_complete(call(app, path, body, leave_after=leave_after))
        assert got == status
        assert unreachable_cycles() == []
    finally:
        loop.close()


@pytest.mark.parametrize("tune", [True, False])
def test_the_collector_is_tuned_while_the_app_runs(tune: bool) -> None:
    """The lifespan freezes what exists at startup (the engine among it) and makes full passes rarer; at
    shutdown the collector is as it was. ``tune_gc=False`` leaves it alone."""
    engine = ReplayEngine(load_tokenizer("smollm2"), TEXT, rate=None)
    app = create_app(engine, ServerConfig(tune_gc=tune))
    gc.unfreeze()
    before = gc.get_threshold()

    def tracked(obj: object) -> bool:
        return any(o is obj for o in gc.get_objects())

    async def run() -> tuple[int, bool, tuple[int, ...]]:
        async with app.router.lifespan_context(app):
            return gc.get_freeze_count(), tracked(engine), gc.get_threshold()

    frozen, engine_tracked, during = asyncio.run(run())
    if tune:
        assert frozen > 10_000
        assert not engine_tracked  # out of the collector's walks
        assert during == (before[0], before[1], max(before[2], FULL_PASS_EVERY))
    else:
        assert (frozen, engine_tracked, during) == (0, True, before)
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == before
    assert tracked(engine)

"""The probe against real servers on loopback (no proxy): tokenrelay's own server with the replay engine, the
same behind a middleware that buffers the whole body, an OpenAI-style endpoint with bad habits, and the CLI."""

from __future__ import annotations

import hashlib
import json
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import tokenrelay
from _uvicorn import serve
from tokenrelay import cli, load_tokenizer
from tokenrelay.doctor._checks import FIX_WHOLE_BODY
from tokenrelay.doctor._report import Status
from tokenrelay.doctor.probe import DoctorOptions, endpoints, run_doctor
from tokenrelay.engines import ReplayEngine
from tokenrelay.server import ServerConfig, create_app

CORPUS = (Path(__file__).resolve().parent / "data" / "multilingual.txt").read_bytes().decode("utf-8")
FAST = DoctorOptions(events=30, cadence_ms=50.0, seed=3)


def relay_app(*, diagnostics: bool = True, rate: float = 100.0) -> Starlette:
    engine = ReplayEngine(load_tokenizer("smollm2"), CORPUS, rate=rate)
    return create_app(engine, ServerConfig(diagnostics=diagnostics))


class ETagMiddleware:
    """Hashes the whole response for an ETag (and a Content-Length), so it sends nothing until the end."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start: Message = {}
        body: list[bytes] = []

        async def hold(message: Message) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
                return
            body.append(message.get("body", b""))
            if not message.get("more_body", False):
                data = b"".join(body)
                headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
                headers += [
                    (b"etag", f'"{hashlib.sha256(data).hexdigest()[:16]}"'.encode()),
                    (b"content-length", str(len(data)).encode()),
                ]
                await send({**start, "headers": headers})
                await send({"type": "http.response.body", "body": data})

        await self.app(scope, receive, hold)


@pytest.fixture(scope="module")
def relay() -> Iterator[str]:
    with serve(relay_app()) as url:
        yield url


async def test_tokenrelay_server_direct_passes(relay: str) -> None:
    report = await run_doctor(relay + "/v1/", FAST)
    assert report.mode == "diagnostics" and not report.failed, report.render_text()
    for name in (
        "timing",
        "bytes",
        "text",
        "end",
        "cancel",
        "content-type",
        "cache-control",
        "x-accel-buffering",
    ):
        assert report.check(name).status is Status.PASS, report.render_text()
    assert report.check("framing").fix is None  # the probe's own CRLF is not the deployment's to fix


async def test_whole_body_middleware_is_a_lump_pointing_at_it() -> None:
    with serve(ETagMiddleware(relay_app())) as url:
        report = await run_doctor(url, DoctorOptions(events=30, cadence_ms=50.0, seed=3))
    timing = report.check("timing")
    assert timing.status is Status.FAIL and timing.message.startswith("one lump at the end: 31 of 31")
    assert timing.hop is not None and timing.hop.startswith("middleware that needs the whole body (ETag")
    assert timing.fix == FIX_WHOLE_BODY and report.exit_status == 1
    assert report.check("bytes").status is Status.PASS  # held, not damaged
    assert report.check("cancel").status is Status.PASS  # the inner app still saw the client leave


async def test_any_openai_endpoint_gets_a_chat_request() -> None:
    with serve(relay_app(diagnostics=False)) as url:
        report = await run_doctor(url, DoctorOptions(max_tokens=40))
    assert report.mode == "chat", report.render_text()
    assert report.check("status").status is Status.PASS and report.check("end").status is Status.PASS
    assert report.check("framing").status is Status.PASS and report.check("timing").status is Status.PASS
    assert report.check("frames").message.endswith("frames per token")


def bad_habits_app() -> Starlette:
    """An OpenAI-style endpoint that frames with CRLF and escapes 🦙 as two half-pairs in two chunks."""

    async def chat(request: Request) -> StreamingResponse:
        pieces = ["Hi", " ", "\\ud83e", "\\udd99", " there"] * 3

        async def frames() -> AsyncIterator[bytes]:
            for piece in pieces:
                yield f'data: {{"choices":[{{"index":0,"delta":{{"content":"{piece}"}}}}]}}\r\n\r\n'.encode()
            yield b"data: [DONE]\r\n\r\n"

        return StreamingResponse(frames(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


async def test_chat_endpoint_problems_are_reported() -> None:
    with serve(bad_habits_app()) as url:
        report = await run_doctor(url + "/v1/chat/completions", DoctorOptions(model="m"))
    assert report.mode == "chat"
    text, framing = report.check("text"), report.check("framing")
    assert text.status is Status.FAIL and text.message.startswith("6 lone surrogate halves")
    assert framing.status is Status.WARN and "would see 0 of 16 events" in framing.message
    assert report.check("cache-control").status is Status.WARN


async def test_unreachable_and_missing_diagnostics() -> None:
    report = await run_doctor("http://127.0.0.1:9", DoctorOptions(timeout=5))
    assert report.exit_status == 1 and report.check("connect").status is Status.FAIL
    with serve(bad_habits_app()) as url:
        report = await run_doctor(url, DoctorOptions(mode="diagnostics"))
    assert report.check("status").status is Status.FAIL and "HTTP 404" in report.check("status").message


def test_endpoints_accept_base_v1_and_endpoint_urls() -> None:
    for url in ("http://h:1", "http://h:1/", "http://h:1/v1", "http://h:1/v1/chat/completions"):
        assert endpoints(url) == (
            "http://h:1",
            "http://h:1/v1/diagnostics/stream",
            "http://h:1/v1/chat/completions",
        )
    assert endpoints("https://h/api/v1/diagnostics/stream")[0] == "https://h/api"


def test_cli_doctor_writes_table_json_svg_and_html(
    relay: str, tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    svg, html = tmp_path / "t.svg", tmp_path / "t.html"
    argv = [
        "doctor",
        relay,
        "--events",
        "20",
        "--seed",
        "9",
        "--no-cancel",
        "--svg",
        str(svg),
        "--html",
        str(html),
    ]
    assert cli.main(argv) == 0
    table = capsysbinary.readouterr().out.decode("utf-8")
    assert table.startswith(f"tokenrelay doctor {relay}  (diagnostics, tokenrelay {tokenrelay.__version__}, ")
    assert "PASS  timing" in table and "SKIP  cancel" in table and "seed 9 (replay: --seed 9)" in table
    ET.fromstring(svg.read_text("utf-8"))
    page = html.read_text("utf-8")
    assert (
        "<svg" in page
        and f"target: <code>{relay}</code>" in page
        and f"tokenrelay {tokenrelay.__version__}" in page
    )
    assert cli.main(["doctor", relay, "--events", "20", "--no-cancel", "--json"]) == 0
    data = json.loads(capsysbinary.readouterr().out)
    assert data["ok"] is True and data["facts"]["plan"]["events"] == "20"


def test_cli_doctor_exit_status_on_fail_and_usage_error(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    assert cli.main(["doctor", "http://127.0.0.1:9", "--timeout", "3"]) == 1
    assert "FAIL  connect" in capsysbinary.readouterr().out.decode()
    assert cli.main(["doctor", "http://127.0.0.1:9", "-H", "no colon"]) == 2
    assert "--header wants" in capsysbinary.readouterr().err.decode()


class RequireKey:
    """Lets a request through only with ``Authorization: Bearer KEY``, as a server with an API key does."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app, self.key = app, key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and (b"authorization", f"Bearer {self.key}".encode()) not in scope["headers"]
        ):
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"{}"})
            return
        await self.app(scope, receive, send)


def test_cli_doctor_sends_the_api_key_from_the_option_or_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    with serve(RequireKey(relay_app(), "k-123")) as url:
        argv = ["doctor", url, "--mode", "diagnostics", "--events", "10", "--json"]
        monkeypatch.delenv("TOKENRELAY_API_KEY", raising=False)
        assert cli.main(argv) == 1
        assert "HTTP 401" in capsysbinary.readouterr().out.decode()
        assert cli.main([*argv, "--api-key", "k-123"]) == 0
        first = json.loads(capsysbinary.readouterr().out)
        monkeypatch.setenv("TOKENRELAY_API_KEY", "k-123")
        assert cli.main(argv) == 0
        second = json.loads(capsysbinary.readouterr().out)
    for data in (first, second):  # the stream and the status endpoint (cancel) both got the key
        checks = {c["check"]: c["status"] for c in data["checks"]}
        assert checks["timing"] == "PASS" and checks["cancel"] == "PASS"

"""The servers behind the proxies in the doctor's proxy tests, and the checks every proxied report must pass.

* :func:`relay_upstream`: tokenrelay's own server (``create_app`` with the replay engine, diagnostic routes
  on) on uvicorn's h11 protocol, as in the nginx tests.
* :func:`other_upstream`: an OpenAI-style chat endpoint tokenrelay does not own, with a common habit: its
  first write is a 2 KiB padding comment (sent to push early bytes past buffers) and it sends
  ``Cache-Control: no-cache`` without ``no-transform``, so compressing proxies do compress it. The doctor
  meets it in chat mode (no send times).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from _uvicorn import serve
from tokenrelay import load_tokenizer
from tokenrelay.doctor._report import Report, Status
from tokenrelay.doctor.probe import DoctorOptions, run_doctor
from tokenrelay.engines import ReplayEngine
from tokenrelay.server import create_app
from tokenrelay.wire._chat import DONE, ChatChunkWriter

__all__ = ["OTHER_EVENTS", "assert_clean", "doctor_through_caddy", "other_upstream", "relay_upstream"]

CORPUS = (Path(__file__).resolve().parents[1] / "data" / "multilingual.txt").read_bytes().decode("utf-8")
OTHER_EVENTS = 30
OTHER_CADENCE_S = 0.05


@contextmanager
def relay_upstream(http: str = "h11") -> Iterator[int]:
    """tokenrelay's server on a free port; yields the port."""
    app = create_app(ReplayEngine(load_tokenizer("smollm2"), CORPUS, rate=50.0))
    with serve(app, http=http) as url:
        yield int(urlsplit(url).port or 0)


async def _other_frames() -> AsyncIterator[bytes]:
    writer = ChatChunkWriter(id="chatcmpl-other", model="other", created=0, system_fingerprint=None)
    yield b": " + b"-" * 2048 + b"\n\n"  # padding: the first write is over every "minimum length"
    yield writer.role()
    for i in range(OTHER_EVENTS):
        await asyncio.sleep(OTHER_CADENCE_S)
        yield writer.delta(f"word {i} of a reply that streams, नमस्ते 🦙. ")
    yield writer.finish("stop")
    yield DONE


async def _other_chat(request: Request) -> StreamingResponse:
    await request.body()
    headers = {"Cache-Control": "no-cache"}
    return StreamingResponse(_other_frames(), media_type="text/event-stream", headers=headers)


@contextmanager
def other_upstream() -> Iterator[int]:
    """The chat endpoint tokenrelay does not own, on a free port; yields the port."""
    app = Starlette(routes=[Route("/v1/chat/completions", _other_chat, methods=["POST"])])
    with serve(app, http="h11") as url:
        yield int(urlsplit(url).port or 0)


def assert_clean(report: Report) -> None:
    """Whatever a proxy does to the timing, it must not damage a byte, and the stream must end properly."""
    names = ("bytes", "text", "end") if report.mode == "diagnostics" else ("text", "end")
    for name in names:
        assert report.check(name).status is Status.PASS, report.render_text()


async def doctor_through_caddy(url: str, options: DoctorOptions) -> Report:
    """``run_doctor``, up to twice more when the stream was cut (the ``end`` check failed).

    Caddy 2.6.2 here closes about one upstream connection in ten a few milliseconds after the response
    starts, tokenrelay's real chat streams alike (the doctor says so: "Caddy closed its connection to the
    server mid-stream"). That is a finding about Caddy for the doctor to report, not what these tests check.
    """
    report = await run_doctor(url, options)
    for _ in range(2):
        try:
            if report.check("end").status is not Status.FAIL:
                break
        except KeyError:
            break
        report = await run_doctor(url, options)
    return report
